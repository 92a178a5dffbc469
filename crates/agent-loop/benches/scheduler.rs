//! The scheduler side by side with its floors, in one run: (a) 10,000 no-op calls through
//! scheduler, pipeline and in-memory log against a bare `tokio::spawn` per call; (b) 64
//! calls sleeping 20 ms with `max_parallel = 8` against the ideal 160 ms; (c) (b) with the
//! JSONL store in `strict` mode. Prints `BENCH_ROW {json}` lines for `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};
use toolrail_tools_core::CallArgs;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use serde_json::json;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{Scheduler, SchedulerConfig};
use toolrail_session_log::{
    BoxFuture, EventSink, MemorySink, SessionId, ToolSource,
    event::{FORMAT_VERSION, SessionStart},
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_test_support::bench::{
    BenchRow, allocations_per_iteration, growth_exponent, instructions_per_iteration, median,
};
use toolrail_tools_core::{
    CallRequest, Concurrency, Pipeline, RegistryBuilder, Tool, ToolContext, ToolOutput, ToolResult,
    ToolSet, ToolSpec,
};

struct Sleepy(ToolSpec);

impl Tool for Sleepy {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        Concurrency::shared()
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            if let Some(ms) = args["sleep_ms"].as_u64() {
                let duration = Duration::from_millis(ms);
                if args["precise"].as_bool() == Some(true) {
                    precise_sleep(duration).await;
                } else {
                    tokio::time::sleep(duration).await;
                }
            }
            Ok(ToolOutput::text("ok"))
        })
    }
}

/// A sleep on its own `timerfd`: the wake-up comes from epoll within microseconds of the
/// deadline, where tokio's timer wheel rounds every sleep up to its next millisecond tick
/// (8 chained 20 ms sleeps take about 170 ms there). The makespan rows then measure the
/// scheduler, not the timer wheel's granularity.
async fn precise_sleep(duration: Duration) {
    struct Timer(TimerFd);
    impl AsRawFd for Timer {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }
    let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK).unwrap();
    timer
        .set(
            Expiration::OneShot(TimeSpec::from_duration(duration)),
            TimerSetTimeFlags::empty(),
        )
        .unwrap();
    // The safe constructor is deprecated for I/O safety (the fd could be closed behind the
    // reactor's back); `Timer` owns its fd for the AsyncFd's whole life, so that cannot happen.
    #[allow(deprecated)]
    let timer = AsyncFd::with_interest(Timer(timer), Interest::READABLE).unwrap();
    drop(timer.readable().await.unwrap());
}

fn tools() -> ToolSet {
    let tool = Sleepy(ToolSpec::builder("sleepy", "sleeps", json!({"type": "object"})).build());
    let (registry, _) = RegistryBuilder::new()
        .external(ToolSource::Extension("bench".into()), Arc::new(tool))
        .build()
        .unwrap();
    registry.snapshot()
}

fn calls(count: usize, args: &str) -> Vec<CallRequest> {
    (0..count)
        .map(|n| CallRequest::new(format!("c{n}"), n as u32, "sleepy", args))
        .collect()
}

fn batch(
    runtime: &tokio::runtime::Runtime,
    sink: Arc<dyn EventSink>,
    tools: &ToolSet,
    calls: Vec<CallRequest>,
) -> Duration {
    let scheduler = Scheduler::new(
        Arc::new(Pipeline::builder(sink).build()),
        SchedulerConfig::default(),
    );
    runtime.block_on(async {
        let started = Instant::now();
        let outcome = scheduler
            .run_batch(tools, calls, CancellationToken::new(), None)
            .await
            .unwrap();
        assert!(outcome.results.iter().all(|r| !r.record().is_error()));
        started.elapsed()
    })
}

fn spawn_each(runtime: &tokio::runtime::Runtime, count: usize) -> Duration {
    runtime.block_on(async {
        let started = Instant::now();
        for n in 0..count {
            tokio::spawn(async move { std::hint::black_box(n) })
                .await
                .unwrap();
        }
        started.elapsed()
    })
}

