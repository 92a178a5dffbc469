//! A fleet of `toolrail worker` processes sharing one PostgreSQL store (a real server on
//! 127.0.0.1, started per test): the queue drained by several workers, `run --store`, a
//! worker killed with SIGKILL mid-call whose session another worker takes over, recovers
//! and finishes, and a paused worker (SIGSTOP past its lease) whose writes are refused
//! once it resumes.
#![allow(
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
use toolrail_session_store::{Durability, PostgresStore};
use toolrail_test_support::pg::PgServer;

const TOOLRAIL: &str = env!("CARGO_BIN_EXE_toolrail");

fn toolrail(args: &[&str]) -> Output {
    Command::new(TOOLRAIL)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A worker process in the background, its output collected.
fn worker(url: &str, owner: &str, work_dir: &Path, idle_exit_ms: u64) -> Child {
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
fn finish(mut child: Child, within: Duration) -> Output {
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
fn wait_for_start(store: &PostgresStore, session: &str, call: &str) {
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

fn signal(child: &Child, name: &str) {
    let status = Command::new("bash")
        .args(["-c", &format!("kill -{name} {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
}

/// One turn: a slow command that first leaves a marker in the workspace (an effect outside
/// the log), then an answer.
fn slow_call_scenario(sleep_ms: u64) -> String {
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
fn marker(work_dir: &Path, session: &str) -> std::path::PathBuf {
    work_dir.join(session).join("workspace").join("c1.marker")
}

fn enqueue(store: &PostgresStore, session: &str, scenario: &str) {
    store.enqueue(&SessionId::new(session), scenario).unwrap();
}

/// What a takeover must leave: `seq` dense, every event the first holder wrote before every
/// event of the second, the call with exactly one result — recovery's honest unknown — and
/// the session finished by a resumed turn.
fn check_taken_over(store: &PostgresStore, session: &str) -> Vec<Event> {
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

#[test]
fn workers_drain_the_queue_and_run_store_drives_one_session() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scenario_file = dir.path().join("quick.json");
    std::fs::write(&scenario_file, slow_call_scenario(1)).unwrap();
    // `toolrail run --scenario quick.json --store <store> <more>`.
    let run_stored = |store: &str, more: &[&str]| {
        let mut args = vec![
            "run",
            "--scenario",
            scenario_file.to_str().unwrap(),
            "--store",
            store,
        ];
        args.extend_from_slice(more);
        toolrail(&args)
    };
    for number in 0..6 {
        let output = run_stored(&url, &["--session", &format!("q{number}"), "--enqueue"]);
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    let again = run_stored(&url, &["--session", "q0", "--enqueue"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("knows session `q0` already"));
    let output = toolrail(&[
        "worker",
        "--store",
        &url,
        "--workers",
        "3",
        "--owner",
        "w",
        "--idle-exit-ms",
        "300",
        "--work-dir",
        dir.path().join("work").to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains("workers drove 6 sessions: 6 done, 0 failed, 0 taken over"),
        "{stdout}"
    );
    for number in 0..6 {
        let events = store.read(&SessionId::new(format!("q{number}"))).unwrap();
        assert!(
            matches!(events.last().map(|event| &event.data),
                Some(EventData::TurnEnd(end)) if end.kind == TurnEndKind::Completed),
            "q{number}"
        );
    }
    let listing = text(&toolrail(&["sessions", "--store", &url]).stdout);
    assert_eq!(listing.matches("ended: completed").count(), 6, "{listing}");

    let output = run_stored(&url, &["--session", "direct"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("session direct (token 1) finished: turns completed"));
    let direct = store.read(&SessionId::new("direct")).unwrap();
    assert_eq!(direct[0].data.kind(), "session/start");
    // The same name again is refused: a run never continues another session's log.
    let again = run_stored(&url, &["--session", "direct"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("session `direct` already holds"));
    let not_postgres = run_stored("/tmp/x", &[]);
    assert_eq!(not_postgres.status.code(), Some(2));
    assert!(text(&not_postgres.stderr).contains("give a postgres:// URL"));
}

#[test]
fn a_killed_worker_s_session_is_taken_over_recovered_and_finished() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let work = tempfile::tempdir().unwrap();
    enqueue(&store, "s1", &slow_call_scenario(60_000));
    let a = worker(&url, "A", work.path(), 60_000);
    wait_for_start(&store, "s1", "c1");
    // The marker is written by the call's body, just after its start is logged.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker(work.path(), "s1").exists() {
        assert!(Instant::now() < deadline, "the call never acted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut a = a;
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let b = finish(
        worker(&url, "B", work.path(), 2_000),
        Duration::from_secs(60),
    );
    let stdout = text(&b.stdout);
    assert!(b.status.success(), "{stdout}\n{}", text(&b.stderr));
    assert!(
        stdout.contains("B: session s1 (token 2) finished: turns completed, resumed after"),
        "{stdout}"
    );
    check_taken_over(&store, "s1");
    let listing = text(&toolrail(&["sessions", "--store", &url]).stdout);
    assert!(listing.contains("ended: completed"), "{listing}");
}

#[test]
fn a_paused_worker_is_fenced_after_a_takeover_and_stops_driving() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let work = tempfile::tempdir().unwrap();
    enqueue(&store, "s1", &slow_call_scenario(1_500));
    let a = worker(&url, "A", work.path(), 1_000);
    wait_for_start(&store, "s1", "c1");
    signal(&a, "STOP");
    // Past A's lease (600 ms): B takes the session over and finishes it while A sleeps.
    let b = finish(
        worker(&url, "B", work.path(), 1_000),
        Duration::from_secs(60),
    );
    let b_out = text(&b.stdout);
    assert!(b.status.success(), "{b_out}\n{}", text(&b.stderr));
    assert!(
        b_out.contains("B: session s1 (token 2) finished"),
        "{b_out}"
    );
    let before = store.read(&SessionId::new("s1")).unwrap().len();
    signal(&a, "CONT");
    let a = finish(a, Duration::from_secs(60));
    let a_err = text(&a.stderr);
    assert!(
        a_err.contains(
            "A: session s1 (token 1) was taken over by another worker; stopped driving it"
        ),
        "{a_err}\n{}",
        text(&a.stdout)
    );
    let events = check_taken_over(&store, "s1");
    assert_eq!(events.len(), before, "A wrote nothing after it resumed");
}

#[test]
fn a_resumed_worker_s_appends_are_refused_once_its_lease_is_taken() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let work = tempfile::tempdir().unwrap();
    let id = SessionId::new("s1");
    enqueue(&store, "s1", &slow_call_scenario(1_500));
    let a = worker(&url, "A", work.path(), 1_000);
    wait_for_start(&store, "s1", "c1");
    signal(&a, "STOP");
    // The test takes the lease once A's has run out, and writes nothing: whatever A
    // appends after it resumes would land unless the lease check refuses it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let lease = loop {
        match store.acquire(&id, "test", Duration::from_secs(60)) {
            Ok(lease) => break lease,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => panic!("{error}"),
        }
    };
    assert_eq!(lease.token, 2);
    let before = store.written_under(&id).unwrap();
    signal(&a, "CONT");
    let a = finish(a, Duration::from_secs(60));
    let a_err = text(&a.stderr);
    assert!(
        a_err.contains(
            "A: session s1 (token 1) was taken over by another worker; stopped driving it"
        ) && a_err.contains("token 1"),
        "{a_err}\n{}",
        text(&a.stdout)
    );
    assert_eq!(
        store.written_under(&id).unwrap(),
        before,
        "A's appends after the takeover were refused"
    );
    assert!(before.iter().all(|(_, token)| *token == Some(1)));
}
