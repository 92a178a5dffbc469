//! Session store throughput, each row beside its floor measured in the same run:
//! appends with 8 concurrent appenders in `none`, `batched` and `strict` mode against raw
//! writes of the same bytes (and, where the mode syncs, one `fsync` per group of the same
//! size); replay of a large log against finding its lines (chunked reads, memchr). Per-event
//! nanoseconds, so lower is better everywhere. Prints `BENCH_ROW {json}` for `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::Instant;

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;
use toolrail_test_support::bench::{BenchRow, growth_exponent};

mod common;
use common::{event_draft, start};

const APPENDERS: u32 = 8;

/// The bytes the store writes for `count` events, for the floors.
fn lines(count: u32) -> Vec<Vec<u8>> {
    (0..count)
        .map(|n| {
            let draft = event_draft(n);
            let event = Event {
                seq: u64::from(n) + 2,
                ts: draft.ts,
                turn: draft.turn,
                step: draft.step,
                call_id: draft.call_id,
                data: draft.data,
            };
            let mut line = serde_json::to_vec(&event).unwrap();
            line.push(b'\n');
            line
        })
        .collect()
}

/// ns per event for `per_appender` events from each of 8 appenders; `barrier_every` makes
/// each appender call a durable barrier after that many events (batched mode's batch end).
/// Each event is made where it is appended, as the pipeline makes its events, and what
/// making and dropping them costs alone (the same tasks, no log) is measured in the same
/// call and subtracted: the row is the log's cost. (Events made in advance are freed cold,
/// far from where they were allocated, which costs about a microsecond each by itself.)
fn appends(
    durability: Durability,
    per_appender: u32,
    urgency: AppendUrgency,
    barrier_every: Option<u32>,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), durability).unwrap();
    let log = Arc::new(store.create(start("bench")).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let run = |log: Option<Arc<StoreLog>>| {
        let started = Instant::now();
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for appender in 0..APPENDERS {
                let log = log.clone();
                tasks.push(tokio::spawn(async move {
                    for n in 0..per_appender {
                        let draft = event_draft(appender * per_appender + n);
                        let Some(log) = &log else {
                            drop(std::hint::black_box(draft));
                            tokio::task::yield_now().await;
                            continue;
                        };
                        log.append(draft, urgency).await.unwrap();
                        if barrier_every.is_some_and(|every| (n + 1) % every == 0) {
                            log.durable_barrier().await.unwrap();
                        }
                        tokio::task::yield_now().await;
                    }
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
            if let Some(log) = &log {
                log.durable_barrier().await.unwrap();
            }
        });
        started.elapsed().as_nanos() as f64 / f64::from(APPENDERS * per_appender)
    };
    let making = run(None);
    let total = run(Some(Arc::clone(&log)));
    drop(log);
    total - making
}

/// ns per event when `sessions` logs of one store, all open at once, each get
/// `per_session` events from their own task, and how
/// many writer threads the store ran for them.
fn many_sessions(sessions: u32, per_session: u32) -> (f64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let logs: Vec<_> = (0..sessions)
        .map(|n| Arc::new(store.create(start(&format!("s{n}"))).unwrap()))
        .collect();
    let threads = writer_threads();
    // One runtime thread, so both rows pay the same for scheduling their tasks (on a
    // multi-threaded runtime one lone task pays for waking idle workers, 1000 do not).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // As in `appends`: events made where they are appended, making subtracted.
    let run = |append: bool| {
        let started = Instant::now();
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for (session, log) in (0u32..).zip(&logs) {
                let log = Arc::clone(log);
                tasks.push(tokio::spawn(async move {
                    for n in 0..per_session {
                        let draft = event_draft(session * per_session + n);
                        if append {
                            log.append(draft, AppendUrgency::Buffered).await.unwrap();
                        } else {
                            drop(std::hint::black_box(draft));
                        }
                        // A turn's pace: other sessions get their turn between events.
                        tokio::task::yield_now().await;
                    }
                    if append {
                        log.durable_barrier().await.unwrap();
                    }
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        });
        started.elapsed().as_nanos() as f64 / f64::from(sessions * per_session)
    };
    let making = run(false);
    let total = run(true);
    drop(logs);
    (total - making, threads)
}

/// Threads of this process named as the store names its writers.
fn writer_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter(|task| {
                    task.as_ref().is_ok_and(|task| {
                        std::fs::read_to_string(task.path().join("comm"))
                            .is_ok_and(|name| name.trim() == "toolrail-writer")
                    })
                })
                .count()
        })
        .unwrap_or(0)
}

/// ns per event to write the same lines with one `write` per `group` lines, syncing after
/// each group when asked.
fn raw_writes(count: u32, group: usize, sync: bool) -> f64 {
    let lines = lines(count);
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("raw.jsonl"))
        .unwrap();
    let started = Instant::now();
    let mut buffer = Vec::new();
    for chunk in lines.chunks(group) {
        buffer.clear();
        for line in chunk {
            buffer.extend_from_slice(line);
        }
        file.write_all(&buffer).unwrap();
        if sync {
            file.sync_data().unwrap();
        }
    }
    file.sync_data().unwrap();
    started.elapsed().as_nanos() as f64 / f64::from(count)
}

