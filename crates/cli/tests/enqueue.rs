//! `toolrail enqueue` and what `toolrail sessions` shows of the queue (a real PostgreSQL
//! server on 127.0.0.1 per test): an id the store knows is refused, naming where the
//! session stands; `--retry` queues a failed session again — one an older toolrail left
//! `failed` with its turn open at `tool/start` — and a worker resumes it from its log,
//! recovery first, without running its call again; `--retry` of a finished session is
//! refused; a session failed for its own reason is listed with the reason.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod fleet_support;

use std::time::{Duration, Instant};

use fleet_support::*;
use serde_json::json;
use toolrail_session_log::{EventData, SessionId};
use toolrail_session_store::{Durability, Finish, PostgresStore, Standing};
use toolrail_test_support::pg::PgServer;

/// The listing's line of `session`.
fn listed(url: &str, session: &str) -> String {
    let output = toolrail(&["sessions", "--store", url]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listing = text(&output.stdout);
    listing
        .lines()
        .find(|line| line.split_whitespace().next() == Some(session))
        .unwrap_or_else(|| panic!("{session} is not listed:\n{listing}"))
        .to_owned()
}

#[test]
fn a_stranded_failed_session_is_refused_then_retried_and_resumed_from_its_log() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let quick = dir.path().join("quick.json");
    std::fs::write(&quick, slow_call_scenario(1)).unwrap();
    let quick = quick.to_str().unwrap();

    // What an older toolrail left: its worker's call ran (the marker is there) and the
    // session was marked failed with its log stopping at `tool/start`.
    enqueue(&store, "s1", &slow_call_scenario(60_000));
    let mut a = worker(&url, "A", &work, 60_000);
    wait_for_start(&store, "s1", "c1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker(&work, "s1").exists() {
        assert!(Instant::now() < deadline, "the call never acted");
        std::thread::sleep(Duration::from_millis(20));
    }
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let stranded = loop {
        if let Some(claimed) = store
            .claim("old-toolrail", Duration::from_secs(60))
            .unwrap()
        {
            break claimed;
        }
        assert!(Instant::now() < deadline, "A's lease never ran out");
        std::thread::sleep(Duration::from_millis(50));
    };
    let reason = "writing session `s1` to PostgreSQL failed: connection closed";
    store
        .finish(&stranded.lease, &Finish::Failed(reason.to_owned()))
        .unwrap();
    let line = listed(&url, "s1");
    assert!(
        line.contains(" open ") && line.contains(" failed ") && line.ends_with(reason),
        "{line}"
    );

    // Queued again without --retry: refused, saying where it stands and what to do.
    let refused = toolrail(&["enqueue", "--store", &url, quick, "--session", "s1"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains(&format!(
            "session `s1` exists already: it is failed: {reason}; to run it again from its log, add --retry"
        )),
        "{}",
        text(&refused.stderr)
    );
    let events_before = store.read(&SessionId::new("s1")).unwrap();
    let retried = toolrail(&[
        "enqueue",
        "--store",
        &url,
        quick,
        "--session",
        "s1",
        "--retry",
    ]);
    assert!(retried.status.success(), "{}", text(&retried.stderr));
    assert!(
        text(&retried.stdout).contains(&format!(
            "queued session s1 again (it was failed: {reason}): a worker resumes it from its {} events, recovery first",
            events_before.len()
        )),
        "{}",
        text(&retried.stdout)
    );
    let line = listed(&url, "s1");
    assert!(
        line.contains(" waiting ") && line.ends_with(&format!("retried after it failed: {reason}")),
        "{line}"
    );

    // A worker resumes it from its log: recovery first (the call's honest unknown), then
    // the turn goes on; the call is not run again, and the old events stay as they were.
    let b = finish(worker(&url, "B", &work, 1_000), Duration::from_secs(60));
    let stdout = text(&b.stdout);
    assert!(b.status.success(), "{stdout}\n{}", text(&b.stderr));
    // (Its count of earlier events includes recovery's.)
    assert!(
        stdout.contains("B: session s1 (token 3) finished: turns completed, resumed after"),
        "{stdout}"
    );
    let events = check_taken_over(&store, "s1");
    assert_eq!(events[..events_before.len()], events_before[..]);
    let starts = events
        .iter()
        .filter(|event| {
            matches!(event.data, EventData::ToolStart(_))
                && event.call_id.as_ref().is_some_and(|id| id.as_str() == "c1")
        })
        .count();
    assert_eq!(starts, 1, "c1 was started once");
    let line = listed(&url, "s1");
    assert!(
        line.contains(" ended: completed ") && line.contains(" done "),
        "{line}"
    );

    // A finished session is not retried.
    let again = toolrail(&[
        "enqueue",
        "--store",
        &url,
        quick,
        "--session",
        "s1",
        "--retry",
    ]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains(
            "--retry: session `s1` is done: every turn ran; only a failed session, or one a run outside the queue left open, is queued again; a finished session is not run again"
        ),
        "{}",
        text(&again.stderr)
    );
    // Nor is a retry without a session named.
    let unnamed = toolrail(&["enqueue", "--store", &url, quick, "--retry"]);
    assert_eq!(unnamed.status.code(), Some(2));
    assert!(text(&unnamed.stderr).contains("--retry: name the session"));
}

#[test]
fn a_run_store_session_is_never_queued_and_failures_show_their_reason() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let quick = dir.path().join("quick.json");
    std::fs::write(&quick, slow_call_scenario(1)).unwrap();
    let quick = quick.to_str().unwrap();

    // A session `run --store` drove (events, no queue row) is known: enqueueing its id is
    // refused, with or without --retry, instead of "finishing" it again.
    let direct = toolrail(&[
        "run",
        "--scenario",
        quick,
        "--store",
        &url,
        "--session",
        "direct",
    ]);
    assert!(direct.status.success(), "{}", text(&direct.stderr));
    let events = store.read(&SessionId::new("direct")).unwrap().len();
    for retry in [false, true] {
        let mut args = vec!["enqueue", "--store", &url, quick, "--session", "direct"];
        if retry {
            args.push("--retry");
        }
        let refused = toolrail(&args);
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
        let said = if retry {
            format!(
                "--retry: session `direct` is not queued: its {events} events come from a run outside the queue, and its last turn ended; only a failed session"
            )
        } else {
            format!(
                "session `direct` exists already: it is not queued: its {events} events come from a run outside the queue, and its last turn ended"
            )
        };
        assert!(
            text(&refused.stderr).contains(&said)
                && text(&refused.stderr).contains("a finished session is not run again"),
            "{}",
            text(&refused.stderr)
        );
    }
    assert_eq!(
        store.standing(&SessionId::new("direct")).unwrap(),
        Standing::Unqueued {
            events: events as u64,
            ended: true,
            holder: None
        }
    );

    // A session that misses its scenario's expectations, and one whose payload is not a
    // scenario, fail for their own reasons: each is marked failed, and the listing says
    // why. A session queued since, with no events yet, is listed too.
    let broken = json!({
        "config": {"tools": {"enabled": ["glob"]}},
        "turns": [{"user": "go", "model": [
            {"tool_calls": [{"id": "c1", "name": "glob", "arguments": "{\"pattern\": \"*\"}"}],
             "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}
        ]}],
        "expect": {"results": {"c1": "TOOL_FAILED"}}
    });
    store.enqueue(&SessionId::new("garbage"), "{}").unwrap();
    let broken_file = dir.path().join("broken.json");
    std::fs::write(&broken_file, broken.to_string()).unwrap();
    let queued = toolrail(&[
        "enqueue",
        "--store",
        &url,
        broken_file.to_str().unwrap(),
        "--session",
        "broken",
    ]);
    assert!(queued.status.success(), "{}", text(&queued.stderr));
    assert!(text(&queued.stdout).contains("queued session broken"));
    let drained = finish(
        worker(&url, "W", &dir.path().join("work"), 300),
        Duration::from_secs(60),
    );
    let stdout = text(&drained.stdout);
    assert!(
        stdout.contains("workers drove 2 sessions: 0 done, 2 failed, 0 given back"),
        "{stdout}\n{}",
        text(&drained.stderr)
    );
    let later = toolrail(&["enqueue", "--store", &url, quick, "--session", "later"]);
    assert!(later.status.success(), "{}", text(&later.stderr));
    for (session, reason) in [
        (
            "broken",
            "the run differs from the scenario's expectations: call `c1`: expected TOOL_FAILED, found ok",
        ),
        (
            "garbage",
            "the scenario is not valid: missing field `turns` at line 1 column 2",
        ),
    ] {
        assert_eq!(
            store.standing(&SessionId::new(session)).unwrap(),
            Standing::Failed {
                reason: reason.to_owned(),
                events: if session == "broken" { 12 } else { 0 },
            }
        );
        let line = listed(&url, session);
        assert!(
            line.contains(" failed ") && line.ends_with(reason),
            "{line}"
        );
    }
    let line = listed(&url, "later");
    assert!(
        line.contains(" (no events) ") && line.contains(" waiting "),
        "{line}"
    );
}
