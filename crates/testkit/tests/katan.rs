//! The providers end to end against a model server toolrail did not write: `llm-katan` (PyPI) in its echo
//! mode, speaking both formats. A whole agent loop per format: the model asks for a tool,
//! the call runs through the pipeline, its result goes back in the next request, which the
//! server accepts and answers.
//!
//! `.ci/run` installs llm-katan into a virtualenv; the test finds it through `LLM_KATAN`, the
//! `PATH`, or that virtualenv. Without it the test fails in CI and says so elsewhere.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, Secret, Wire};
use toolrail_session_log::{
    EventData, SessionId,
    event::{StopReason, TurnEndKind},
};
use toolrail_session_store::JsonlStore;
use toolrail_testkit::{RunOptions, Scenario};

/// Where `.ci/run` puts the virtualenv, relative to the workspace root.
const CI_VENV: &str = "target/ci-venv/llm-katan/bin/llm-katan";

fn katan() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LLM_KATAN") {
        return Some(PathBuf::from(path));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(CI_VENV);
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("llm-katan"))
            .find(|path| path.is_file())
    })
}

struct Server {
    child: tokio::process::Child,
    port: u16,
}

async fn start(program: PathBuf) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(program)
        .args(["-m", "echo-model", "-b", "echo", "-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["--providers", "openai,anthropic", "--disable-dashboard"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("llm-katan starts");
    // Bounded: a Python web server takes a second or two to listen.
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Server { child, port };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("llm-katan did not listen on port {port} within 30 s");
}

async fn loop_once(server: &Server, wire: Wire) {
    let base = match wire {
        Wire::OpenAi => format!("http://127.0.0.1:{}/v1", server.port),
        Wire::Anthropic => format!("http://127.0.0.1:{}", server.port),
    };
    let mut config = ProviderConfig::new(wire, base, "echo-model");
    // llm-katan wants a key, any key.
    config.api_key = ApiKey::Given(Secret::new("test-key"));
    let client = ProviderClient::new(config).unwrap();
    let session = tempfile::tempdir().unwrap();
    let scenario = Scenario::from_json(
        r#"{
          "config": {
            "tools": {"enabled": ["probe"]},
            "permissions": {"preset": "full-auto"},
            "limits": {"max_steps": 2}
          },
          "turns": [{"user": "Probe something.", "model": []}]
        }"#,
    )
    .unwrap();
    let report = scenario
        .run_with(
            session.path(),
            RunOptions {
                model: Some(Arc::new(client)),
                ..RunOptions::default()
            },
        )
        .await
        .unwrap_or_else(|error| panic!("{wire:?}: {error}"));
    let events = JsonlStore::new(session.path(), toolrail_session_store::Durability::None)
        .unwrap()
        .read(&SessionId::new("scenario"))
        .unwrap()
        .events;
    let messages: Vec<_> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::AssistantMessage(message) => Some(message.clone()),
            _ => None,
        })
        .collect();
    // Two model requests answered: the second carried the first call's result.
    assert_eq!(messages.len(), 2, "{wire:?}: {messages:?}");
    assert_eq!(messages[0].stop_reason, StopReason::ToolCalls, "{wire:?}");
    let calls = messages[0].tool_calls();
    let (call_id, name) = (&calls[0].call_id, calls[0].name);
    assert_eq!(name, "probe");
    let result = events.iter().find_map(|event| match &event.data {
        EventData::ToolResult(record) if event.call_id.as_ref() == Some(call_id) => {
            Some(record.clone())
        }
        _ => None,
    });
    assert!(result.is_some(), "{wire:?}: the call committed a result");
    assert_eq!(report.turn_ends, [TurnEndKind::MaxSteps], "{wire:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_loop_against_llm_katan_in_both_formats() {
    let Some(program) = katan() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "llm-katan is missing: .ci/run installs it into {CI_VENV}"
        );
        eprintln!("llm-katan not found (set LLM_KATAN or run .ci/run): not run here");
        return;
    };
    let mut server = start(program).await;
    loop_once(&server, Wire::OpenAi).await;
    loop_once(&server, Wire::Anthropic).await;
    let _ = server.child.kill().await;
}
