//! How a step's cost grows with the session: at step 1,000 against step 10 of one long
//! turn, and with 1,000 tools offered against 10. Each step is one model request answered
//! with one no-op call; a step's cost is the time from one request to the next (the loop,
//! the request it builds, the batch, the in-memory log). A session whose requests copy the
//! whole conversation, or every tool's schema, grows here. Prints `BENCH_ROW {json}` for
//! `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{
    AgentLoop, LoopConfig, ModelClient, ModelError, ModelRequest, ModelResponse, Scheduler,
    SchedulerConfig,
};
use toolrail_session_log::{
    BoxFuture, CallId, MemorySink, SessionLog, ToolSource,
    event::{AssistantBlock, AssistantMessage, StopReason},
};
use toolrail_test_support::bench::{BenchRow, median};
use toolrail_tool_probe::NoopTool;
use toolrail_tools_core::{Pipeline, RegistryBuilder, ToolSpec};

/// Asks for one `noop` call per request until `steps`, then ends the turn; notes when each
/// request arrived. It keeps no copy of the requests.
struct Stepper {
    steps: usize,
    arrivals: Mutex<Vec<Instant>>,
}

impl ModelClient for Stepper {
    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let step = {
                let mut arrivals = self.arrivals.lock();
                arrivals.push(Instant::now());
                arrivals.len()
            };
            let blocks = if step < self.steps {
                vec![AssistantBlock::ToolCall {
                    call_id: CallId::from(format!("c{step}")),
                    name: "noop".to_owned(),
                    arguments_raw: format!("{{\"note\": \"step {step}\"}}"),
                }]
            } else {
                vec![AssistantBlock::Text {
                    text: "done".to_owned(),
                }]
            };
            let stop_reason = if step < self.steps {
                StopReason::ToolCalls
            } else {
                StopReason::EndTurn
            };
            Ok(ModelResponse {
                message: AssistantMessage {
                    blocks,
                    stop_reason,
                },
                usage: None,
                response_id: None,
                response_model: None,
            })
        })
    }
}

/// A tool's schema about the size real tools have: a few described properties.
fn schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "note": {"type": "string", "description": "what the step is about"},
            "path": {"type": "string", "description": "a file, relative to the workspace"},
            "limit": {"type": "integer", "minimum": 1, "description": "how many at most"},
            "mode": {"type": "string", "enum": ["a", "b", "c"], "description": "how"},
        },
        "additionalProperties": false,
    })
}

/// One turn of `steps` steps with `tools` tools offered: the time of each step, in order.
fn turn(runtime: &tokio::runtime::Runtime, steps: usize, tools: usize) -> Vec<f64> {
    let mut builder = RegistryBuilder::new().builtin(NoopTool(
        ToolSpec::builder("noop", "does nothing", schema()).build(),
    ));
    for n in 1..tools {
        builder = builder.external(
            ToolSource::Extension("bench".into()),
            Arc::new(NoopTool(
                ToolSpec::builder(format!("other_{n}"), "another tool", schema()).build(),
            )),
        );
    }
    let (registry, _) = builder.build().unwrap();
    let log: Arc<dyn SessionLog> = Arc::new(MemorySink::new());
    let scheduler = Scheduler::new(
        Arc::new(Pipeline::builder(log.clone()).build()),
        SchedulerConfig::default(),
    );
    let model = Arc::new(Stepper {
        steps,
        arrivals: Mutex::new(Vec::with_capacity(steps)),
    });
    let mut agent = AgentLoop::new(
        registry,
        scheduler,
        log,
        model.clone(),
        LoopConfig {
            max_steps: u32::try_from(steps).unwrap() + 1,
            ..LoopConfig::default()
        },
    );
    common::complete_turn(runtime, &mut agent);
    let arrivals = model.arrivals.lock();
    arrivals
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_nanos() as f64)
        .collect()
}

/// The median step time over steps `from..to` (1-based) of `turns`.
fn window(turns: &[Vec<f64>], from: usize, to: usize) -> f64 {
    median(
        turns
            .iter()
            .flat_map(|steps| steps[from - 1..to - 1].iter().copied())
            .collect(),
    )
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reps = if quick { 2 } else { 5 };
    let long: Vec<Vec<f64>> = (0..reps).map(|_| turn(&runtime, 1_010, 10)).collect();
    BenchRow {
        row: "step cost at steps 1,000–1,010 of one turn (one call per step, 10 tools, in-memory log)",
        ours_ns: window(&long, 1_000, 1_010),
        baseline_name: "steps 10–20 of the same turns",
        baseline_ns: window(&long, 10, 20),
        goal: "flat: ≤ 1.2 × step 10",
        goal_max_ns: None,
        goal_max_ratio: Some(1.2),
    }
    .print();
    let few: Vec<Vec<f64>> = (0..reps).map(|_| turn(&runtime, 60, 10)).collect();
    let many: Vec<Vec<f64>> = (0..reps).map(|_| turn(&runtime, 60, 1_000)).collect();
    BenchRow {
        row: "step cost with 1,000 tools offered (steps 10–50, one call per step, in-memory log)",
        ours_ns: window(&many, 10, 50),
        baseline_name: "the same steps with 10 tools",
        baseline_ns: window(&few, 10, 50),
        goal: "≤ 1.5 × with 10 tools",
        goal_max_ns: None,
        goal_max_ratio: Some(1.5),
    }
    .print();
}