/// One thread, timers only: a no-op batch needs no I/O driver, and with one the spawn floor
/// made an `epoll_wait` per spawn.
fn single_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `--noop-only N [spawn]`: one batch of N no-op calls (or N spawns) and nothing else,
    // for profilers.
    if let Some(at) = args.iter().position(|arg| arg == "--noop-only") {
        let count = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(10_000);
        let single = single_thread();
        let elapsed = if args.get(at + 2).is_some_and(|what| what == "spawn") {
            spawn_each(&single, count)
        } else {
            batch(
                &single,
                Arc::new(MemorySink::new()),
                &tools(),
                calls(count, "{}"),
            )
        };
        println!(
            "{:.0} ns per no-op call",
            elapsed.as_nanos() as f64 / count as f64
        );
        return;
    }
    let quick = args.iter().any(|arg| arg == "--quick");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tools = tools();

    // (a) per-call overhead of a large batch, on one thread: the floor then measures a
    // spawn, not a cross-thread wake-up.
    let single = single_thread();
    let count = if quick { 2_000 } else { 10_000 };
    let samples = if quick { 3 } else { 7 };
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let sink: Arc<dyn EventSink> = Arc::new(MemorySink::new());
        ours.push(
            batch(&single, sink, &tools, calls(count, "{}")).as_nanos() as f64 / count as f64,
        );
        floor.push(spawn_each(&single, count).as_nanos() as f64 / count as f64);
    }
    BenchRow {
        row: &format!(
            "batch of {count} no-op calls: scheduler + pipeline + in-memory log (per call)"
        ),
        ours_ns: median(ours),
        baseline_name: "tokio::spawn per call",
        baseline_ns: median(floor),
        goal: "≤ 1.5 µs per call",
        goal_max_ns: Some(1_500.0),
        goal_max_ratio: None,
    }
    .print();
    if !quick {
        let count =
            |what: &[&str]| instructions_per_iteration(&["--noop-only"], 6_000, 1_000, what);
        match (count(&[]), count(&["spawn"])) {
            (Some(ours), Some(spawn)) => BenchRow {
                row: "batch of no-op calls as above: instructions per call (callgrind)",
                ours_ns: ours,
                baseline_name: "tokio::spawn per call",
                baseline_ns: spawn,
                goal: "informational: stable where time is not",
                goal_max_ns: None,
                goal_max_ratio: None,
            }
            .print_in("instructions"),
            _ => println!("scheduler bench: valgrind not available; no instruction-count row"),
        }
        let allocations =
            |what: &[&str]| allocations_per_iteration(&["--noop-only"], 6_000, 1_000, what);
        match (allocations(&[]), allocations(&["spawn"])) {
            (Some((ours, bytes)), Some((spawn, spawn_bytes))) => BenchRow {
                row: &format!(
                    "batch of no-op calls as above: allocations per call, {bytes:.0} bytes (dhat, every thread)"
                ),
                ours_ns: ours,
                baseline_name: &format!("tokio::spawn per call ({spawn_bytes:.0} bytes)"),
                baseline_ns: spawn,
                goal: "informational",
                goal_max_ns: None,
                goal_max_ratio: None,
            }
            .print_in("allocations"),
            _ => println!("scheduler bench: valgrind not available; no allocation row"),
        }
    }

    // Scaling: per-call cost from 1 to 10,000 calls in one batch, and how a batch's time
    // grows with its size above 100 calls, where fixed costs no longer hide the trend
    // (fitted exponent: 1 is linear, 2 quadratic).
    let sizes: &[usize] = if quick {
        &[1, 10, 100, 1_000]
    } else {
        &[1, 10, 100, 1_000, 10_000]
    };
    let (mut points, mut floor_points) = (Vec::new(), Vec::new());
    for &size in sizes {
        let reps = (20_000 / size).clamp(samples, 200);
        let per_call = median(
            (0..reps)
                .map(|_| {
                    let sink: Arc<dyn EventSink> = Arc::new(MemorySink::new());
                    batch(&single, sink, &tools, calls(size, "{}")).as_nanos() as f64 / size as f64
                })
                .collect(),
        );
        let floor = median(
            (0..reps)
                .map(|_| spawn_each(&single, size).as_nanos() as f64 / size as f64)
                .collect(),
        );
        if size >= 100 {
            points.push((size as f64, per_call * size as f64));
            floor_points.push((size as f64, floor * size as f64));
        }
        BenchRow {
            row: &format!("scaling: batch of {size} no-op call(s), per call"),
            ours_ns: per_call,
            baseline_name: "tokio::spawn per call",
            baseline_ns: floor,
            goal: "informational",
            goal_max_ns: None,
            goal_max_ratio: None,
        }
        .print();
    }
    BenchRow {
        row: &format!(
            "scaling: growth of a batch's time with its size, 100 → {} calls (fitted exponent; 1 = linear)",
            sizes.last().copied().unwrap_or_default()
        ),
        ours_ns: growth_exponent(&points),
        baseline_name: "tokio::spawn per call, same sizes",
        baseline_ns: growth_exponent(&floor_points),
        goal: "linear or better (≤ 1.1)",
        goal_max_ns: Some(1.1),
        goal_max_ratio: None,
    }
    .print_in("exponent");

    // (b) and (c): 64 calls of 20 ms, 8 at a time: ideally 8 waves of 20 ms. The goal rows
    // sleep on a timerfd; the tokio-timer rows show what the timer wheel's rounding adds.
    let ideal = Duration::from_millis(160).as_nanos() as f64;
    let precise = || calls(64, r#"{"sleep_ms": 20, "precise": true}"#);
    let coarse = || calls(64, r#"{"sleep_ms": 20}"#);
    let in_memory = |calls: &dyn Fn() -> Vec<CallRequest>| -> Vec<f64> {
        (0..samples)
            .map(|_| {
                batch(&runtime, Arc::new(MemorySink::new()), &tools, calls()).as_nanos() as f64
            })
            .collect()
    };
    let memory = in_memory(&precise);
    BenchRow {
        row: "64 × 20 ms calls (timerfd sleep), max_parallel 8, in-memory log: makespan",
        ours_ns: median(memory.clone()),
        baseline_name: "ideal (8 waves × 20 ms)",
        baseline_ns: ideal,
        goal: "≤ 1.05 × ideal",
        goal_max_ns: None,
        goal_max_ratio: Some(1.05),
    }
    .print();
    // What the sleeps themselves allow: 8 tasks each sleeping 20 ms 8 times in a row.
    let chains = |precise: bool| -> Vec<f64> {
        (0..samples)
            .map(|_| {
                runtime.block_on(async {
                    let started = Instant::now();
                    let chains: Vec<_> = (0..8)
                        .map(|_| {
                            tokio::spawn(async move {
                                for _ in 0..8 {
                                    let duration = Duration::from_millis(20);
                                    if precise {
                                        precise_sleep(duration).await;
                                    } else {
                                        tokio::time::sleep(duration).await;
                                    }
                                }
                            })
                        })
                        .collect();
                    for chain in chains {
                        chain.await.unwrap();
                    }
                    started.elapsed().as_nanos() as f64
                })
            })
            .collect()
    };
    BenchRow {
        row: "64 × 20 ms calls (timerfd sleep), in-memory log: makespan against the sleeps' own",
        ours_ns: median(memory),
        baseline_name: "8 tasks × 8 timerfd sleeps of 20 ms",
        baseline_ns: median(chains(true)),
        goal: "informational",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
    BenchRow {
        row: "64 × 20 ms calls (tokio sleep), in-memory log: makespan against the sleeps' own",
        ours_ns: median(in_memory(&coarse)),
        baseline_name: "8 tasks × 8 tokio sleeps of 20 ms",
        baseline_ns: median(chains(false)),
        goal: "informational: tokio rounds each sleep up to a 1 ms tick",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let strict: Vec<f64> = (0..samples)
        .map(|sample| {
            let start = SessionStart {
                format_version: FORMAT_VERSION,
                session_id: SessionId::new(format!("s{sample}")),
                tools: vec![],
                meta: None,
            };
            let log: Arc<dyn EventSink> = Arc::new(store.create(start).unwrap());
            batch(&runtime, log, &tools, precise()).as_nanos() as f64
        })
        .collect();
    BenchRow {
        row: "64 × 20 ms calls (timerfd sleep), max_parallel 8, JSONL strict: makespan",
        ours_ns: median(strict),
        baseline_name: "ideal (8 waves × 20 ms)",
        baseline_ns: ideal,
        goal: "≤ 1.05 × ideal",
        goal_max_ns: None,
        goal_max_ratio: Some(1.05),
    }
    .print();
}
