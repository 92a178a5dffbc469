//! A runtime killed with SIGKILL while a `bash` call runs leaves none of the processes that
//! call started: not the command, not a child that left its session with `setsid`. Real
//! processes, checked through `/proc`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// Live processes with `token` in their command line.
fn live_with(token: &str) -> Vec<String> {
    toolrail_test_support::processes::live_with(&[token.to_owned()])
}

#[test]
fn a_runtime_killed_mid_call_leaves_no_process_of_the_call() {
    let dir = tempfile::tempdir().unwrap();
    // Sleep lengths no other process uses: the test finds them by their command lines.
    let token = format!("7{}.25", std::process::id());
    let detached = format!("8{}.25", std::process::id());
    let command = format!("(setsid sleep {detached} &) ; sleep {token}");
    let scenario = json!({
        "config": {"tools": {"enabled": ["bash"]}, "sandbox": {"mode": "full-access"},
                   "permissions": {"preset": "full-auto"}},
        "turns": [{"user": "go", "model": [
            {"tool_calls": [{"id": "c1", "name": "bash",
                "arguments": json!({"command": command, "description": "sleep"}).to_string()}],
             "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}
        ]}]
    });
    let file = dir.path().join("sleep.json");
    std::fs::write(&file, scenario.to_string()).unwrap();
    let mut runtime = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .args(["run", "--scenario", file.to_str().unwrap(), "--session-dir"])
        .arg(dir.path().join("session"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while live_with(&token).is_empty() || live_with(&detached).is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    runtime.kill().unwrap(); // SIGKILL: nothing of the runtime runs after this
    runtime.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = live_with(&token)
            .into_iter()
            .chain(live_with(&detached))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the call outlived the runtime: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
