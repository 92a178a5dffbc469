//! 4 workers draining 200 scripted sessions from a PostgreSQL queue (a real server on
//! 127.0.0.1, started for the bench), each worker on a thread and runtime of its own as
//! `toolrail worker --workers 4` runs them; beside the same sessions run one after another
//! into JSONL files, with no database. Checks that no session was driven twice. Nanoseconds
//! per session; lower is better.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;
use toolrail_session_log::SessionId;
use toolrail_session_store::{Durability, PostgresStore};
use toolrail_testkit::Scenario;
use toolrail_testkit::bench::BenchRow;
use toolrail_testkit::fleet::{Outcome, Report, WorkerConfig, worker};
use toolrail_testkit::pg::PgServer;

const WORKERS: usize = 4;

/// A short session: a plan of two parallel probe calls, then an answer.
fn scenario() -> String {
    json!({
        "config": {"tools": {"enabled": ["probe"]}, "permissions": {"allow": ["probe"]}},
        "turns": [{"user": "go", "model": [
            {"tool_calls": [
                {"id": "c1", "name": "probe", "arguments": "{}"},
                {"id": "c2", "name": "probe", "arguments": "{}"}
            ], "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}
        ]}],
        "expect": {"results": {"c1": "ok", "c2": "ok"}}
    })
    .to_string()
}

/// Seconds for `WORKERS` workers to drain `count` queued sessions.
fn drain(store: &PostgresStore, count: usize, work_dir: &std::path::Path) -> f64 {
    let payload = scenario();
    for n in 0..count {
        store
            .enqueue(&SessionId::new(format!("s{n}")), &payload)
            .unwrap();
    }
    let started = Instant::now();
    let threads: Vec<_> = (0..WORKERS)
        .map(|number| {
            let worker = worker(
                store.clone(),
                WorkerConfig {
                    owner: format!("bench-{number}"),
                    lease: Duration::from_secs(10),
                    work_dir: work_dir.to_path_buf(),
                    poll: Duration::from_millis(5),
                    idle_exit: Some(Duration::from_millis(100)),
                },
            );
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let mut driven = Vec::new();
                runtime
                    .block_on(worker.run(|event| {
                        let Report::Driven(done) = event else {
                            panic!("{event:?}");
                        };
                        let met = matches!(&done.outcome,
                            Outcome::Finished { mismatches, .. } if mismatches.is_empty());
                        assert!(met, "{done:?}");
                        driven.push((done.session.to_string(), Instant::now()));
                    }))
                    .unwrap();
                driven
            })
        })
        .collect();
    let driven: Vec<(String, Instant)> = threads
        .into_iter()
        .flat_map(|thread| thread.join().unwrap())
        .collect();
    let names: BTreeSet<&str> = driven.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(driven.len(), count, "every session driven once");
    assert_eq!(names.len(), count, "no session driven twice");
    let last = driven.iter().map(|(_, at)| *at).max().unwrap();
    (last - started).as_secs_f64()
}

/// Seconds to run `count` of the same sessions one after another into JSONL files.
fn sequential_jsonl(count: usize, dir: &std::path::Path) -> f64 {
    let scenario = Scenario::from_json(&scenario()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        for n in 0..count {
            let report = scenario.run(&dir.join(format!("s{n}"))).await.unwrap();
            assert!(report.mismatches.is_empty(), "{:?}", report.mismatches);
        }
    });
    started.elapsed().as_secs_f64()
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let Some(server) = PgServer::start() else {
        println!("fleet bench: no PostgreSQL server binaries here; rows not measured");
        return;
    };
    let count = if quick { 40 } else { 200 };
    let store = PostgresStore::connect(&server.fresh_database(), Durability::Strict).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fleet = drain(&store, count, &dir.path().join("fleet"));
    let alone = sequential_jsonl(count, &dir.path().join("alone"));
    println!(
        "fleet bench: {WORKERS} workers drained {count} sessions in {fleet:.2} s ({:.0} sessions/s); one process into JSONL files: {alone:.2} s ({:.0} sessions/s)",
        count as f64 / fleet,
        count as f64 / alone
    );
    BenchRow {
        row: &format!(
            "fleet: {WORKERS} workers drain {count} queued sessions from PostgreSQL (ns per session)"
        ),
        ours_ns: fleet * 1e9 / count as f64,
        baseline_name: "the same sessions one after another into JSONL files",
        baseline_ns: alone * 1e9 / count as f64,
        goal: "informational (no session driven twice: checked)",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
}
