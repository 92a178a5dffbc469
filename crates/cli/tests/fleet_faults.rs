//! The fleet under a database that fails: 4 `toolrail worker` processes drain 30 sessions
//! whose calls leave marker lines (a call run twice would leave two), while the test ends
//! the log connections of running sessions (`pg_terminate_backend`, several times),
//! restarts the server (`pg_ctl restart -m fast`) and stops its postmaster for 15 s
//! (SIGSTOP, then SIGCONT). Afterwards every session is `done`, no call ran twice, every
//! call has exactly one result, no turn is left open, every event was written under a
//! lease no older than the one before it, each session was finished once, and
//! `toolrail sessions` says what the logs say. `FLEET_FAULTS_SHOW=1` prints each worker's
//! output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod fleet_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet_support::TOOLRAIL;
use serde_json::json;
use toolrail_session_log::{Event, EventData, SessionId, event::TurnEndKind};
use toolrail_session_store::{Durability, PostgresStore};
use toolrail_test_support::pg::{Admin, PgServer};

const SESSIONS: usize = 30;
const WORKERS: usize = 4;
const CALLS: [&str; 2] = ["c1", "c2"];

/// One turn of two slow calls, each first adding a line to its marker in the workspace (an
/// effect outside the log: a second run of the call would add a second line).
fn scenario() -> String {
    let call = |id: &str, seconds: &str| {
        json!({"id": id, "name": "bash", "arguments": json!({
            "command": format!("echo ran >> {id}.marker; sleep {seconds}"),
            "description": "slow",
        }).to_string()})
    };
    json!({
        "config": {"tools": {"enabled": ["bash"]}, "sandbox": {"mode": "workspace-write"},
                   "permissions": {"allow": ["bash"]}},
        "turns": [{"user": "go", "model": [
            {"tool_calls": [call("c1", "1.5")], "stop_reason": "tool_use"},
            {"tool_calls": [call("c2", "0.5")], "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}
        ]}]
    })
    .to_string()
}

fn session_id(number: usize) -> String {
    format!("f{number:02}")
}

/// A worker process whose output goes to files (a pipe nobody reads could fill).
fn worker(url: &str, owner: &str, work_dir: &Path, out: &Path) -> Child {
    Command::new(TOOLRAIL)
        .env("NO_COLOR", "1")
        .args([
            "worker",
            "--store",
            url,
            "--owner",
            owner,
            "--lease-ms",
            "2000",
            "--work-dir",
            work_dir.to_str().unwrap(),
            // Longer than the postmaster's pause: a worker whose claims fail meanwhile
            // stays, and goes on once the server answers.
            "--idle-exit-ms",
            "20000",
        ])
        .stdout(std::fs::File::create(out.join(format!("{owner}.out"))).unwrap())
        .stderr(std::fs::File::create(out.join(format!("{owner}.err"))).unwrap())
        .spawn()
        .unwrap()
}

/// The log connections of the test's database open now (their sessions are running).
fn log_connections(admin: &mut Admin, database: &str) -> usize {
    admin
        .rows(&format!(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = '{database}' AND application_name LIKE 'toolrail-log %'"
        ))
        .len()
}

/// Waits (bounded) until at least `least` sessions' logs are open.
fn wait_for_logs(admin: &mut Admin, database: &str, least: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while log_connections(admin, database) < least {
        assert!(
            Instant::now() < deadline,
            "fewer than {least} sessions running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends the test database's connections whose `application_name` is like `pattern`;
/// returns their names. (The rows are chosen first, behind `OFFSET 0`: in one `WHERE` the
/// planner may call `pg_terminate_backend` before the other conditions, on anyone's
/// connection.)
fn terminate(admin: &mut Admin, database: &str, pattern: &str) -> Vec<String> {
    admin
        .rows(&format!(
            "SELECT application_name FROM (
                 SELECT pid, application_name FROM pg_stat_activity
                 WHERE datname = '{database}' AND application_name LIKE '{pattern}'
                 OFFSET 0) chosen
             WHERE pg_terminate_backend(pid)"
        ))
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
        .collect()
}

/// Ends every session's log connection; returns the sessions' connection names.
fn terminate_logs(admin: &mut Admin, database: &str) -> Vec<String> {
    terminate(admin, database, "toolrail-log %")
}

/// The queue's state of every session, read through a fresh store each time (the test's
/// own connections die with the restart too); `None` while the server does not answer.
fn queue_states(url: &str) -> Option<BTreeMap<String, String>> {
    let store = PostgresStore::connect(url, Durability::Strict).ok()?;
    let sessions = store.sessions().ok()?;
    Some(
        sessions
            .into_iter()
            .map(|summary| (summary.session, summary.queue.unwrap_or_default()))
            .collect(),
    )
}

fn marker_lines(work_dir: &Path, session: &str, call: &str) -> usize {
    let path = work_dir
        .join(session)
        .join("workspace")
        .join(format!("{call}.marker"));
    std::fs::read_to_string(path)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// What the checks counted, for the figures.
#[derive(Default, Debug)]
struct Counted {
    resumed_sessions: usize,
    unknown: usize,
    not_started: usize,
    ok_results: usize,
}

/// Every promise one session's log and workspace must keep.
fn check_session(
    store: &PostgresStore,
    work_dir: &Path,
    session: &str,
    counted: &mut Counted,
) -> Vec<Event> {
    let id = SessionId::new(session);
    // `read` refuses a log whose `seq` is not dense from 1.
    let events = store.read(&id).unwrap();
    assert!(!events.is_empty(), "{session} has no events");
    // Each event written under a lease no older than the one before it: nothing was
    // written by a worker after another took the session over.
    let tokens: Vec<i64> = store
        .written_under(&id)
        .unwrap()
        .into_iter()
        .map(|(_, token)| token.expect("every event of a worker's session is leased"))
        .collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] <= pair[1]),
        "{session}: an event of an older lease after a newer one: {tokens:?}"
    );
    // No turn left open: starts and ends alternate, and the last turn completed.
    let mut open = false;
    for event in &events {
        match &event.data {
            EventData::TurnStart(_) => {
                assert!(!open, "{session}: a turn started inside another");
                open = true;
            }
            EventData::TurnEnd(_) => {
                assert!(open, "{session}: a turn ended that had not started");
                open = false;
            }
            _ => {}
        }
    }
    assert!(!open, "{session}: a turn is left open");
    assert!(
        matches!(events.last().map(|event| &event.data),
            Some(EventData::TurnEnd(end)) if end.kind == TurnEndKind::Completed),
        "{session}: the last event is not a completed turn's end"
    );
    if events
        .iter()
        .any(|event| matches!(event.data, EventData::RecoveryRepaired(_)))
    {
        counted.resumed_sessions += 1;
    }
    for call in CALLS {
        let results: Vec<_> = events
            .iter()
            .filter_map(|event| match &event.data {
                EventData::ToolResult(record)
                    if event.call_id.as_ref().is_some_and(|id| id.as_str() == call) =>
                {
                    Some(record)
                }
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 1, "{session}: `{call}` has one result");
        let lines = marker_lines(work_dir, session, call);
        assert!(lines <= 1, "{session}: `{call}` ran {lines} times");
        let code = results[0].error_code().map(|code| code.as_str().to_owned());
        match code.as_deref() {
            // A result that says the call ran: it ran once.
            None => {
                assert_eq!(lines, 1, "{session}: `{call}` succeeded without running");
                counted.ok_results += 1;
            }
            // Recovery's honest answer for a call that may have acted.
            Some("TOOL_OUTCOME_UNKNOWN") => counted.unknown += 1,
            // A call recovery says never started never ran.
            Some("TOOL_NOT_STARTED") => {
                assert_eq!(lines, 0, "{session}: `{call}` ran but is TOOL_NOT_STARTED");
                counted.not_started += 1;
            }
            Some(other) => panic!("{session}: `{call}` ended {other}"),
        }
    }
    events
}

#[test]
fn workers_drain_the_queue_through_dropped_connections_a_restart_and_a_stopped_postmaster() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let began = Instant::now();
    // A connection that gets no answer gives up after 2 s, and the worker tries again.
    let url = format!("{}?connect_timeout=2", server.fresh_database());
    let database = url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let payload = scenario();
    for number in 0..SESSIONS {
        store
            .enqueue(&SessionId::new(session_id(number)), &payload)
            .unwrap();
    }
    drop(store);
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().join("work");
    let workers: Vec<(String, Child)> = (1..=WORKERS)
        .map(|number| {
            let owner = format!("w{number}");
            let child = worker(&url, &owner, &work_dir, dir.path());
            (owner, child)
        })
        .collect();
    let mut admin = server.admin();

    // Log connections ended under running sessions, three times.
    let mut terminated = Vec::new();
    for _ in 0..3 {
        wait_for_logs(&mut admin, &database, 2);
        terminated.extend(terminate_logs(&mut admin, &database));
        std::thread::sleep(Duration::from_millis(1_500));
    }
    // A restart ends every connection, the workers' pools included.
    wait_for_logs(&mut admin, &database, 2);
    server.restart();
    let mut admin = server.admin();
    // The postmaster stopped for 15 s while sessions run: connections made before keep
    // working, new ones get no answer. A second into the pause every connection of the
    // workers is ended — the running sessions' logs and any kept idle for claims — so the
    // workers need new connections while nothing answers them.
    wait_for_logs(&mut admin, &database, 2);
    server.pause();
    let paused = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let during_pause = terminate(&mut admin, &database, "toolrail%");
    assert!(!during_pause.is_empty(), "the workers held no connection");
    std::thread::sleep(Duration::from_secs(15).saturating_sub(paused.elapsed()));
    server.resume();
    let faults_over = began.elapsed();

    // Every session done, within a bound.
    let deadline = Instant::now() + Duration::from_secs(120);
    let states = loop {
        if let Some(states) = queue_states(&url)
            && states.len() == SESSIONS
            && states
                .values()
                .all(|state| state == "done" || state == "failed")
        {
            break states;
        }
        assert!(
            Instant::now() < deadline,
            "the sessions did not all end: {:?}",
            queue_states(&url)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let drained = began.elapsed();
    let mut finished_by: BTreeMap<String, usize> = BTreeMap::new();
    let mut tallies = Vec::new();
    let mut given_back_lines = 0;
    for (owner, mut child) in workers {
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("worker {owner} did not stop once the queue was empty");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let status = child.wait().unwrap();
        let out = std::fs::read_to_string(dir.path().join(format!("{owner}.out"))).unwrap();
        let err = std::fs::read_to_string(dir.path().join(format!("{owner}.err"))).unwrap();
        assert!(status.success(), "{owner}: {status}\n{out}\n{err}");
        assert!(!err.contains("panicked"), "{owner}:\n{err}");
        assert!(
            !err.contains(") failed:"),
            "{owner} marked a session failed:\n{err}"
        );
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix(&format!("{owner}: session "))
                && line.contains(") finished: ")
            {
                let session = rest.split_whitespace().next().unwrap().to_owned();
                *finished_by.entry(session).or_default() += 1;
            }
            if line.starts_with("workers drove ") {
                tallies.push(line.to_owned());
            }
        }
        given_back_lines += err.matches("was given back unfinished").count();
        if std::env::var_os("FLEET_FAULTS_SHOW").is_some() {
            eprintln!("--- {owner}\n{out}{err}");
        }
    }

    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let listing = Command::new(TOOLRAIL)
        .args(["sessions", "--store", &url])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let listing_text = String::from_utf8_lossy(&listing.stdout).into_owned();
    assert!(listing.status.success(), "{listing_text}");
    let mut counted = Counted::default();
    for number in 0..SESSIONS {
        let session = session_id(number);
        assert_eq!(states[&session], "done", "{session}");
        let events = check_session(&store, &work_dir, &session, &mut counted);
        assert_eq!(
            finished_by.get(&session).copied(),
            Some(1),
            "{session} was finished once"
        );
        // `toolrail sessions` says what the log and the queue say.
        let line = listing_text
            .lines()
            .find(|line| line.split_whitespace().next() == Some(session.as_str()))
            .unwrap_or_else(|| panic!("{session} is not listed:\n{listing_text}"));
        let columns: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            columns[1..6],
            [
                events.len().to_string().as_str(),
                "ended:",
                "completed",
                "turn/end",
                "done"
            ],
            "{line}"
        );
    }
    let done: usize = tallies
        .iter()
        .map(|line| {
            line.split(": ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(done, SESSIONS, "{tallies:?}");
    eprintln!(
        "fleet faults: {SESSIONS} sessions, {WORKERS} workers; {} log connections ended before the restart, {} connections during the pause; faults over after {:.1} s, all done after {:.1} s, workers gone after {:.1} s; {} sessions resumed through recovery, {} give-backs reported; results: {} ok, {} TOOL_OUTCOME_UNKNOWN, {} TOOL_NOT_STARTED; tallies: {tallies:?}",
        terminated.len(),
        during_pause.len(),
        faults_over.as_secs_f64(),
        drained.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        counted.resumed_sessions,
        given_back_lines,
        counted.ok_results,
        counted.unknown,
        counted.not_started,
    );
}
