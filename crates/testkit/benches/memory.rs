//! Memory: the peak resident set of a process that runs (a) a session of 10,000 calls
//! (100 model steps of 100 `probe` calls, logged to a JSONL file) and (b) one `bash` call
//! printing 1 GiB, each beside the same process doing the least it can (an empty session;
//! a `bash` call running `true`). Each measurement is a fresh process — this bench re-run
//! with a mode — whose peak (`VmHWM`) it reports. Mebibytes; lower is better.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use serde_json::json;
use toolrail_testkit::Scenario;
use toolrail_testkit::bench::BenchRow;

const CALLS_PER_STEP: usize = 100;

/// A session of `steps` model steps of 100 probe calls each (0: one answer, no calls).
fn calls_session(steps: usize) -> String {
    let mut model: Vec<serde_json::Value> = (0..steps)
        .map(|step| {
            let calls: Vec<serde_json::Value> = (0..CALLS_PER_STEP)
                .map(|n| json!({"id": format!("c{step}_{n}"), "name": "probe", "arguments": "{}"}))
                .collect();
            json!({"tool_calls": calls, "stop_reason": "tool_use"})
        })
        .collect();
    model.push(json!({"text": "done", "stop_reason": "end_turn"}));
    json!({
        "config": {"tools": {"enabled": ["probe"]}, "store": {"durability": "batched"},
                   "permissions": {"preset": "full-auto"}},
        "turns": [{"user": "go", "model": model}]
    })
    .to_string()
}

/// A session with one `bash` call running `command`, unsandboxed (full-access).
fn bash_session(command: &str) -> String {
    json!({
        "config": {"tools": {"enabled": ["bash"]}, "sandbox": {"mode": "full-access"},
                   "permissions": {"preset": "full-auto"}, "limits": {"call_timeout_ms": 600_000}},
        "turns": [{"user": "go", "model": [
            {"tool_calls": [{"id": "c1", "name": "bash",
                "arguments": json!({"command": command, "description": "print",
                                    "timeout_ms": 600_000}).to_string()}],
             "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}
        ]}]
    })
    .to_string()
}

/// This process's peak resident set, in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// Runs one scenario in this process and prints its peak.
fn child(scenario: &str) {
    let scenario = Scenario::from_json(scenario).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(scenario.run(dir.path())).unwrap();
    assert!(report.mismatches.is_empty());
    println!("{}", peak_mib());
}

/// The peak of a fresh process running `mode`.
fn measure(mode: &str) -> f64 {
    let output = Command::new(std::env::current_exe().unwrap())
        .arg(mode)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .and_then(|line| line.trim().parse().ok())
        .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str);
    match mode {
        Some("--session-calls") => return child(&calls_session(100)),
        Some("--session-empty") => return child(&calls_session(0)),
        Some("--bash-gib") => return child(&bash_session("head -c 1073741824 /dev/zero")),
        Some("--bash-true") => return child(&bash_session("true")),
        _ => {}
    }
    let session = measure("--session-calls");
    let empty = measure("--session-empty");
    BenchRow {
        row: "memory: peak RSS of a session of 10,000 calls (100 steps × 100, JSONL log)",
        ours_ns: session,
        baseline_name: "the same process with an empty session",
        baseline_ns: empty,
        goal: "≤ 64 MiB",
        goal_max_ns: Some(64.0),
        goal_max_ratio: None,
    }
    .print_in("MiB");
    let printed = measure("--bash-gib");
    let quiet = measure("--bash-true");
    BenchRow {
        row: "memory: peak RSS while a bash call prints 1 GiB (capped, spilled to a file)",
        ours_ns: printed,
        baseline_name: "the same process running `true`",
        baseline_ns: quiet,
        goal: "≤ baseline + 64 MiB",
        goal_max_ns: Some(quiet + 64.0),
        goal_max_ratio: None,
    }
    .print_in("MiB");
}
