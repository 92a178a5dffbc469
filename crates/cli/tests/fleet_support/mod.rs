//! What the fleet's tests share: `toolrail` and its workers run as processes, bounded
//! waits on them and on the store, the slow-call scenario whose call leaves a marker, and
//! what a session taken over must look like.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolrail_runtime::scenario::RESUME_MESSAGE;
use toolrail_session_log::{Event, EventData, SessionId, event::TurnEndKind};
use toolrail_session_store::PostgresStore;

pub(crate) const TOOLRAIL: &str = env!("CARGO_BIN_EXE_toolrail");

pub(crate) fn toolrail(args: &[&str]) -> Output {
    Command::new(TOOLRAIL)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A worker process in the background, its output collected.
pub(crate) fn worker(url: &str, owner: &str, work_dir: &Path, idle_exit_ms: u64) -> Child {
    Command::new(TOOLRAIL)
        .env("NO_COLOR", "1")
        .args([
            "worker",
            "--store",
            url,
            "--owner",
            owner,
            "--lease-ms",
            "600",
            "--work-dir",
            work_dir.to_str().unwrap(),
            "--idle-exit-ms",
            &idle_exit_ms.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (bounded) for a child and returns its output; a child that hangs is killed.
pub(crate) fn finish(mut child: Child, within: Duration) -> Output {
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the worker did not stop within {within:?}:\n{}\n{}",
                text(&output.stdout),
                text(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Polls the store (bounded) until the session's log holds a `tool/start` of `call`.
pub(crate) fn wait_for_start(store: &PostgresStore, session: &str, call: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = store.read(&SessionId::new(session)).unwrap();
        let started = events.iter().any(|event| {
            matches!(event.data, EventData::ToolStart(_))
                && event.call_id.as_ref().is_some_and(|id| id.as_str() == call)
        });
        if started {
            return;
        }
        assert!(Instant::now() < deadline, "`{call}` never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn signal(child: &Child, name: &str) {
    let status = Command::new("bash")
        .args(["-c", &format!("kill -{name} {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
}

/// One turn: a slow command that first leaves a marker in the workspace (an effect outside
/// the log), then an answer.
pub(crate) fn slow_call_scenario(sleep_ms: u64) -> String {
    let command = format!(
        "echo started > c1.marker; sleep {}.{:03}",
        sleep_ms / 1000,
        sleep_ms % 1000
    );
    json!({
        "config": {"tools": {"enabled": ["bash"]}, "sandbox": {"mode": "workspace-write"},
                   "permissions": {"allow": ["bash"]}},
        "approvals": ["allowed_once"],
        "turns": [{"user": "go", "model": [
            {"tool_calls": [{"id": "c1", "name": "bash",
                "arguments": json!({"command": command, "description": "slow"}).to_string()}],
             "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}
        ]}]
    })
    .to_string()
}

/// Where the slow call's marker lands: the session's workspace under the workers' folder.
pub(crate) fn marker(work_dir: &Path, session: &str) -> std::path::PathBuf {
    work_dir.join(session).join("workspace").join("c1.marker")
}

pub(crate) fn enqueue(store: &PostgresStore, session: &str, scenario: &str) {
    store.enqueue(&SessionId::new(session), scenario).unwrap();
}

/// What a takeover must leave: `seq` dense, every event the first holder wrote before every
/// event of the second, the call with exactly one result — recovery's honest unknown — and
/// the session finished by a resumed turn.
pub(crate) fn check_taken_over(store: &PostgresStore, session: &str) -> Vec<Event> {
    let id = SessionId::new(session);
    let events = store.read(&id).unwrap();
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let tokens: Vec<i64> = store
        .written_under(&id)
        .unwrap()
        .into_iter()
        .map(|(_, token)| token.expect("every event of a worker's session is leased"))
        .collect();
    let first = tokens[0];
    let second_from = tokens
        .iter()
        .position(|token| *token != first)
        .expect("the second worker wrote");
    assert!(
        tokens[second_from..].iter().all(|token| *token > first),
        "a write of the first worker after the takeover: {tokens:?}"
    );
    assert!(
        tokens[second_from..]
            .windows(2)
            .all(|pair| pair[0] == pair[1]),
        "{tokens:?}"
    );
    let results: Vec<&Event> = events
        .iter()
        .filter(|event| {
            matches!(event.data, EventData::ToolResult(_))
                && event.call_id.as_ref().is_some_and(|id| id.as_str() == "c1")
        })
        .collect();
    assert_eq!(results.len(), 1, "c1 has one result");
    let EventData::ToolResult(record) = &results[0].data else {
        unreachable!()
    };
    assert_eq!(
        record.error_code().map(|code| code.as_str().to_owned()),
        Some("TOOL_OUTCOME_UNKNOWN".to_owned())
    );
    assert!(
        results[0].seq > second_from as u64,
        "the synthetic result is the second worker's"
    );
    let ends: Vec<TurnEndKind> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::TurnEnd(end) => Some(end.kind),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [TurnEndKind::Interrupted, TurnEndKind::Completed]);
    let resumed = events.iter().any(|event| match &event.data {
        EventData::TurnStart(start) => start.user[0].as_text() == Some(RESUME_MESSAGE),
        _ => false,
    });
    assert!(resumed, "the session went on with a resumed turn");
    events
}
