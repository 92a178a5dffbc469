//! toolrail as the client of a server on the stateless 2026-07-28 revision, written with the
//! official Python SDK (`mcp` on PyPI, which `.ci/run` installs under `target/ci-venv/mcp`):
//! the revision is negotiated, and a change of the server's tool list reaches the registry
//! through the subscription that revision requires (a server there tells no one else).
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
