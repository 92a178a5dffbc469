//! toolrail as the client of servers written with the official Python SDK (`mcp` on PyPI,
//! which `.ci/run` installs under `target/ci-venv/mcp`), on the stateless 2026-07-28
//! revision: the revision is negotiated, a change of the server's tool list reaches the
//! registry through the subscription that revision requires (a server there tells no one
//! else), and a server is ended the way MCP asks — stdin closed, then SIGTERM — so it can
//! finish what it keeps.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use toolrail_mcp::{McpConfig, McpServers, ServerState};
use toolrail_session_log::MemorySink;
use toolrail_tool_probe::Probe;
use toolrail_tools_core::{
    CallRequest, Pipeline, RegistryBuilder, pipeline::BatchControl, registry::CallOrigin,
};

/// The virtualenv's Python, or `None` outside CI when it is not installed.
fn python_or_skip() -> Option<PathBuf> {
    let python =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ci-venv/mcp/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the Python MCP SDK is missing: .ci/run installs it into target/ci-venv/mcp"
    );
    eprintln!("the Python MCP SDK is not installed: not run here");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_s_list_change_reaches_the_registry() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/changing.py");
    let config = McpConfig::from_json(
        &json!({"mcpServers": {"changing": {"command": python, "args": [script]}}}).to_string(),
        "test",
    )
    .unwrap();
    let registry = RegistryBuilder::new()
        .builtin(Probe::new(None))
        .build()
        .unwrap()
        .0;
    let servers = McpServers::start(&config, &registry).await;
    match &servers.states()[0].1 {
        ServerState::Running { protocol, .. } => assert_eq!(protocol, "2026-07-28"),
        other => panic!("not running: {other:?}"),
    }
    let resolves = |name: &str| {
        registry
            .snapshot()
            .resolve(name, CallOrigin::Model)
            .is_some()
    };
    assert!(!resolves("mcp__changing__grown"));
    let pipeline = Pipeline::builder(std::sync::Arc::new(MemorySink::new())).build();
    let grown = pipeline
        .execute_one(
            &registry.snapshot(),
            CallRequest::new("g1", 0, "mcp__changing__grow", "{}"),
            &BatchControl::default(),
        )
        .await
        .unwrap();
    assert!(!grown.record().is_error(), "{:?}", grown.record());
    // The change is told through the subscription; the list is read again after it settles.
    let mut waited = Duration::ZERO;
    while !resolves("mcp__changing__grown") {
        assert!(
            waited < Duration::from_secs(10),
            "the added tool never joined the registry"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    servers.shutdown().await;
}

/// How `farewell` shuts its server down.
#[derive(Clone, Copy)]
enum Shutdown {
    Once,
    /// Two callers at once: the second waits for the first's graceful stop.
    Twice,
}

/// Starts `tests/servers/farewell.py`, waits for it to run, and shuts it down (skipped
/// without the SDK): what the server wrote as it ended (nothing when it was killed), and
/// how long the shutdown took.
async fn farewell(deaf: bool, shutdown: Shutdown) -> Option<(String, Duration)> {
    let python = python_or_skip()?;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ended");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/farewell.py");
    let mut args = vec![json!(script), json!(marker)];
    if deaf {
        args.push(json!("deaf"));
    }
    let config = McpConfig::from_json(
        &json!({"mcpServers": {"farewell": {"command": python, "args": args}}}).to_string(),
        "test",
    )
    .unwrap();
    let registry = RegistryBuilder::new().build().unwrap().0;
    let servers = McpServers::start(&config, &registry).await;
    assert!(
        matches!(&servers.states()[0].1, ServerState::Running { .. }),
        "{:?}",
        servers.states()
    );
    let began = std::time::Instant::now();
    match shutdown {
        Shutdown::Once => servers.shutdown().await,
        Shutdown::Twice => {
            tokio::join!(servers.shutdown(), servers.shutdown());
        }
    }
    let took = began.elapsed();
    assert!(
        matches!(&servers.states()[0].1, ServerState::Withdrawn { why } if why.contains("stopped")),
        "{:?}",
        servers.states()
    );
    Some((std::fs::read_to_string(&marker).unwrap_or_default(), took))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_ends_by_itself_when_its_stdin_closes() {
    let Some((said, _)) = farewell(false, Shutdown::Once).await else {
        return;
    };
    // Before, the server was killed at once and never wrote a word.
    assert_eq!(said, "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_ignores_its_closed_stdin_is_sent_sigterm_then_ends() {
    let Some((said, took)) = farewell(true, Shutdown::Once).await else {
        return;
    };
    assert_eq!(said, "terminated");
    // The grace, not the server's own 30 s: a deaf server holds nobody up.
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_shutdown_waits_for_the_first_instead_of_killing_the_server() {
    let Some((said, _)) = farewell(true, Shutdown::Twice).await else {
        return;
    };
    // The second caller did not cut the first's grace short with a SIGKILL.
    assert_eq!(said, "terminated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_still_starting_is_ended_at_once() {
    // `sleep` never answers the handshake: it is spawned and waited for.
    let config = McpConfig::from_json(
        &json!({"mcpServers": {"mute": {"command": "sleep", "args": ["30"], "start": "lazy"}}})
            .to_string(),
        "test",
    )
    .unwrap();
    let registry = RegistryBuilder::new().build().unwrap().0;
    let servers = McpServers::start(&config, &registry).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(&servers.states()[0].1, ServerState::Starting));
    let began = std::time::Instant::now();
    servers.shutdown().await;
    // Not the graceful stop's limit (4 s): nothing is served yet, so nothing waits.
    let took = began.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
}
