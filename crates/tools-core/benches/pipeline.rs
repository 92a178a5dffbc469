//! Per-call overhead of the single-call pipeline, side by side with a bare
//! `tokio::spawn` + oneshot round trip measured in the same run, on the same runtime.
//! Prints `BENCH_ROW {json}` lines for `cargo xtask bench`.
//!
//! Samples of ours and of the baseline are interleaved, so machine noise hits both alike;
//! the reported figure is the median of per-call averages over the samples.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use toolrail_tools_core::CallArgs;

use serde_json::{Value, json};
use toolrail_session_log::{BoxFuture, MemorySink, ToolResultRecord, ToolSource};
use toolrail_test_support::alloc::{CountingAllocator, allocations_per};
use toolrail_test_support::bench::{BenchRow, instructions_per_iteration, median};
use toolrail_tools_core::{
    CallRequest, CallView, Concurrency, ExecNext, ExecuteLayer, Guard, GuardVerdict, HookError,
    ObserverError, Pipeline, PreExecuteDecision, PreExecuteHook, PreNext, RegistryBuilder,
    ResultObserver, Tool, ToolContext, ToolOutput, ToolResult, ToolSet, ToolSpec,
    context::CallIdentity, pipeline::BatchControl,
};

/// A tool that does nothing and may overlap with anything: the runtime's own cost per
/// call is measured with it. (Defined here: this crate's benches build nothing above it.)
struct NoopTool(ToolSpec);

impl Tool for NoopTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        Concurrency::shared()
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async { Ok(ToolOutput::text("ok")) })
    }
}

/// Consults the rest of the chain, as a permission hook does.
struct PassHook;
impl PreExecuteHook for PassHook {
    fn name(&self) -> &str {
        "pass"
    }
    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            black_box(call.arguments);
            next.run().await
        })
    }
}

struct AbstainGuard;
impl Guard for AbstainGuard {
    fn name(&self) -> &str {
        "abstain"
    }
    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        black_box(call.arguments);
        GuardVerdict::Abstain
    }
}

struct PassLayer;
impl ExecuteLayer for PassLayer {
    fn name(&self) -> &str {
        "pass"
    }
    fn call<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a Value,
        next: ExecNext<'a>,
    ) -> BoxFuture<'a, ToolResult> {
        next.run()
    }
}

struct CountObserver(AtomicU64);
impl ResultObserver for CountObserver {
    fn name(&self) -> &str {
        "count"
    }
    fn observe(
        &self,
        _identity: &CallIdentity,
        _result: &ToolResultRecord,
    ) -> Result<(), ObserverError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn tools() -> ToolSet {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let tool = NoopTool(
        ToolSpec::builder("noop", "does nothing", schema)
            .read_only()
            .build(),
    );
    let (registry, _) = RegistryBuilder::new()
        .external(ToolSource::Extension("bench".into()), Arc::new(tool))
        .build()
        .unwrap();
    registry.snapshot()
}

fn staged_pipeline() -> Pipeline {
    Pipeline::builder(Arc::new(MemorySink::new()))
        .pre_hook(Arc::new(PassHook))
        .pre_hook(Arc::new(PassHook))
        .guard(Arc::new(AbstainGuard))
        .guard(Arc::new(AbstainGuard))
        .layer(Arc::new(PassLayer))
        .observer(Arc::new(CountObserver(AtomicU64::new(0))))
        .build()
}

fn bare_pipeline() -> Pipeline {
    Pipeline::builder(Arc::new(MemorySink::new())).build()
}

/// Nanoseconds per call over `iters` sequential calls (a fresh in-memory log per sample, so
/// memory stays bounded).
fn sample_pipeline(
    runtime: &tokio::runtime::Runtime,
    build: fn() -> Pipeline,
    tools: &ToolSet,
    iters: u32,
) -> f64 {
    let pipeline = build();
    let control = BatchControl::default();
    runtime.block_on(async {
        let started = Instant::now();
        for i in 0..iters {
            let request = CallRequest::new("c1", i, "noop", r#"{"path":"a.txt"}"#);
            let committed = pipeline
                .execute_one(tools, request, &control)
                .await
                .unwrap();
            black_box(committed);
        }
        started.elapsed().as_nanos() as f64 / f64::from(iters)
    })
}

fn sample_spawn(runtime: &tokio::runtime::Runtime, iters: u32) -> f64 {
    runtime.block_on(async {
        let started = Instant::now();
        for i in 0..iters {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _ = tx.send(black_box(i));
            });
            black_box(rx.await.unwrap());
        }
        started.elapsed().as_nanos() as f64 / f64::from(iters)
    })
}

fn row(name: &str, ours: f64, baseline: f64, goal: &str, goal_max: Option<f64>) {
    BenchRow {
        row: name,
        ours_ns: ours,
        baseline_name: "tokio::spawn + oneshot",
        baseline_ns: baseline,
        goal,
        goal_max_ns: goal_max,
        goal_max_ratio: None,
    }
    .print();
}

