//! The bash tool on `true` beside a bare `bash -c true` spawn, in one run. The difference is
//! what a call costs on top of the shell: the pipeline, the PID namespace that keeps every
//! process inside the call, and output capture. Prints `BENCH_ROW` lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use toolrail_shell_tool::{BashTool, SandboxMode, ShellConfig};
use toolrail_testkit::bench::{BenchRow, median};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    BatchControl, CallRequest, Pipeline, RegistryBuilder, Typed, WorkspaceRoots,
};

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let samples = if quick { 20 } else { 100 };
    let dir = tempfile::tempdir().unwrap();
    let mut config = ShellConfig::new(
        WorkspaceRoots::new([dir.path()]).unwrap(),
        dir.path().join("session"),
    );
    config.mode = SandboxMode::FullAccess;
    let (registry, _) = RegistryBuilder::new()
        .builtin(Typed::new(BashTool::new(config)))
        .build()
        .unwrap();
    let tools = registry.snapshot();
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let args = json!({"command": "true", "description": "nothing"}).to_string();
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for n in 0..samples {
        let started = Instant::now();
        let result = runtime
            .block_on(pipeline.execute_one(
                &tools,
                CallRequest::new(format!("c{n}"), 0, "bash", args.clone()),
                &BatchControl::default(),
            ))
            .unwrap();
        ours.push(started.elapsed().as_nanos() as f64);
        assert!(!result.record.is_error, "{:?}", result.record);
        let started = Instant::now();
        let status = Command::new("bash")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .status()
            .unwrap();
        bare.push(started.elapsed().as_nanos() as f64);
        assert!(status.success());
    }
    let sandboxed = {
        let mut config = ShellConfig::new(
            WorkspaceRoots::new([dir.path()]).unwrap(),
            dir.path().join("session"),
        );
        config.mode = SandboxMode::WorkspaceWrite;
        let helper = std::path::PathBuf::from(env!("CARGO_BIN_EXE_toolrail-sandbox"));
        config.sandbox_helper = Some(helper);
        let (registry, _) = RegistryBuilder::new()
            .builtin(Typed::new(BashTool::new(config)))
            .build()
            .unwrap();
        let tools = registry.snapshot();
        let mut times = Vec::new();
        for n in 0..samples {
            let started = Instant::now();
            let result = runtime
                .block_on(pipeline.execute_one(
                    &tools,
                    CallRequest::new(format!("s{n}"), 0, "bash", args.clone()),
                    &BatchControl::default(),
                ))
                .unwrap();
            times.push(started.elapsed().as_nanos() as f64);
            assert!(!result.record.is_error, "{:?}", result.record);
        }
        median(times)
    };
    let (ours, bare) = (median(ours), median(bare));
    BenchRow {
        row: "bash tool on `true`, workspace-write (Landlock + seccomp helper as well)",
        ours_ns: sandboxed,
        baseline_name: "bash -c true, spawned and waited",
        baseline_ns: bare,
        goal: "overhead ≤ 3 ms",
        goal_max_ns: Some(bare + 3_000_000.0),
        goal_max_ratio: None,
    }
    .print();
    BenchRow {
        row: "bash tool on `true`, full-access (PID namespace, capture, pipeline)",
        ours_ns: ours,
        baseline_name: "bash -c true, spawned and waited",
        baseline_ns: bare,
        goal: "overhead ≤ 2 ms",
        goal_max_ns: Some(bare + 2_000_000.0),
        goal_max_ratio: None,
    }
    .print();
}