/// Per-event nanoseconds of a replay and what bounds it.
struct Replay {
    /// Scan the session: read it, check every envelope and the `seq` order, keep the
    /// payloads as bytes (decoded when asked for).
    lazy: f64,
    /// Open the session: read, parse into events, check `seq`, load large values.
    parsed: f64,
    /// Read the lines without parsing (the floor).
    raw: f64,
    /// Read the lines and let serde_json check each one is JSON without building anything:
    /// the least any serde_json-based reader pays.
    scanned: f64,
    megabytes: f64,
}

fn replay(count: u32) -> Replay {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
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
        log.durable_barrier().await.unwrap();
    });
    drop(log);
    let path = store.path_of(&SessionId::new("replay")).unwrap();
    let megabytes = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
    // Warm the page cache for both, so neither pays for the disk alone. The floor reads
    // the file in 1 MiB chunks into one buffer and finds each line's end with memchr: what
    // finding the lines costs, with no allocation per line.
    let raw_lines = || {
        let started = Instant::now();
        let mut file = std::fs::File::open(&path).unwrap();
        let mut buffer = vec![0_u8; 1 << 20];
        let mut count = 0u64;
        loop {
            let read = std::io::Read::read(&mut file, &mut buffer).unwrap();
            if read == 0 {
                break;
            }
            for end in memchr::memchr_iter(b'\n', &buffer[..read]) {
                std::hint::black_box(end);
                count += 1;
            }
        }
        (started.elapsed().as_nanos() as f64, count)
    };
    raw_lines();
    let (raw_ns, raw_count) = raw_lines();
    let scanned_ns = {
        let started = Instant::now();
        let reader = BufReader::with_capacity(1 << 20, std::fs::File::open(&path).unwrap());
        for line in reader.split(b'\n') {
            serde_json::from_slice::<serde::de::IgnoredAny>(&line.unwrap()).unwrap();
        }
        started.elapsed().as_nanos() as f64
    };
    // Warmed as the floor is: once before the measured run.
    drop(store.scan(&SessionId::new("replay")).unwrap());
    let started = Instant::now();
    let lazy = store.scan(&SessionId::new("replay")).unwrap();
    let lazy_ns = started.elapsed().as_nanos() as f64;
    assert_eq!(lazy.len() as u64, raw_count);
    drop(lazy);
    let started = Instant::now();
    let opened = store.open(&SessionId::new("replay")).unwrap();
    let parsed_ns = started.elapsed().as_nanos() as f64;
    assert_eq!(opened.events.len() as u64, raw_count);
    let total = f64::from(count + 1);
    Replay {
        lazy: lazy_ns / total,
        parsed: parsed_ns / total,
        raw: raw_ns / total,
        scanned: scanned_ns / total,
        megabytes,
    }
}

