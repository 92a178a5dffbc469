//! What a collector that never answers costs a session (issue 28): the same turn of many
//! instant calls, JSONL log in mode none, without export and with export to a collector
//! that is not there (a loopback port nothing listens on) or that accepts and never answers
//! (a listener that never reads), measured side by side in one run. The bounded queue is
//! what a dead collector may cost; the goal is ≤ 1.1× the turn without export.
//!
//! `--only none|refused|silent` runs that variant alone and prints no row: for counting
//! instructions, `valgrind --tool=callgrind <bench binary> --quick --only silent` against
//! `--only none` (the calling path is what differs outside `feed::make_spans`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Instant;

use toolrail_runtime::scenario::ScriptedModel;
use toolrail_runtime::telemetry::Telemetry;
use toolrail_runtime::{Agent, PresetName, Store, TelemetryConfig};
use toolrail_session_log::CallId;
use toolrail_session_log::event::{AssistantBlock, AssistantMessage, StopReason};
use toolrail_session_store::Durability;
use toolrail_test_support::bench::{BenchRow, median};
use toolrail_tools_core::{ToolContext, ToolOutput, ToolResult, ToolSpec, Typed, TypedTool};

const CALLS: usize = 1_000;

struct Noop;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

impl TypedTool for Noop {
    type Args = NoArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<NoArgs>("noop", "Does nothing.")
            .read_only()
            .parallel_safe()
            .build()
    }

    async fn run(&self, _ctx: &ToolContext, _args: NoArgs) -> ToolResult {
        Ok(ToolOutput::text("ok"))
    }
}

fn burst() -> AssistantMessage {
    AssistantMessage {
        blocks: (0..CALLS)
            .map(|n| AssistantBlock::ToolCall {
                call_id: CallId::from(format!("c{n}").as_str()),
                name: "noop".to_owned(),
                arguments_raw: "{}".to_owned(),
            })
            .collect(),
        stop_reason: StopReason::ToolCalls,
    }
}

/// One turn of `CALLS` instant calls in a new session: its time in nanoseconds, and the
/// time the session's end then took (its telemetry thread making the spans it was still
/// behind on, when it exports; not part of the turn).
fn turn(
    runtime: &tokio::runtime::Runtime,
    store: &Store,
    workspace: &std::path::Path,
    id: &str,
    telemetry: Option<&Telemetry>,
) -> (f64, f64) {
    runtime.block_on(async {
        let mut builder = Agent::builder()
            .workspace([workspace])
            .store(store.clone())
            .session_id(id)
            .model_client(Arc::new(ScriptedModel::new([burst()])))
            .tools(Vec::<String>::new())
            .tool(Typed::new(Noop))
            .preset(PresetName::FullAuto);
        if let Some(telemetry) = telemetry {
            builder = builder.telemetry(telemetry.clone());
        }
        let agent = builder.build().await.unwrap();
        let started = Instant::now();
        agent.prompt("go").await.unwrap();
        let took = started.elapsed().as_nanos() as f64;
        let ending = Instant::now();
        drop(agent);
        (took, ending.elapsed().as_nanos() as f64)
    })
}

fn exporting_to(port: u16) -> Telemetry {
    Telemetry::otlp(&TelemetryConfig {
        otlp: true,
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        ..TelemetryConfig::default()
    })
    .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|arg| arg == "--quick");
    let only = args
        .iter()
        .position(|arg| arg == "--only")
        .and_then(|at| args.get(at + 1))
        .cloned();
    let reps = if quick { 5 } else { 31 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let folder = tempfile::tempdir().unwrap();
    let workspace = folder.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let sessions = folder.path().join("sessions");
    let store = Store::open(&format!("jsonl:{}", sessions.display()), Durability::None).unwrap();

    // A port nothing listens on: bound, read, let go.
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_port = refused.local_addr().unwrap().port();
    drop(refused);
    // A collector that accepts and never reads: connections are held, never answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming() {
            held.push(stream);
        }
    });
    let variants: [(&str, Option<Telemetry>); 3] = [
        ("none", None),
        ("refused", Some(exporting_to(refused_port))),
        ("silent", Some(exporting_to(silent_port))),
    ];

    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    let mut endings = [Vec::new(), Vec::new(), Vec::new()];
    // Interleaved, so the machine's noise falls on every variant alike; rep 0 warms up.
    for rep in 0..=reps {
        for (index, (name, telemetry)) in variants.iter().enumerate() {
            if only.as_deref().is_some_and(|only| only != *name) {
                continue;
            }
            let (ns, ending) = turn(
                &runtime,
                &store,
                &workspace,
                &format!("{name}-{rep}"),
                telemetry.as_ref(),
            );
            if rep > 0 {
                samples[index].push(ns / CALLS as f64);
                endings[index].push(ending);
            }
        }
    }
    if let Some(only) = &only {
        println!("{only}: {} turns run, no row printed", reps + 1);
        return;
    }
    let [none, refused, silent] = samples.map(median);
    let endings = endings.map(median);
    for (index, (name, telemetry)) in variants.iter().enumerate() {
        let ending = endings[index] / 1e6;
        let Some(telemetry) = telemetry else {
            println!("{name}: the session's end took {ending:.2} ms (median)");
            continue;
        };
        let report = telemetry.report();
        println!(
            "{name}: {} spans dropped by the bounded queue, {} failed, {} events not made into spans; the session's end took {ending:.2} ms (median)",
            report.dropped, report.failed, report.events_dropped
        );
    }
    let baseline = "the same turn without export";
    BenchRow {
        row: "agent turn, 1000 no-op calls in one message, JSONL log in mode none, OTLP export to a port nothing listens on: per call",
        ours_ns: refused,
        baseline_name: baseline,
        baseline_ns: none,
        goal: "≤ 1.1× (a dead collector costs no more than the bounded queue)",
        goal_max_ns: None,
        goal_max_ratio: Some(1.1),
    }
    .print();
    BenchRow {
        row: "agent turn, 1000 no-op calls in one message, JSONL log in mode none, OTLP export to a collector that accepts and never answers: per call",
        ours_ns: silent,
        baseline_name: baseline,
        baseline_ns: none,
        goal: "≤ 1.1× (a dead collector costs no more than the bounded queue)",
        goal_max_ns: None,
        goal_max_ratio: Some(1.1),
    }
    .print();
    // Not shut down: with a collector that never answers, a shutdown waits for the export
    // timeout, and the process ends here anyway.
    std::process::exit(0);
}
