//! The scheduler with gated tools: bodies block until the test releases them, so every
//! ordering claim is checked on an exact, deterministic schedule.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use toolrail_tools_core::CallArgs;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{LiveEvent, Scheduler, SchedulerConfig, SchedulerConfigError};
use toolrail_session_log::{BoxFuture, ErrorCode, EventData, MemorySink, ToolSource};
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CallRequest, CallView, ClaimMode,
    Concurrency, HookError, Pipeline, PipelineConfig, PreExecuteDecision, PreExecuteHook, PreNext,
    RegistryBuilder, ResourceClaim, ResourceKey, Tool, ToolContext, ToolFailure, ToolOutput,
    ToolResult, ToolSet, ToolSpec,
};

/// Bodies that tell the test they started and wait for it to release them.
#[derive(Default)]
struct Gates {
    /// Calls with `"exclusive_if_flag": true` turn exclusive once this is set.
    flag: std::sync::atomic::AtomicBool,
    release: Mutex<HashMap<String, Arc<Notify>>>,
    started: Mutex<Vec<String>>,
    started_tx: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

impl Gates {
    fn gate(&self, name: &str) -> Arc<Notify> {
        Arc::clone(self.release.lock().entry(name.to_owned()).or_default())
    }

    fn open(&self, name: &str) {
        self.gate(name).notify_one();
    }
}

struct Gated {
    spec: ToolSpec,
    gates: Arc<Gates>,
}

impl Tool for Gated {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, args: &CallArgs) -> Concurrency {
        let turned = args["exclusive_if_flag"].as_bool() == Some(true)
            && self.gates.flag.load(std::sync::atomic::Ordering::SeqCst);
        if args["exclusive"].as_bool() == Some(true) || turned {
            return Concurrency::Exclusive;
        }
        let claims = args["write"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|key| ResourceClaim {
                key: ResourceKey::Custom(key.to_owned()),
                mode: ClaimMode::Write,
            })
            .collect();
        Concurrency::Shared(claims)
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let gate = args["gate"].as_str().unwrap_or_default().to_owned();
            self.gates.started.lock().push(gate.clone());
            if let Some(tx) = self.gates.started_tx.lock().as_ref() {
                let _ = tx.send(gate.clone());
            }
            for step in 0..args["progress"].as_u64().unwrap_or(0) {
                ctx.progress(json!({ "step": step }));
            }
            let release = self.gates.gate(&gate);
            if args["ignore_cancel"].as_bool() == Some(true) {
                release.notified().await;
            } else {
                tokio::select! {
                    () = release.notified() => {}
                    () = ctx.cancellation().cancelled() => return Err(ToolFailure::new("stopped")),
                }
            }
            Ok(ToolOutput::text(format!("{gate} done")))
        })
    }
}

struct Setup {
    gates: Arc<Gates>,
    sink: Arc<MemorySink>,
    tools: ToolSet,
    started: mpsc::UnboundedReceiver<String>,
}

fn setup() -> Setup {
    let gates = Arc::new(Gates::default());
    let (tx, started) = mpsc::unbounded_channel();
    *gates.started_tx.lock() = Some(tx);
    let schema = json!({"type": "object"});
    let tool = Gated {
        spec: ToolSpec::builder("gated", "waits for its gate", schema).build(),
        gates: Arc::clone(&gates),
    };
    let (registry, _) = RegistryBuilder::new()
        .external(ToolSource::Extension("test".into()), Arc::new(tool))
        .build()
        .unwrap();
    Setup {
        gates,
        sink: Arc::new(MemorySink::new()),
        tools: registry.snapshot(),
        started,
    }
}

fn call(id: &str, args: Value) -> CallRequest {
    let index = id.trim_start_matches('c').parse::<u32>().unwrap_or(0);
    CallRequest::new(id, index, "gated", args.to_string())
}

