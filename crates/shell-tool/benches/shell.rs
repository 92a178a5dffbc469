//! The bash tool on `true` beside a bare `bash -c true` spawn, in one run, each sample of
//! every configuration taken in turn so they share the machine's noise. The difference is
//! what a call costs on top of the shell: the pipeline, the PID namespace that keeps every
//! process inside the call, output capture, and the sandbox of each tier. Prints
//! `BENCH_ROW` lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use toolrail_shell_tool::{BashTool, SandboxMode, SandboxTier, ShellConfig};
use toolrail_test_support::bench::{BenchRow, median};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    CallRequest, Pipeline, RegistryBuilder, ToolSet, Typed, WorkspaceRoots, pipeline::BatchControl,
};

struct Variant {
    row: &'static str,
    goal: &'static str,
    /// The goal, as an overhead over the bare spawn; `None`: reported only.
    overhead_ns: Option<f64>,
    tools: ToolSet,
    times: Vec<f64>,
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let samples = if quick { 20 } else { 100 };
    let dir = tempfile::tempdir().unwrap();
    let tools = |mode: SandboxMode, tier: SandboxTier| {
        let mut config = ShellConfig::new(
            WorkspaceRoots::new([dir.path()]).unwrap(),
            dir.path().join("session"),
        );
        config.mode = mode;
        config.tier = tier;
        let (registry, _) = RegistryBuilder::new()
            .builtin(Typed::new(BashTool::new(config)))
            .build()
            .unwrap();
        registry.snapshot()
    };
    let mut variants = vec![
        Variant {
            row: "bash tool on `true`, full-access (PID namespace, capture, pipeline)",
            goal: "overhead ≤ 2 ms",
            overhead_ns: Some(2_000_000.0),
            tools: tools(SandboxMode::FullAccess, SandboxTier::Namespaces),
            times: Vec::new(),
        },
        Variant {
            row: "bash tool on `true`, read-only (namespaces tier: mounts, netns, Landlock, seccomp)",
            goal: "overhead ≤ 3 ms",
            overhead_ns: Some(3_000_000.0),
            tools: tools(SandboxMode::ReadOnly, SandboxTier::Namespaces),
            times: Vec::new(),
        },
        Variant {
            row: "bash tool on `true`, workspace-write (namespaces tier: mounts, netns, Landlock, seccomp)",
            goal: "overhead ≤ 3 ms",
            overhead_ns: Some(3_000_000.0),
            tools: tools(SandboxMode::WorkspaceWrite, SandboxTier::Namespaces),
            times: Vec::new(),
        },
    ];
    let bubblewrap = SandboxTier::bubblewrap();
    if matches!(&bubblewrap, SandboxTier::Bubblewrap(program) if program.exists()) {
        variants.push(Variant {
            row: "bash tool on `true`, workspace-write in bubblewrap (same view and seccomp)",
            goal: "reported (issue 7 sets no goal)",
            overhead_ns: None,
            tools: tools(SandboxMode::WorkspaceWrite, bubblewrap),
            times: Vec::new(),
        });
    } else {
        eprintln!("bubblewrap is not installed: no bubblewrap row");
    }
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let args = json!({"command": "true", "description": "nothing"}).to_string();
    let mut bare = Vec::new();
    for n in 0..samples {
        for (v, variant) in variants.iter_mut().enumerate() {
            let started = Instant::now();
            let result = runtime
                .block_on(pipeline.execute_one(
                    &variant.tools,
                    CallRequest::new(format!("c{n}-{v}"), 0, "bash", args.clone()),
                    &BatchControl::default(),
                ))
                .unwrap();
            variant.times.push(started.elapsed().as_nanos() as f64);
            assert!(!result.record().is_error(), "{:?}", result.record());
        }
        let started = Instant::now();
        let status = Command::new("bash")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .status()
            .unwrap();
        bare.push(started.elapsed().as_nanos() as f64);
        assert!(status.success());
    }
    let bare = median(bare);
    for variant in variants {
        BenchRow {
            row: variant.row,
            ours_ns: median(variant.times),
            baseline_name: "bash -c true, spawned and waited",
            baseline_ns: bare,
            goal: variant.goal,
            goal_max_ns: variant.overhead_ns.map(|overhead| bare + overhead),
            goal_max_ratio: None,
        }
        .print();
    }
}