#[global_allocator]
static COUNTING: CountingAllocator = CountingAllocator;

/// Allocations per call of both pipelines, against the spawn baseline's per iteration.
fn allocation_rows(runtime: &tokio::runtime::Runtime, tools: &ToolSet) {
    let iters = 2_000;
    let (spawn, spawn_bytes) = allocations_per(iters, |n| {
        sample_spawn(runtime, n);
    });
    for (name, build, goal, goal_max) in [
        (
            "execute_one, no stages: allocations per call (counting allocator)",
            bare_pipeline as fn() -> Pipeline,
            "≤ 4 allocations per call",
            Some(4.0),
        ),
        (
            "execute_one, 2 hooks, 2 guards, 1 layer, 1 observer: allocations per call",
            staged_pipeline as fn() -> Pipeline,
            "informational",
            None,
        ),
    ] {
        let (count, bytes) = allocations_per(iters, |n| {
            sample_pipeline(runtime, build, tools, n);
        });
        let row = json!({
            "row": format!("{name}, {bytes:.0} bytes"),
            "unit": "allocations",
            "ours": count,
            "baseline_name": format!("tokio::spawn + oneshot ({spawn_bytes:.0} bytes)"),
            "baseline": spawn,
            "goal": goal,
            "goal_max": goal_max,
            "goal_max_ratio": null,
        });
        println!("BENCH_ROW {row}");
    }
}

fn main() {
    // `--profile N`: only N staged calls, for `valgrind --tool=callgrind` instruction counts.
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--profile") {
        let calls = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(10_000);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // `--profile N spawn` counts the baseline instead, `--profile N bare` the pipeline
        // without stages.
        let ns = match args.get(at + 2).map(String::as_str) {
            Some("spawn") => sample_spawn(&runtime, calls),
            Some("bare") => sample_pipeline(&runtime, bare_pipeline, &tools(), calls),
            _ => sample_pipeline(&runtime, staged_pipeline, &tools(), calls),
        };
        println!("profiled {calls} iterations: {ns:.0} ns each");
        return;
    }
    let quick = args.iter().any(|arg| arg == "--quick");
    let (samples, iters) = if quick { (15, 1_000) } else { (61, 4_000) };
    // One thread: the pipeline itself spawns nothing, and the baseline's spawn then measures
    // the scheduler round trip without cross-thread wake-ups. Timers only, no I/O driver:
    // with one, the baseline made an `epoll_wait` per iteration (strace), which is no floor.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let tools = tools();

    // Warm up caches, the allocator and the runtime.
    sample_pipeline(&runtime, staged_pipeline, &tools, iters);
    sample_spawn(&runtime, iters);

    let (mut staged, mut bare, mut spawn) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        staged.push(sample_pipeline(&runtime, staged_pipeline, &tools, iters));
        spawn.push(sample_spawn(&runtime, iters));
        bare.push(sample_pipeline(&runtime, bare_pipeline, &tools, iters));
    }
    let spawn = median(spawn);
    println!(
        "pipeline bench: {samples} samples x {iters} calls, current-thread runtime, in-memory log"
    );
    row(
        "execute_one: no-op tool, 2 hooks, 2 guards, 1 layer, 1 observer, in-memory log",
        median(staged),
        spawn,
        "≤ 1.5 µs per call",
        Some(1_500.0),
    );
    row(
        "execute_one: no-op tool, no stages, in-memory log",
        median(bare),
        spawn,
        "≤ 1 µs per call",
        Some(1_000.0),
    );
    allocation_rows(&runtime, &tools);
    if !quick {
        instruction_row();
    }
}

/// Instructions per call, counted by callgrind: unlike time, the same on a busy or an idle
/// machine. The count for N calls minus the count for M calls, over N - M, cancels start-up.
fn instruction_row() {
    let per_call = |what: &str| instructions_per_iteration(&["--profile"], 6_000, 1_000, &[what]);
    let Some(baseline) = per_call("spawn") else {
        println!("pipeline bench: valgrind not available; no instruction-count rows");
        return;
    };
    for (what, name, goal, goal_max) in [
        (
            "bare",
            "execute_one, no stages: instructions per call (callgrind)",
            "≤ 5,000 instructions per call",
            Some(5_000.0),
        ),
        (
            "staged",
            "execute_one, 2 hooks, 2 guards, 1 layer, 1 observer: instructions per call (callgrind)",
            "informational: stable where time is not",
            None,
        ),
    ] {
        let Some(ours) = per_call(what) else {
            println!("pipeline bench: callgrind failed for {what}; no row");
            continue;
        };
        let row = json!({
            "row": name,
            "unit": "instructions",
            "ours": ours,
            "baseline_name": "tokio::spawn + oneshot",
            "baseline": baseline,
            "goal": goal,
            "goal_max": goal_max,
            "goal_max_ratio": null,
        });
        println!("BENCH_ROW {row}");
    }
}
