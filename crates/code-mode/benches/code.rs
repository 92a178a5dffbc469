//! Code mode beside native calls, in one run: 1,000 no-op calls made by one JavaScript
//! program (each a binding call through the gate and the whole pipeline, logged twice more
//! as dispatches) against the same 1,000 calls made natively as one batch through the
//! scheduler; the cold start of a JavaScript run (a program that returns at once) against a
//! bare thread spawn; and the cold start of a Python run (sandboxed `python3 -I` and its
//! runner) against a bare `python3 -I -c pass`, with binding calls from Python per call.
//! Prints `BENCH_ROW` lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use toolrail_agent_loop::{Scheduler, SchedulerConfig};
use toolrail_code_mode::{CodeMode, Limits, PythonRuntime, RUN_CODE};
use toolrail_session_log::MemorySink;
use toolrail_test_support::bench::{BenchRow, median};
use toolrail_tool_probe::Probe;
use toolrail_tools_core::{
    CallRequest, CancellationToken, Pipeline, RegistryBuilder, Typed, pipeline::BatchControl,
};

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (rounds, calls) = if quick { (3, 300) } else { (7, 1_000) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = std::env::temp_dir().join(format!("toolrail-bench-code-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let python_runtime = PythonRuntime::new(Vec::new(), &scratch);
    let interpreter = python_runtime.python.clone();
    let mode = CodeMode::new(Limits::default()).with_python(python_runtime);
    let (registry, _) = RegistryBuilder::new()
        .builtin(Probe::new(None))
        .reserve(RUN_CODE)
        .runtime_tool(Arc::new(Typed::new(mode.tool())))
        .build()
        .unwrap();
    let program = format!(
        "const all = []; for (let i = 0; i < {calls}; i++) {{ all.push(probe({{}})); }} await Promise.all(all); return all.length;"
    );
    let python_calls = calls;
    let python_program = format!(
        "import asyncio\nlen(await asyncio.gather(*[probe() for _ in range({python_calls})]))"
    );
    let (mut coded, mut native, mut cold, mut thread) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut python_cold, mut bare_python, mut python_coded) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Fresh logs each round, so no round pays for the last one's events.
        let log = Arc::new(MemorySink::new());
        let pipeline = Arc::new(Pipeline::builder(log.clone()).build());
        mode.attach(Arc::clone(&pipeline), registry.clone(), log.clone());
        let tools = registry.snapshot().for_code_mode("run_code");
        let args = json!({"code": program, "description": "bench"}).to_string();
        let started = Instant::now();
        let result = runtime
            .block_on(pipeline.execute_one(
                &tools,
                CallRequest::new(format!("r{round}"), 0, "run_code", args),
                &BatchControl::default(),
            ))
            .unwrap();
        coded.push(started.elapsed().as_nanos() as f64 / calls as f64);
        assert!(!result.record().is_error(), "{}", result.record().text());

        let log = Arc::new(MemorySink::new());
        let scheduler = Scheduler::new(
            Arc::new(Pipeline::builder(log).build()),
            SchedulerConfig::default(),
        );
        let plain = registry.snapshot();
        let batch: Vec<CallRequest> = (0..calls)
            .map(|n| CallRequest::new(format!("n{n}"), n as u32, "probe", "{}"))
            .collect();
        let started = Instant::now();
        let outcome = runtime
            .block_on(scheduler.run_batch(&plain, batch, CancellationToken::new(), None))
            .unwrap();
        native.push(started.elapsed().as_nanos() as f64 / calls as f64);
        assert_eq!(outcome.results.len(), calls);

        let args = json!({"code": "return 1;", "description": "cold"}).to_string();
        let started = Instant::now();
        let result = runtime
            .block_on(pipeline.execute_one(
                &tools,
                CallRequest::new(format!("k{round}"), 0, "run_code", args),
                &BatchControl::default(),
            ))
            .unwrap();
        cold.push(started.elapsed().as_nanos() as f64);
        assert!(!result.record().is_error());
        let started = Instant::now();
        std::thread::spawn(|| std::hint::black_box(1))
            .join()
            .unwrap();
        thread.push(started.elapsed().as_nanos() as f64);

        let python = |id: String, code: &str| {
            let args = json!({"code": code, "description": "bench", "language": "python"});
            let started = Instant::now();
            let result = runtime
                .block_on(pipeline.execute_one(
                    &tools,
                    CallRequest::new(id, 0, "run_code", args.to_string()),
                    &BatchControl::default(),
                ))
                .unwrap();
            assert!(!result.record().is_error(), "{}", result.record().text());
            started.elapsed().as_nanos() as f64
        };
        let cold_start = python(format!("p{round}"), "1");
        python_cold.push(cold_start);
        let started = Instant::now();
        let status = std::process::Command::new(&interpreter)
            .args(["-I", "-c", "pass"])
            .status()
            .unwrap();
        bare_python.push(started.elapsed().as_nanos() as f64);
        assert!(status.success());
        // What the gathered calls cost beyond starting a program that imports asyncio.
        let asyncio_start = python(format!("a{round}"), "import asyncio\n0");
        let whole = python(format!("q{round}"), &python_program);
        python_coded.push((whole - asyncio_start).max(0.0) / python_calls as f64);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let native = median(native);
    BenchRow {
        row: "code mode: binding call from JavaScript (1,000 no-op calls under Promise.all, per call)",
        ours_ns: median(coded),
        baseline_name: "the same calls as one native batch through the scheduler",
        baseline_ns: native,
        goal: "≤ 5 µs per binding call",
        goal_max_ns: Some(5_000.0),
        goal_max_ratio: None,
    }
    .print();
    BenchRow {
        row: "code mode: cold start of a JavaScript run (`return 1`, whole run_code call)",
        ours_ns: median(cold),
        baseline_name: "a bare thread spawn and join",
        baseline_ns: median(thread),
        goal: "≤ 1 ms",
        goal_max_ns: Some(1_000_000.0),
        goal_max_ratio: None,
    }
    .print();
    BenchRow {
        row: "code mode: cold start of a Python run (`1`, whole run_code call: sandbox, interpreter, runner)",
        ours_ns: median(python_cold),
        baseline_name: "the same interpreter started bare: `python3 -I -c pass`, unsandboxed",
        baseline_ns: median(bare_python),
        goal: "none set (reported)",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
    BenchRow {
        row: "code mode: binding call from Python (1,000 no-op calls under asyncio.gather, per call, the start of a program importing asyncio taken off)",
        ours_ns: median(python_coded),
        baseline_name: "a native call in one batch through the scheduler",
        baseline_ns: native,
        goal: "none set (reported)",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print();
}
