//! The file tools beside the programs people would otherwise run, in one run: `grep` for a
//! literal and for a regex over a large source tree against the `rg` binary with the same
//! flags, and `read` of a 10 MB file against `cat` to `/dev/null`. Prints `BENCH_ROW` lines
//! for `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use toolrail_fs_tools::FileTools;
use toolrail_test_support::bench::{BenchRow, median};
use toolrail_tools_core::log::{MemorySink, ToolSource};
use toolrail_tools_core::{
    CallRequest, Pipeline, RegistryBuilder, ToolSet, WorkspaceRoots, pipeline::BatchControl,
};

/// A large tree of source files: the toolchain's library sources when installed, else the
/// sources of the crates this workspace depends on.
fn large_tree() -> PathBuf {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let library = PathBuf::from(String::from_utf8(sysroot.stdout).unwrap().trim())
        .join("lib/rustlib/src/rust/library");
    if library.is_dir() {
        return library;
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"));
    let registry = cargo_home.join("registry/src");
    assert!(registry.is_dir(), "no large source tree found");
    registry
}

struct Tools {
    pipeline: Pipeline,
    tools: ToolSet,
}

fn tools(root: &Path) -> Tools {
    let files = FileTools::new(WorkspaceRoots::new([root]).unwrap());
    let mut builder = RegistryBuilder::new();
    for tool in files.tools() {
        builder = builder.external(ToolSource::Builtin, tool);
    }
    let (registry, _) = builder.build().unwrap();
    Tools {
        pipeline: Pipeline::builder(Arc::new(MemorySink::new())).build(),
        tools: registry.snapshot(),
    }
}

fn time_call(
    runtime: &tokio::runtime::Runtime,
    tools: &Tools,
    tool: &str,
    args: serde_json::Value,
) -> f64 {
    let started = Instant::now();
    let result = runtime
        .block_on(tools.pipeline.execute_one(
            &tools.tools,
            CallRequest::new("b", 0, tool, args.to_string()),
            &BatchControl::default(),
        ))
        .unwrap();
    let elapsed = started.elapsed().as_nanos() as f64;
    assert!(!result.record().is_error(), "{:?}", result.record());
    elapsed
}

fn time_command(program: &str, args: &[&str]) -> f64 {
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|error| {
            panic!("{program} could not run (install it: apt-get install ripgrep): {error}")
        });
    let elapsed = started.elapsed().as_nanos() as f64;
    // rg exits 1 when nothing matches; anything else is a failure.
    assert!(
        status.code().is_some_and(|code| code <= 1),
        "{program} failed: {status}"
    );
    elapsed
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let samples = if quick { 3 } else { 7 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let tree = large_tree();
    let tree_text = tree.display().to_string();
    let files = tools(&tree);
    eprintln!("fs bench: searching {tree_text}");
    for (name, pattern) in [("literal", "unsafe fn"), ("regex", r"fn [a-z_]+_mut\(")] {
        // Warm the page cache for both sides first.
        time_command(
            "rg",
            &[
                "--count",
                "--hidden",
                "--no-require-git",
                pattern,
                &tree_text,
            ],
        );
        let (mut ours, mut rg) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            ours.push(time_call(
                &runtime,
                &files,
                "grep",
                json!({"pattern": pattern, "output": "count"}),
            ));
            rg.push(time_command(
                "rg",
                &[
                    "--count",
                    "--hidden",
                    "--no-require-git",
                    pattern,
                    &tree_text,
                ],
            ));
        }
        BenchRow {
            row: &format!("grep, {name} `{pattern}` over a large source tree (count mode)"),
            ours_ns: median(ours),
            baseline_name: "rg --count --hidden --no-require-git, same tree",
            baseline_ns: median(rg),
            goal: "within 1.5× of rg",
            goal_max_ns: None,
            goal_max_ratio: Some(1.5),
        }
        .print();
    }

    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.txt");
    let line = "a line of a ten megabyte file, long enough to look like code;\n";
    std::fs::write(&big, line.repeat(10_000_000 / line.len())).unwrap();
    let reader = tools(dir.path());
    let big_text = big.display().to_string();
    time_command("cat", &[&big_text]);
    let (mut ours, mut cat) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        ours.push(time_call(
            &runtime,
            &reader,
            "read",
            json!({"path": "big.txt"}),
        ));
        cat.push(time_command(
            "sh",
            &["-c", &format!("cat '{big_text}' > /dev/null")],
        ));
    }
    BenchRow {
        row: "read of a 10 MB file (digest, line count, first 2000 lines)",
        ours_ns: median(ours),
        baseline_name: "sh -c 'cat FILE > /dev/null'",
        baseline_ns: median(cat),
        goal: "within 2× of cat",
        goal_max_ns: None,
        goal_max_ratio: Some(2.0),
    }
    .print();
}
