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

mod fleet_support;

use std::time::{Duration, Instant};

use fleet_support::*;
use toolrail_session_log::{EventData, SessionId, event::TurnEndKind};
use toolrail_session_store::{Durability, PostgresStore};
use toolrail_test_support::pg::PgServer;

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
    assert!(
        text(&again.stderr).contains("session `q0` exists already: it is queued, waiting"),
        "{}",
        text(&again.stderr)
    );
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
        stdout.contains(
            "workers drove 6 sessions: 6 done, 0 failed, 0 given back after a store failure, 0 taken over"
        ),
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
    let refusal = format!(
        "session `direct` exists already: it is not queued: its {} events come from a run outside the queue, and its last turn ended; a finished session is not run again",
        direct.len()
    );
    assert!(
        text(&again.stderr).contains(&refusal),
        "{}",
        text(&again.stderr)
    );
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