/// The log as `kind call_id` lines, for exact order assertions.
fn log_lines(sink: &MemorySink) -> Vec<String> {
    sink.events()
        .iter()
        .filter(|event| {
            matches!(
                event.data,
                EventData::ToolStart(_) | EventData::ToolResult(_)
            )
        })
        .map(|event| {
            format!(
                "{} {}",
                event.data.kind(),
                event
                    .call_id
                    .as_ref()
                    .map(|id| id.to_string())
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// Waits until the bodies of exactly these gates started (in any order: started bodies run
/// as tasks of their own).
async fn wait_started_all(started: &mut mpsc::UnboundedReceiver<String>, gates: &[&str]) {
    let mut got = Vec::new();
    for _ in gates {
        got.push(
            tokio::time::timeout(Duration::from_secs(5), started.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    got.sort();
    let mut expected: Vec<String> = gates.iter().map(|gate| (*gate).to_owned()).collect();
    expected.sort();
    assert_eq!(got, expected, "other bodies started than expected");
}

async fn wait_started(started: &mut mpsc::UnboundedReceiver<String>, gate: &str) {
    wait_started_all(started, &[gate]).await;
}

fn started_set(gates: &Gates) -> Vec<String> {
    let mut started = gates.started.lock().clone();
    started.sort();
    started
}

fn scheduler(
    sink: &Arc<MemorySink>,
    config: SchedulerConfig,
    pipeline: PipelineConfig,
) -> Arc<Scheduler> {
    let pipeline = Pipeline::builder(sink.clone()).config(pipeline).build();
    Arc::new(Scheduler::new(Arc::new(pipeline), config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_completion_still_commits_in_model_order() {
    let mut s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let (live_tx, mut live) = mpsc::unbounded_channel();
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "b"})),
    ];
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let scheduler = Arc::clone(&scheduler);
        async move {
            scheduler
                .run_batch(
                    &tools,
                    calls,
                    CancellationToken::new(),
                    Some(std::sync::Arc::new(live_tx)),
                )
                .await
        }
    });
    wait_started_all(&mut s.started, &["a", "b"]).await;
    s.gates.open("b");
    // c2 finishes first; c1 still holds the commit order.
    loop {
        if let Some(LiveEvent::Finished { call_id }) = live.recv().await {
            assert_eq!(call_id.as_str(), "c2");
            break;
        }
    }
    assert!(
        !log_lines(&s.sink)
            .iter()
            .any(|line| line.starts_with("tool/result")),
        "nothing commits before c1"
    );
    s.gates.open("a");
    let outcome = batch.await.unwrap().unwrap();
    assert_eq!(
        outcome
            .results
            .iter()
            .map(|r| r.identity().call_id.to_string())
            .collect::<Vec<_>>(),
        ["c1", "c2"]
    );
    let lines = log_lines(&s.sink);
    assert_eq!(
        lines[2..],
        ["tool/result c1", "tool/result c2"],
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_of_two_runs_at_most_two_bodies() {
    let mut s = setup();
    let config = SchedulerConfig {
        max_parallel: NonZeroUsize::new(2).unwrap(),
        ..SchedulerConfig::default()
    };
    let scheduler = scheduler(&s.sink, config, PipelineConfig::default());
    let calls = (1..=4)
        .map(|n| call(&format!("c{n}"), json!({"gate": format!("g{n}")})))
        .collect();
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let scheduler = Arc::clone(&scheduler);
        async move {
            scheduler
                .run_batch(&tools, calls, CancellationToken::new(), None)
                .await
        }
    });
    wait_started_all(&mut s.started, &["g1", "g2"]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        s.gates.started.lock().len(),
        2,
        "a third body started while two ran"
    );
    s.gates.open("g2");
    wait_started(&mut s.started, "g3").await;
    assert_eq!(s.gates.started.lock().len(), 3);
    s.gates.open("g1");
    wait_started(&mut s.started, "g4").await;
    s.gates.open("g3");
    s.gates.open("g4");
    batch.await.unwrap().unwrap();
    let lines = log_lines(&s.sink);
    let at = |line: &str| lines.iter().position(|l| l == line).unwrap();
    assert!(at("tool/start c3") > at("tool/start c2"));
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("tool/result"))
            .collect::<Vec<_>>(),
        [
            "tool/result c1",
            "tool/result c2",
            "tool/result c3",
            "tool/result c4"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_exclusive_parallel_runs_in_three_groups() {
    let mut s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "x", "exclusive": true})),
        call("c3", json!({"gate": "b"})),
    ];
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let scheduler = Arc::clone(&scheduler);
        async move {
            scheduler
                .run_batch(&tools, calls, CancellationToken::new(), None)
                .await
        }
    });
    wait_started(&mut s.started, "a").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        s.gates.started.lock().clone(),
        ["a"],
        "the exclusive call waits for c1 to commit"
    );
    s.gates.open("a");
    wait_started(&mut s.started, "x").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        s.gates.started.lock().clone(),
        ["a", "x"],
        "nothing runs beside the exclusive call"
    );
    s.gates.open("x");
    wait_started(&mut s.started, "b").await;
    s.gates.open("b");
    batch.await.unwrap().unwrap();
    assert_eq!(
        log_lines(&s.sink),
        [
            "tool/start c1",
            "tool/result c1",
            "tool/start c2",
            "tool/result c2",
            "tool/start c3",
            "tool/result c3"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_write_claims_never_overlap_while_others_pass() {
    let mut s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let calls = vec![
        call("c1", json!({"gate": "a1", "write": ["A"]})),
        call("c2", json!({"gate": "a2", "write": ["A"]})),
        call("c3", json!({"gate": "b", "write": ["B"]})),
    ];
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let scheduler = Arc::clone(&scheduler);
        async move {
            scheduler
                .run_batch(&tools, calls, CancellationToken::new(), None)
                .await
        }
    });
    // c3 starts before c2, which waits for key A.
    wait_started_all(&mut s.started, &["a1", "b"]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(started_set(&s.gates), ["a1", "b"]);
    s.gates.open("a1");
    wait_started(&mut s.started, "a2").await;
    s.gates.open("a2");
    s.gates.open("b");
    batch.await.unwrap().unwrap();
    let results: Vec<String> = log_lines(&s.sink)
        .into_iter()
        .filter(|l| l.starts_with("tool/result"))
        .collect();
    assert_eq!(
        results,
        ["tool/result c1", "tool/result c2", "tool/result c3"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_two_run_settles_them_and_never_starts_the_rest() {
    let mut s = setup();
    let config = SchedulerConfig {
        max_parallel: NonZeroUsize::new(2).unwrap(),
        ..SchedulerConfig::default()
    };
    let pipeline = PipelineConfig {
        cancel_grace: Duration::from_millis(200),
        ..PipelineConfig::default()
    };
    let scheduler = scheduler(&s.sink, config, pipeline);
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "stuck", "ignore_cancel": true})),
        call("c3", json!({"gate": "c"})),
        call("c4", json!({"gate": "d"})),
    ];
    let cancel = CancellationToken::new();
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let (scheduler, cancel) = (Arc::clone(&scheduler), cancel.clone());
        async move { scheduler.run_batch(&tools, calls, cancel, None).await }
    });
    wait_started_all(&mut s.started, &["a", "stuck"]).await;
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), batch)
        .await
        .expect("the batch does not hang")
        .unwrap()
        .unwrap();
    let codes: Vec<Option<ErrorCode>> = outcome
        .results
        .iter()
        .map(|r| r.record().error_code().cloned())
        .collect();
    assert_eq!(
        codes,
        [
            Some(ErrorCode::Aborted),
            Some(ErrorCode::ToolOutcomeUnknown),
            Some(ErrorCode::NotExecuted),
            Some(ErrorCode::NotExecuted),
        ]
    );
    assert_eq!(started_set(&s.gates), ["a", "stuck"]);
    let lines = log_lines(&s.sink);
    assert!(
        !lines.contains(&"tool/start c3".to_owned())
            && !lines.contains(&"tool/start c4".to_owned())
    );
    s.gates.open("stuck");
}

