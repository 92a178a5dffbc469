//! The PostgreSQL store beside the JSONL store, in the same run: 8 sessions appending at
//! once (mode `batched`, a durable barrier every 100 events of a session, as a batch end
//! asks), and replay (open and parse) of one long session. The server is a real one on
//! 127.0.0.1, started for the bench. Per-event nanoseconds; lower is better.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use toolrail_session_log::*;
use toolrail_session_store::*;
use toolrail_test_support::bench::BenchRow;
use toolrail_test_support::pg::PgServer;

mod common;
use common::{event_draft, start};

const SESSIONS: u32 = 8;
const BARRIER_EVERY: u32 = 100;

/// ns per event for `per_session` events appended to each of 8 sessions at once.
fn appends<S>(store: &S, per_session: u32, name: &str) -> f64
where
    S: SessionStore,
    S::Log: 'static,
{
    let logs: Vec<Arc<S::Log>> = (0..SESSIONS)
        .map(|n| Arc::new(store.create(start(&format!("{name}-{n}"))).unwrap()))
        .collect();
    let drafts: Vec<Vec<EventDraft>> = (0..SESSIONS)
        .map(|session| {
            (0..per_session)
                .map(|n| event_draft(session * per_session + n))
                .collect()
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for (log, drafts) in logs.iter().cloned().zip(drafts) {
            tasks.push(tokio::spawn(async move {
                for (n, draft) in (1u32..).zip(drafts) {
                    log.append(draft, AppendUrgency::Durable).await.unwrap();
                    if n % BARRIER_EVERY == 0 {
                        log.barrier().await.unwrap();
                    }
                }
                log.barrier().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    let elapsed = started.elapsed();
    drop(logs);
    elapsed.as_nanos() as f64 / f64::from(SESSIONS * per_session)
}

/// ns per event to open (read and parse) a session of `count` events written before.
fn replay<S: SessionStore>(store: &S, count: u32) -> f64 {
    let id = SessionId::new("replay");
    let log = store.create(start("replay")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for n in 0..count {
            log.append(event_draft(n), AppendUrgency::Buffered)
                .await
                .unwrap();
        }
        log.barrier().await.unwrap();
    });
    drop(log);
    // Once to warm caches on both sides, then measured.
    drop(store.open(&id).unwrap());
    let started = Instant::now();
    let opened = store.open(&id).unwrap();
    let elapsed = started.elapsed();
    assert_eq!(opened.events.len() as u32, count + 1);
    elapsed.as_nanos() as f64 / f64::from(count + 1)
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let Some(server) = PgServer::start() else {
        println!("postgres bench: no PostgreSQL server binaries here; rows not measured");
        return;
    };
    let (per_session, replay_events) = if quick {
        (500, 20_000)
    } else {
        (5_000, 200_000)
    };
    let url = server.fresh_database();
    let postgres = PostgresStore::connect(&url, Durability::Batched).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = JsonlStore::new(dir.path(), Durability::Batched).unwrap();

    let ours = appends(&postgres, per_session, "append");
    let baseline = appends(&jsonl, per_session, "append");
    println!(
        "postgres bench: 8 sessions append {:.0} events/s in PostgreSQL, {:.0} in JSONL files",
        1e9 / ours,
        1e9 / baseline
    );
    BenchRow {
        row: "PostgreSQL append, 8 sessions at once, batched, barrier per 100 (ns per event)",
        ours_ns: ours,
        baseline_name: "JSONL store, same load",
        baseline_ns: baseline,
        goal: "informational (a database round trip per group)",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();

    let ours = replay(&postgres, replay_events);
    let baseline = replay(&jsonl, replay_events);
    println!(
        "postgres bench: replay of {} events: {:.0} events/s from PostgreSQL, {:.0} from JSONL",
        replay_events + 1,
        1e9 / ours,
        1e9 / baseline
    );
    BenchRow {
        row: "PostgreSQL replay: open and parse a session (ns per event)",
        ours_ns: ours,
        baseline_name: "JSONL store, same session",
        baseline_ns: baseline,
        goal: "informational",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
}