fn main() {
    // `--replay-only N`: only the replay row, for profilers.
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--replay-only") {
        let count = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(100_000);
        let Replay {
            lazy,
            parsed,
            raw,
            scanned,
            ..
        } = replay(count);
        println!(
            "replay: {lazy:.0} ns per event scanned lazily, {parsed:.0} parsed, {scanned:.0} checked by serde, {raw:.0} raw"
        );
        return;
    }
    if args.iter().any(|arg| arg == "--append-only") {
        let none = appends(Durability::None, 50_000, AppendUrgency::Buffered, None);
        let (one, _) = many_sessions(1, 200_000);
        println!("append: {none:.0} ns per event from 8 appenders, {one:.0} from one");
        return;
    }
    if args.iter().any(|arg| arg == "--parse-only") {
        let lines = lines(100_000);
        let started = Instant::now();
        for line in &lines {
            std::hint::black_box(serde_json::from_slice::<Event>(&line[..line.len() - 1]).unwrap());
        }
        println!(
            "parse only: {:.0} ns per event",
            started.elapsed().as_nanos() as f64 / 100_000.0
        );
        return;
    }
    let quick = args.iter().any(|arg| arg == "--quick");
    let (fast_events, strict_events, replay_events) = if quick {
        (12_500, 50, 100_000)
    } else {
        (50_000, 250, 1_000_000)
    };

    let none = appends(Durability::None, fast_events, AppendUrgency::Buffered, None);
    let none_floor = raw_writes(APPENDERS * fast_events, 256, false);
    BenchRow {
        row: "append, mode none, 8 appenders (ns per event)",
        ours_ns: none,
        baseline_name: "raw write of the same lines",
        baseline_ns: none_floor,
        goal: "≥ 2,000,000 events/s (≤ 500 ns per event)",
        goal_max_ns: Some(500.0),
        goal_max_ratio: None,
    }
    .print();

    let many_events = if quick { 50 } else { 200 };
    let (one, _) = many_sessions(1, 1000 * many_events);
    let (thousand, threads) = many_sessions(1000, many_events);
    println!("store bench: 1,000 open sessions were written by {threads} writer threads");
    BenchRow {
        row: &format!(
            "append, 1,000 open JSONL sessions ({threads} writer threads), mode none (ns per event)"
        ),
        ours_ns: thousand,
        baseline_name: "one session, the same events",
        baseline_ns: one,
        goal: "≤ 8 writer threads; within 2× of one session",
        goal_max_ns: None,
        goal_max_ratio: Some(2.0),
    }
    .print();
    assert!(threads <= MAX_WRITERS, "{threads} writer threads");

    let batched = appends(
        Durability::Batched,
        fast_events,
        AppendUrgency::Durable,
        Some(100),
    );
    let batched_floor = raw_writes(APPENDERS * fast_events, 800, true);
    BenchRow {
        row: "append, mode batched, 8 appenders, barrier per 100 (ns per event)",
        ours_ns: batched,
        baseline_name: "raw write + one fsync per 800 lines",
        baseline_ns: batched_floor,
        goal: "informational",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();

    let strict = appends(
        Durability::Strict,
        strict_events,
        AppendUrgency::Durable,
        None,
    );
    let strict_floor = raw_writes(APPENDERS * strict_events, APPENDERS as usize, true);
    BenchRow {
        row: "append, mode strict, 8 appenders, every event durable (ns per event)",
        ours_ns: strict,
        baseline_name: "raw write + one fsync per 8 lines",
        baseline_ns: strict_floor,
        goal: "informational",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();

    let Replay {
        lazy,
        parsed,
        raw,
        scanned,
        megabytes,
    } = replay(replay_events);
    println!(
        "store bench: replay of {} events ({megabytes:.0} MB): {:.0} events/s, {:.0} MB/s parsed; {:.0} MB/s raw line read",
        replay_events + 1,
        1e9 / parsed,
        megabytes * 1e9 / (parsed * f64::from(replay_events + 1)),
        megabytes * 1e9 / (raw * f64::from(replay_events + 1)),
    );
    BenchRow {
        row: "replay: scan a session (every envelope read and checked, payloads decoded when asked) (ns per event)",
        ours_ns: lazy,
        baseline_name: "finding its lines (1 MiB chunks, memchr)",
        baseline_ns: raw,
        goal: "within 3× of the raw line read",
        goal_max_ns: None,
        goal_max_ratio: Some(3.0),
    }
    .print();
    BenchRow {
        row: "replay: open a session and decode every event (ns per event)",
        ours_ns: parsed,
        baseline_name: "finding its lines (1 MiB chunks, memchr)",
        baseline_ns: raw,
        goal: "informational: what decoding every payload costs",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
    BenchRow {
        row: "replay floor of any serde_json reader: check each line is JSON, build nothing",
        ours_ns: scanned,
        baseline_name: "finding its lines (1 MiB chunks, memchr)",
        baseline_ns: raw,
        goal: "informational",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();

    // Scaling: replay time against session length (fitted exponent; 1 is linear).
    let lengths: &[u32] = if quick {
        &[10_000, 100_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    let (mut points, mut floor_points) = (Vec::new(), Vec::new());
    for &length in lengths {
        let measured = if length == replay_events {
            Replay {
                lazy,
                parsed,
                raw,
                scanned,
                megabytes,
            }
        } else {
            replay(length)
        };
        let events = f64::from(length + 1);
        points.push((events, measured.parsed * events));
        floor_points.push((events, measured.raw * events));
    }
    BenchRow {
        row: &format!(
            "scaling: growth of replay time with session length, {} → {} events (fitted exponent; 1 = linear)",
            lengths.first().copied().unwrap_or_default(),
            lengths.last().copied().unwrap_or_default()
        ),
        ours_ns: growth_exponent(&points),
        baseline_name: "finding the lines (memchr), same sessions",
        baseline_ns: growth_exponent(&floor_points),
        goal: "linear or better (≤ 1.1)",
        goal_max_ns: Some(1.1),
        goal_max_ratio: None,
    }
    .print_in("exponent");
}