/// Asks for every call; rejects the first request, approves the rest.
struct AskAll;

impl PreExecuteHook for AskAll {
    fn name(&self) -> &str {
        "ask-all"
    }

    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async {
            Ok(PreExecuteDecision::Ask {
                reason: "?".into(),
                session_key: None,
            })
        })
    }
}

struct RejectFirst(Mutex<usize>);

impl ApprovalService for RejectFirst {
    fn request<'a>(
        &'a self,
        _request: &'a ApprovalRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        let mut asked = self.0.lock();
        *asked += 1;
        let answer = if *asked == 1 {
            ApprovalAnswer::Rejected { reason: None }
        } else {
            ApprovalAnswer::AllowedOnce
        };
        Box::pin(std::future::ready(answer))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_approval_stops_the_rest_of_the_batch() {
    let s = setup();
    let pipeline = Pipeline::builder(s.sink.clone())
        .pre_hook(Arc::new(AskAll))
        .approval(Arc::new(RejectFirst(Mutex::new(0))))
        .build();
    let scheduler = Scheduler::new(Arc::new(pipeline), SchedulerConfig::default());
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "b"})),
        call("c3", json!({"gate": "c"})),
    ];
    let outcome = scheduler
        .run_batch(&s.tools, calls, CancellationToken::new(), None)
        .await
        .unwrap();
    let codes: Vec<Option<ErrorCode>> = outcome
        .results
        .iter()
        .map(|r| r.record().error_code().cloned())
        .collect();
    assert_eq!(
        codes,
        [
            Some(ErrorCode::ApprovalRejected),
            Some(ErrorCode::NotExecuted),
            Some(ErrorCode::NotExecuted)
        ]
    );
    let message = &outcome.results[1].record().error.as_ref().unwrap().message;
    assert!(
        message.contains("earlier call of this batch was rejected"),
        "{message}"
    );
    assert!(s.gates.started.lock().is_empty());
    assert_eq!(
        s.sink
            .kinds()
            .iter()
            .filter(|kind| kind.as_str() == "approval/asked")
            .count(),
        1,
        "the rest were never asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_message_executes_nothing() {
    let s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "b"})),
    ];
    let outcome = scheduler.run_truncated(&s.tools, calls).await.unwrap();
    assert!(
        outcome
            .results
            .iter()
            .all(|r| r.record().error_code() == Some(&ErrorCode::TruncatedCall))
    );
    assert!(s.gates.started.lock().is_empty());
    assert_eq!(
        s.sink.kinds(),
        ["tool/call", "tool/result", "tool/call", "tool/result"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_failure_fabricates_no_result() {
    let s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    // tool/call c1 is accepted; its tool/start is refused.
    s.sink.refuse_after(1);
    let calls = vec![call("c1", json!({"gate": "a"}))];
    let error = scheduler
        .run_batch(&s.tools, calls, CancellationToken::new(), None)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("could not record `tool/start`"),
        "{error}"
    );
    assert!(
        s.gates.started.lock().is_empty(),
        "a start that was not recorded never runs"
    );
    assert_eq!(s.sink.kinds(), ["tool/call"], "no result was fabricated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_turns_exclusive_before_its_start_becomes_a_barrier_there() {
    let mut s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let calls = vec![
        call("c1", json!({"gate": "a", "write": ["K"]})),
        // Shared when prepared, but it must wait for c1's claim on K...
        call(
            "c2",
            json!({"gate": "x", "write": ["K"], "exclusive_if_flag": true}),
        ),
        call("c3", json!({"gate": "c"})),
    ];
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let scheduler = Arc::clone(&scheduler);
        async move {
            scheduler
                .run_batch(&tools, calls, CancellationToken::new(), None)
                .await
        }
    });
    wait_started_all(&mut s.started, &["a", "c"]).await;
    // ...and by the time it could start it is exclusive: it waits for c3 too, then runs alone.
    s.gates
        .flag
        .store(true, std::sync::atomic::Ordering::SeqCst);
    s.gates.open("a");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        started_set(&s.gates),
        ["a", "c"],
        "c2 must not start beside the running c3"
    );
    s.gates.open("c");
    wait_started(&mut s.started, "x").await;
    s.gates.open("x");
    let outcome = batch.await.unwrap().unwrap();
    assert!(outcome.results.iter().all(|r| !r.record().is_error()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cancelled_before_any_start_records_and_answers_every_call() {
    let s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "b"})),
    ];
    let outcome = scheduler
        .run_batch(&s.tools, calls, cancel, None)
        .await
        .unwrap();
    assert!(
        outcome
            .results
            .iter()
            .all(|r| r.record().error_code() == Some(&ErrorCode::NotExecuted)
                && r.record().synthetic)
    );
    assert!(s.gates.started.lock().is_empty());
    assert_eq!(
        s.sink.kinds(),
        ["tool/call", "tool/result", "tool/call", "tool/result"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_in_a_batch_is_a_timeout_and_the_batch_goes_on() {
    let s = setup();
    let pipeline = PipelineConfig {
        cancel_grace: Duration::from_millis(100),
        ..PipelineConfig::default()
    };
    let scheduler = scheduler(&s.sink, SchedulerConfig::default(), pipeline);
    let slow = call("c1", json!({"gate": "never"})).with_timeout(Duration::from_millis(50));
    let quick = call("c2", json!({"gate": "q"}));
    s.gates.open("q");
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        scheduler.run_batch(&s.tools, vec![slow, quick], CancellationToken::new(), None),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        outcome.results[0].record().error_code(),
        Some(&ErrorCode::ToolTimeout)
    );
    assert!(!outcome.results[1].record().is_error());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_ui_before_the_call_finishes() {
    let s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let (live_tx, mut live) = mpsc::unbounded_channel();
    s.gates.open("p");
    scheduler
        .run_batch(
            &s.tools,
            vec![call("c1", json!({"gate": "p", "progress": 3}))],
            CancellationToken::new(),
            Some(std::sync::Arc::new(live_tx)),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(event) = live.try_recv() {
        seen.push(match event {
            LiveEvent::Prepared { .. } => "prepared".to_owned(),
            LiveEvent::Started { .. } => "started".to_owned(),
            LiveEvent::Progress { data, .. } => format!("progress {}", data["step"]),
            LiveEvent::Finished { .. } => "finished".to_owned(),
            LiveEvent::Committed { .. } => "committed".to_owned(),
            LiveEvent::Model(_) => "model".to_owned(),
        });
    }
    assert_eq!(
        seen,
        [
            "prepared",
            "started",
            "progress 0",
            "progress 1",
            "progress 2",
            "finished",
            "committed"
        ]
    );
}

/// Never answers until the batch is cancelled.
struct SilentApprover;

impl ApprovalService for SilentApprover {
    fn request<'a>(
        &'a self,
        _request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            cancel.cancelled().await;
            ApprovalAnswer::Cancelled
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_preparation_refuses_the_asked_call_and_never_runs_the_rest() {
    let s = setup();
    let pipeline = Pipeline::builder(s.sink.clone())
        .pre_hook(Arc::new(AskAll))
        .approval(Arc::new(SilentApprover))
        .build();
    let scheduler = Scheduler::new(Arc::new(pipeline), SchedulerConfig::default());
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        canceller.cancel();
    });
    let calls = vec![
        call("c1", json!({"gate": "a"})),
        call("c2", json!({"gate": "b"})),
    ];
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        scheduler.run_batch(&s.tools, calls, cancel, None),
    )
    .await
    .unwrap()
    .unwrap();
    let codes: Vec<Option<ErrorCode>> = outcome
        .results
        .iter()
        .map(|r| r.record().error_code().cloned())
        .collect();
    assert_eq!(
        codes,
        [
            Some(ErrorCode::ApprovalCancelled),
            Some(ErrorCode::NotExecuted)
        ]
    );
    assert!(s.gates.started.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_barrier_settles_the_exclusive_call_and_skips_those_behind_it() {
    let mut s = setup();
    let scheduler = scheduler(
        &s.sink,
        SchedulerConfig::default(),
        PipelineConfig::default(),
    );
    let cancel = CancellationToken::new();
    let calls = vec![
        call("c1", json!({"gate": "x", "exclusive": true})),
        call("c2", json!({"gate": "b"})),
    ];
    let tools = s.tools.clone();
    let batch = tokio::spawn({
        let (scheduler, cancel) = (Arc::clone(&scheduler), cancel.clone());
        async move { scheduler.run_batch(&tools, calls, cancel, None).await }
    });
    wait_started(&mut s.started, "x").await;
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), batch)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let codes: Vec<Option<ErrorCode>> = outcome
        .results
        .iter()
        .map(|r| r.record().error_code().cloned())
        .collect();
    assert_eq!(
        codes,
        [Some(ErrorCode::Aborted), Some(ErrorCode::NotExecuted)]
    );
    assert_eq!(started_set(&s.gates), ["x"]);
}

#[test]
fn a_max_parallel_of_zero_is_refused_with_what_to_do_instead() {
    // Zero slots would start nothing and wait forever; a plain count is checked on the way
    // in, and the field's type cannot hold 0.
    let refused = SchedulerConfig::default().with_max_parallel(0).unwrap_err();
    assert_eq!(refused, SchedulerConfigError::ZeroMaxParallel);
    assert_eq!(
        refused.to_string(),
        "max_parallel is 0: no call could ever start and every batch would wait forever; \
         use 1 for strict serial, or more to let calls overlap (default 8)"
    );
    let serial = SchedulerConfig::default().with_max_parallel(1).unwrap();
    assert_eq!(serial.max_parallel, NonZeroUsize::MIN);
    assert_eq!(SchedulerConfig::default().max_parallel.get(), 8);
}
