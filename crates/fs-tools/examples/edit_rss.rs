//! Peak memory of one `edit` on a large file: writes a file of `TOOLRAIL_EDIT_RSS_MB`
//! megabytes (default 200) with one marked line in the middle, reads it through the tools
//! (so it may be edited), resets the peak (`/proc/self/clear_refs`), edits the marked line
//! and prints the peak resident size the edit reached.
//!
//! `cargo run --release -p toolrail-fs-tools --example edit_rss`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
use toolrail_fs_tools::FileTools;
use toolrail_tools_core::log::{MemorySink, ToolSource};
use toolrail_tools_core::{
    CallRequest, Pipeline, RegistryBuilder, WorkspaceRoots, pipeline::BatchControl,
};

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|line| line.starts_with(field))
        .map(|line| {
            line.split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn main() {
    let megabytes: usize = std::env::var("TOOLRAIL_EDIT_RSS_MB")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.txt");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let line = "a line of the big file, long enough to look like source code;\n";
    let lines = megabytes * 1_000_000 / line.len();
    for n in 0..lines {
        if n == lines / 2 {
            file.write_all(b"THE MARKED LINE\n").unwrap();
        }
        file.write_all(line.as_bytes()).unwrap();
    }
    file.flush().unwrap();
    drop(file);
    let size = std::fs::metadata(&path).unwrap().len();

    let files = FileTools::new(WorkspaceRoots::new([dir.path()]).unwrap());
    let mut builder = RegistryBuilder::new();
    for tool in files.tools() {
        builder = builder.external(ToolSource::Builtin, tool);
    }
    let (registry, _) = builder.build().unwrap();
    let tools = registry.snapshot();
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let call = |id: &str, tool: &str, args: serde_json::Value| {
        runtime
            .block_on(pipeline.execute_one(
                &tools,
                CallRequest::new(id, 0, tool, args.to_string()),
                &BatchControl::default(),
            ))
            .unwrap()
    };
    let read = call("r", "read", json!({"path": "big.txt", "limit": 1}));
    assert!(!read.record().is_error(), "{:?}", read.record());
    println!("file: {size} bytes");
    println!(
        "after read: VmRSS {}, VmHWM {}",
        status("VmRSS:"),
        status("VmHWM:")
    );
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    println!("peak reset: VmHWM {}", status("VmHWM:"));
    let started = std::time::Instant::now();
    let edited = call(
        "e",
        "edit",
        json!({"path": "big.txt", "edits": [{"old": "THE MARKED LINE", "new": "THE EDITED LINE"}]}),
    );
    let elapsed = started.elapsed();
    assert!(!edited.record().is_error(), "{:?}", edited.record());
    println!(
        "edit: {:.2} s, peak during the edit: VmHWM {}",
        elapsed.as_secs_f64(),
        status("VmHWM:")
    );
}
