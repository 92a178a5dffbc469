//! A crash through the runtime: an agent process (this test binary, run again as the child)
//! is killed with SIGKILL while a call runs; `Agent::resume` reopens the session from the
//! configuration it recorded, recovers it, says what became of each call, and its next
//! request to the model carries the repaired results.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use toolrail_runtime::{Agent, SessionConfig, Store};
use toolrail_session_log::{EventData, SessionId};
use toolrail_test_support::http::read_request;

const CHILD: &str = "TOOLRAIL_CRASH_CHILD";

/// A model server answering each request with the next whole completion of `answers`,
/// sending the bodies it was asked with back through the channel.
fn model_server(answers: Vec<serde_json::Value>) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (seen, requests) = mpsc::channel();
    std::thread::spawn(move || {
        for answer in answers {
            let Ok((mut socket, _)) = listener.accept() else {
                return;
            };
            let _ = seen.send(read_request(&mut socket));
            let body = answer.to_string();
            let _ = write!(
                socket,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, requests)
}

fn configuration(folder: &Path, url: &str) -> SessionConfig {
    configuration_with(folder, url, r#"["bash"]"#)
}

fn configuration_with(folder: &Path, url: &str, tools: &str) -> SessionConfig {
    let workspace = folder.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    SessionConfig::from_toml(&format!(
        r#"
        [workspace]
        roots = ["{workspace}"]
        [tools]
        enabled = {tools}
        [permissions]
        preset = "full-auto"
        [model]
        provider = "openai"
        base_url = "{url}"
        model = "fake"
        [model.retry]
        attempts = 1
        [store]
        url = "jsonl:{sessions}"
        "#,
        workspace = workspace.display(),
        sessions = folder.join("sessions").display(),
    ))
    .unwrap()
}

/// Waits (bounded) until the child's log shows `call` started, the child still running.
fn wait_for_start(store: &Store, id: &SessionId, call: &str, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let started = store.read(id).is_ok_and(|events| {
            events.iter().any(|event| {
                matches!(event.data, EventData::ToolStart(_))
                    && event.call_id.as_ref().is_some_and(|id| id.as_str() == call)
            })
        });
        if started {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the child's call {call} never started"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended before its call {call} started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child: an agent whose turn runs a slow command, until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let (Some(folder), Ok(url)) = (std::env::var_os(CHILD), std::env::var("TOOLRAIL_CRASH_URL"))
    else {
        return; // Run as a test of its own: nothing to do.
    };
    let agent = Agent::builder()
        .config(configuration(Path::new(&folder), &url))
        .session_id("crash")
        .build()
        .await
        .unwrap();
    let _ = agent.prompt("Start the job.").await;
    panic!("the child was to be killed before its turn ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_call_is_resumed_with_honest_results_the_model_then_sees() {
    let folder = tempfile::tempdir().unwrap();
    let token = format!("6{}.5", std::process::id());
    let tool_call = |id: &str, command: &str| {
        serde_json::json!({"id": id, "type": "function", "function": {
            "name": "bash",
            "arguments": serde_json::json!({"command": command, "description": "job"}).to_string()}})
    };
    let (url, requests) = model_server(vec![
        serde_json::json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [tool_call("c1", &format!("sleep {token}")), tool_call("c2", "echo after")]}}]}),
        serde_json::json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "I will check what the job did."}}]}),
    ]);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture"])
        .env(CHILD, folder.path())
        .env("TOOLRAIL_CRASH_URL", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let store = Store::jsonl(folder.path().join("sessions")).unwrap();
    let id = SessionId::new("crash");
    wait_for_start(&store, &id, "c1", &mut child);
    child.kill().unwrap(); // SIGKILL: nothing of the agent runs after this
    child.wait().unwrap();
    let first = requests.recv().unwrap();
    assert!(first.contains("Start the job."), "{first}");

    // One call: from the store and the id, as the session recorded its configuration.
    let resumed = Agent::resume(&store, &id).await.unwrap();
    let report = resumed.recovery.to_string();
    assert_eq!(
        report,
        "c1 (bash): TOOL_OUTCOME_UNKNOWN — it started and may have acted: verify before retrying\n\
         c2 (bash): TOOL_NOT_STARTED — it never started: safe to retry if still needed\n\
         turn 1 closed as interrupted",
    );
    let answer = resumed.agent.prompt("What happened?").await.unwrap();
    assert_eq!(answer.text, "I will check what the job did.");
    let next: serde_json::Value = serde_json::from_str(&requests.recv().unwrap()).unwrap();
    let messages = next["messages"].as_array().unwrap();
    let result = |id: &str| {
        messages
            .iter()
            .find(|message| message["role"] == "tool" && message["tool_call_id"] == id)
            .and_then(|message| message["content"].as_str())
            .unwrap_or_else(|| panic!("no result for {id} in {next}"))
            .to_owned()
    };
    assert!(result("c1").starts_with("Error: "), "{}", result("c1"));
    assert!(result("c1").contains("may have"), "{}", result("c1"));
    assert!(result("c2").contains("did not run"), "{}", result("c2"));
    assert_eq!(
        messages.last().unwrap()["content"],
        "What happened?",
        "the conversation goes on after the repaired results"
    );
    // Nothing of the killed call outlived its agent.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !toolrail_test_support::processes::live_with(std::slice::from_ref(&token)).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the killed agent's command still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const SHELLS_CHILD: &str = "TOOLRAIL_SHELLS_CHILD";
const SHELL_TOOLS: &str = r#"["bash", "shell_output", "shell_write", "shell_kill", "shell_list"]"#;

/// The child of the shells test: an agent that starts three background shells, then a slow
/// foreground command, until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shells_child() {
    let (Some(folder), Ok(url)) = (
        std::env::var_os(SHELLS_CHILD),
        std::env::var("TOOLRAIL_CRASH_URL"),
    ) else {
        return; // Run as a test of its own: nothing to do.
    };
    let agent = Agent::builder()
        .config(configuration_with(Path::new(&folder), &url, SHELL_TOOLS))
        .session_id("shells")
        .build()
        .await
        .unwrap();
    let _ = agent.prompt("Start the servers.").await;
    panic!("the child was to be killed before its turn ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shells_killed_with_their_runtime_are_reported_ended_once_after_resume() {
    let folder = tempfile::tempdir().unwrap();
    let token = format!("7{}", std::process::id());
    let call = |id: &str, arguments: serde_json::Value| {
        serde_json::json!({"id": id, "type": "function", "function": {
            "name": "bash", "arguments": arguments.to_string()}})
    };
    let background = |id: &str, name: &str, tty: bool| {
        call(
            id,
            serde_json::json!({
            "command": format!("echo ready-{name}; setsid sleep {token}.{name} & exec sleep {token}.{name}"),
            "description": "server", "background": true, "tty": tty}),
        )
    };
    let (url, requests) = model_server(vec![
        serde_json::json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [background("c1", "1", false), background("c2", "2", false), background("c3", "3", true),
                call("c4", serde_json::json!({"command": format!("sleep {token}.9"), "description": "wait"}))]}}]}),
        serde_json::json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "c5", "type": "function", "function": {"name": "shell_list", "arguments": "{}"}}]}}]}),
        serde_json::json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "They are gone; I will start them again."}}]}),
    ]);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "shells_child", "--nocapture"])
        .env(SHELLS_CHILD, folder.path())
        .env("TOOLRAIL_CRASH_URL", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let store = Store::jsonl(folder.path().join("sessions")).unwrap();
    let id = SessionId::new("shells");
    wait_for_start(&store, &id, "c4", &mut child);
    let needle = [token.clone()];
    let sleeping = toolrail_test_support::processes::live_with(&needle);
    assert!(
        sleeping.len() >= 6,
        "three shells with a setsid'd child each: {sleeping:?}"
    );
    child.kill().unwrap(); // SIGKILL: the runtime and nothing else
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !toolrail_test_support::processes::live_with(&needle).is_empty() {
        assert!(
            Instant::now() < deadline,
            "a shell outlived its runtime: {:?}",
            toolrail_test_support::processes::live_with(&needle)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = requests.recv().unwrap();
    assert!(first.contains("Start the servers."), "{first}");

    let resumed = Agent::resume(&store, &id).await.unwrap();
    let answer = resumed.agent.prompt("Are the servers up?").await.unwrap();
    assert_eq!(answer.text, "They are gone; I will start them again.");
    let events = store.read(&id).unwrap();
    let exited: Vec<(String, String)> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ShellExited(exited) => {
                Some((exited.id.clone(), exited.end.as_str().to_owned()))
            }
            _ => None,
        })
        .collect();
    let ended = |id: &str| (id.to_owned(), "ended_with_runtime".to_owned());
    assert_eq!(exited, [ended("sh1"), ended("sh2"), ended("sh3")]);
    // The model is told once, with each shell's output so far.
    let second = requests.recv().unwrap();
    assert_eq!(
        second.matches("ended with the runtime").count(),
        3,
        "{second}"
    );
    for name in ["ready-1", "ready-2", "ready-3"] {
        assert!(second.contains(name), "{name} missing from {second}");
    }
    assert!(second.contains("none of these is running now"), "{second}");
    let third = requests.recv().unwrap();
    assert_eq!(
        third.matches("ended with the runtime").count(),
        3,
        "told once, not again: {third}"
    );
    let listed: serde_json::Value = serde_json::from_str(&third).unwrap();
    let list = listed["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["tool_call_id"] == "c5")
        .and_then(|message| message["content"].as_str())
        .unwrap()
        .to_owned();
    assert_eq!(list.matches("ended with runtime").count(), 3, "{list}");
    assert!(!list.contains("running"), "{list}");

    // A second resume finds nothing left to report.
    drop(resumed);
    let again = Agent::resume(&store, &id).await.unwrap();
    drop(again);
    let reports = store
        .read(&id)
        .unwrap()
        .iter()
        .filter(|event| matches!(&event.data, EventData::ShellExited(_)))
        .count();
    assert_eq!(reports, 3);
}
