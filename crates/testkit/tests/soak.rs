//! Soak: a session of 10,000 calls (100 turns of 100) mixing quick and slow calls, failures,
//! panics, calls past their timeout, calls that ask for approval with random answers, and
//! turns cancelled at random moments. Every call gets exactly one result, and afterwards the
//! process has the file descriptors, threads and runtime tasks it had before, and its memory
//! grew by less than the bound below.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use serde_json::json;
use toolrail_session_log::{EventData, SessionId};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_testkit::{Scenario, SeededRng};

const TURNS: usize = 100;
const CALLS_PER_TURN: usize = 100;
/// How much the resident set may grow over the whole session.
const MEMORY_BOUND_MIB: f64 = 64.0;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(Iterator::count).unwrap_or(0)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .unwrap();
    kib / 1024.0
}

fn scenario(rng: &mut SeededRng) -> Scenario {
    let mut turns = Vec::new();
    let mut id = 0;
    for _ in 0..TURNS {
        let calls: Vec<serde_json::Value> = (0..CALLS_PER_TURN)
            .map(|_| {
                id += 1;
                let roll = rng.next_u64() % 100;
                let (name, args) = match roll {
                    0..=59 => ("probe", json!({})),
                    60..=69 => ("probe", json!({"sleep_ms": 1 + rng.next_u64() % 3})),
                    70..=74 => ("probe", json!({"fail": "soak failure"})),
                    75..=79 => ("probe", json!({"panic": true})),
                    // Past the 30 ms default timeout.
                    80..=81 => ("probe", json!({"sleep_ms": 60})),
                    _ => ("probe_idem", json!({})),
                };
                json!({"id": format!("c{id}"), "name": name, "arguments": args.to_string()})
            })
            .collect();
        let cancel = rng
            .next_u64()
            .is_multiple_of(5)
            .then(|| 1 + rng.next_u64() % 8);
        turns.push(json!({
            "user": "soak",
            "cancel_after_ms": cancel,
            "model": [
                {"tool_calls": calls, "stop_reason": "tool_use"},
                {"text": "done", "stop_reason": "end_turn"}
            ]
        }));
    }
    let answers: Vec<&str> = (0..TURNS * CALLS_PER_TURN / 5)
        .map(|_| match rng.next_u64() % 4 {
            0 => "allowed_once",
            1 => "rejected",
            2 => "expired",
            _ => "allowed_for_session",
        })
        .collect();
    Scenario::from_json(
        &json!({
            "config": {
                "tools": {"enabled": ["probe", "probe_idem"]},
                "store": {"durability": "none"},
                "limits": {"call_timeout_ms": 30, "cancel_grace_ms": 20, "stop_batch_on_reject": false},
                "permissions": {"preset": "full-auto", "ask": ["probe_idem"]}
            },
            "approvals": answers,
            "turns": turns
        })
        .to_string(),
    )
    .unwrap()
}

#[test]
fn ten_thousand_calls_with_faults_leave_the_process_as_it_was() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The probe's panics are caught by the pipeline; the default hook would print each
    // with a backtrace, and symbolizing backtraces keeps debug info in memory, which is not
    // what this test measures.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let asked = info.payload().downcast_ref::<&str>() == Some(&"probe panicked as asked");
        if !asked {
            default_hook(info);
        }
    }));
    let mut rng = SeededRng::new(0x50AC_0001);
    let scenario = scenario(&mut rng);
    // A warm-up session first: what the runtime keeps once it ran (pools, lazily made
    // statics) is the baseline, not a leak.
    let warm = tempfile::tempdir().unwrap();
    let small = Scenario::from_json(
        &json!({"config": {"tools": {"enabled": ["probe"]}, "store": {"durability": "none"},
                           "permissions": {"preset": "full-auto"}},
                "turns": [{"user": "warm", "model": [
                    {"tool_calls": [{"id": "w1", "name": "probe", "arguments": "{}"}],
                     "stop_reason": "tool_use"},
                    {"text": "done", "stop_reason": "end_turn"}]}]})
        .to_string(),
    )
    .unwrap();
    runtime.block_on(small.run(warm.path())).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let (fds, threads, tasks, rss) = (
        count("/proc/self/fd"),
        count("/proc/self/task"),
        runtime.metrics().num_alive_tasks(),
        rss_mib(),
    );

    let dir = tempfile::tempdir().unwrap();
    let report = runtime.block_on(scenario.run(dir.path())).unwrap();
    assert_eq!(report.turn_ends.len(), TURNS);

    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let events = store.open(&SessionId::new("scenario")).unwrap().events;
    // Every call the model asked for (a turn cancelled before the model answered asked for
    // none) has exactly one result.
    let mut asked = std::collections::BTreeSet::new();
    let mut answered = std::collections::BTreeMap::new();
    for event in &events {
        match (&event.data, &event.call_id) {
            (EventData::AssistantMessage(message), _) => {
                asked.extend(
                    message
                        .tool_calls()
                        .into_iter()
                        .map(|call| call.call_id.to_string()),
                );
            }
            (EventData::ToolResult(_), Some(call)) => {
                *answered.entry(call.to_string()).or_insert(0) += 1;
            }
            _ => {}
        }
    }
    assert!(
        asked.len() >= TURNS * CALLS_PER_TURN / 2,
        "most turns got their calls: {}",
        asked.len()
    );
    let answered_ids: std::collections::BTreeSet<String> = answered.keys().cloned().collect();
    assert_eq!(
        answered_ids, asked,
        "every call asked for has a result, and only those"
    );
    assert!(
        answered.values().all(|n| *n == 1),
        "no call has two results"
    );
    drop(events);
    drop(store);

    // Threads that end (a log's writer, a cancelled body's) take a moment to be gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = (
            count("/proc/self/fd"),
            count("/proc/self/task"),
            runtime.metrics().num_alive_tasks(),
        );
        if now == (fds, threads, tasks) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "(fds, threads, tasks) {now:?} are not back to {:?}",
            (fds, threads, tasks)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The first session leaves the allocator holding what it freed; a leak shows as growth
    // that goes on with every session. The same session again must not grow memory.
    let after_first = rss_mib();
    let again = tempfile::tempdir().unwrap();
    runtime.block_on(scenario.run(again.path())).unwrap();
    let grown = rss_mib() - after_first;
    eprintln!(
        "soak: resident set {rss:.1} MiB before, {after_first:.1} MiB after the first session, +{grown:.1} MiB after the second"
    );
    assert!(
        grown < MEMORY_BOUND_MIB,
        "a second session of the same calls grew memory by {grown:.1} MiB (bound {MEMORY_BOUND_MIB} MiB)"
    );
}
