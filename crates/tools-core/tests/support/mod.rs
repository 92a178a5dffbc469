//! Probe tools and stages for the pipeline tests. Each probe counts how often it ran, so a
//! test can show that a refused call never reached its body.
#![allow(dead_code, clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolrail_tools_core::CallArgs;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{BoxFuture, ContentBlock, Effect, MemorySink};
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CallView, Concurrency, ExecNext,
    ExecuteLayer, FinalizeView, Guard, GuardVerdict, HookError, ObserverError, PostExecuteDecision,
    PostExecuteHook, PreExecuteDecision, PreExecuteHook, PreNext, ResultObserver, ResultView, Tool,
    ToolContext, ToolFailure, ToolOutput, ToolResult, ToolSpec, context::CallIdentity,
};

/// What a probe tool's body does.
#[derive(Clone)]
pub(crate) enum Behaviour {
    /// Returns `ok` as text and `{"ok": true}` as value.
    Succeed,
    /// Returns this value.
    Value(Value),
    /// Fails with TOOL_FAILED.
    Fail(String),
    /// Panics.
    Panic,
    /// Reports a file effect, then fails.
    EffectThenFail,
    /// Sleeps, watching cancellation: settles as "stopped" when cancelled.
    SleepCooperative(Duration),
    /// Sleeps and ignores cancellation.
    SleepStubborn(Duration),
    /// Reports an effect, then sleeps ignoring cancellation.
    EffectThenHang,
    /// Returns text and no value.
    TextOnly,
}

pub(crate) struct Probe {
    spec: ToolSpec,
    behaviour: Behaviour,
    pub runs: AtomicUsize,
    pub finalized: AtomicUsize,
    pub seen_args: Mutex<Vec<Value>>,
}

pub(crate) fn object_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
        "additionalProperties": false
    })
}

impl Probe {
    pub(crate) fn new(name: &str, behaviour: Behaviour) -> Arc<Self> {
        Self::with_spec(
            ToolSpec::builder(name, format!("probe {name}"), object_schema()).build(),
            behaviour,
        )
    }

    pub(crate) fn with_spec(spec: ToolSpec, behaviour: Behaviour) -> Arc<Self> {
        Arc::new(Self {
            spec,
            behaviour,
            runs: AtomicUsize::new(0),
            finalized: AtomicUsize::new(0),
            seen_args: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub(crate) fn finalized(&self) -> usize {
        self.finalized.load(Ordering::SeqCst)
    }
}

pub(crate) fn written(path: &str) -> Effect {
    Effect::FileWritten {
        path: path.to_owned(),
        before: None,
        after: "sha256:after".to_owned(),
    }
}

impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        Concurrency::shared()
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.seen_args.lock().push(args.value().clone());
            match &self.behaviour {
                Behaviour::Succeed => Ok(ToolOutput {
                    content: vec![ContentBlock::text("ok")],
                    value: Some(json!({"ok": true})),
                    details: None,
                    concludes_turn: false,
                }),
                Behaviour::Value(value) => Ok(ToolOutput::value(value.clone())),
                Behaviour::Fail(message) => Err(ToolFailure::new(message.clone())),
                Behaviour::Panic => panic!("probe body panicked on purpose"),
                Behaviour::EffectThenFail => {
                    ctx.report_effect(written("/w/a.txt"));
                    Err(ToolFailure::new("disk full after the first write"))
                }
                Behaviour::SleepCooperative(duration) => {
                    tokio::select! {
                        () = tokio::time::sleep(*duration) => Ok(ToolOutput::text("slept")),
                        () = ctx.cancellation().cancelled() => Err(ToolFailure::new("stopped on cancel")),
                    }
                }
                Behaviour::SleepStubborn(duration) => {
                    tokio::time::sleep(*duration).await;
                    Ok(ToolOutput::text("slept stubbornly"))
                }
                Behaviour::TextOnly => Ok(ToolOutput::text("just text")),
                Behaviour::EffectThenHang => {
                    ctx.report_effect(written("/w/b.txt"));
                    std::future::pending::<()>().await;
                    Ok(ToolOutput::text("unreachable"))
                }
            }
        })
    }

    fn finalize_content(&self, content: &mut Vec<ContentBlock>, _outcome: &FinalizeView<'_>) {
        self.finalized.fetch_add(1, Ordering::SeqCst);
        content.push(ContentBlock::text("[finalized]"));
    }
}

/// A pre-execute hook with a fixed behaviour.
pub(crate) struct FixedHook {
    pub name: String,
    pub decision: HookBehaviour,
    pub calls: AtomicUsize,
}

#[derive(Clone, Debug)]
pub(crate) enum HookBehaviour {
    /// Returns this decision without calling next.
    Decide(PreExecuteDecision),
    /// Calls next and returns its decision.
    PassThrough,
    /// Calls next and returns Allow whatever next said (tries to launder).
    Launder,
    /// Calls next, then returns this decision.
    After(PreExecuteDecision),
    Error,
    Panic,
    /// Never answers.
    Hang,
}

impl FixedHook {
    pub(crate) fn new(name: &str, decision: HookBehaviour) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            decision,
            calls: AtomicUsize::new(0),
        })
    }
}

impl PreExecuteHook for FixedHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match &self.decision {
                HookBehaviour::Decide(decision) => Ok(decision.clone()),
                HookBehaviour::PassThrough => next.run().await,
                HookBehaviour::Launder => {
                    let _ = next.run().await;
                    Ok(PreExecuteDecision::Allow)
                }
                HookBehaviour::After(decision) => {
                    let _ = next.run().await;
                    Ok(decision.clone())
                }
                HookBehaviour::Error => Err(HookError::new("policy store unreachable")),
                HookBehaviour::Panic => panic!("hook panicked on purpose"),
                HookBehaviour::Hang => std::future::pending().await,
            }
        })
    }
}

pub(crate) fn deny(reason: &str) -> PreExecuteDecision {
    PreExecuteDecision::Deny {
        reason: reason.to_owned(),
    }
}

pub(crate) fn ask(reason: &str) -> PreExecuteDecision {
    PreExecuteDecision::Ask {
        reason: reason.to_owned(),
        session_key: Some("probe:*".to_owned()),
    }
}

pub(crate) struct FixedGuard {
    pub name: String,
    pub verdict: Option<GuardVerdict>,
    pub checks: AtomicUsize,
}

impl FixedGuard {
    /// `None` makes the guard panic.
    pub(crate) fn new(name: &str, verdict: Option<GuardVerdict>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            verdict,
            checks: AtomicUsize::new(0),
        })
    }
}

impl Guard for FixedGuard {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, _call: &CallView<'_>) -> GuardVerdict {
        self.checks.fetch_add(1, Ordering::SeqCst);
        match &self.verdict {
            Some(verdict) => verdict.clone(),
            None => panic!("guard panicked on purpose"),
        }
    }
}

/// Answers every approval request the same way, remembering what it was shown.
pub(crate) struct FixedApprover {
    pub answer: Option<ApprovalAnswer>,
    pub requests: Mutex<Vec<ApprovalRequest>>,
}

impl FixedApprover {
    /// `None` never answers (waits for cancellation).
    pub(crate) fn new(answer: Option<ApprovalAnswer>) -> Arc<Self> {
        Arc::new(Self {
            answer,
            requests: Mutex::new(Vec::new()),
        })
    }
}

impl ApprovalService for FixedApprover {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            self.requests.lock().push(request.clone());
            match &self.answer {
                Some(answer) => answer.clone(),
                None => {
                    cancel.cancelled().await;
                    ApprovalAnswer::Cancelled
                }
            }
        })
    }
}

pub(crate) struct PostHook {
    pub name: String,
    pub behaviour: Option<PostExecuteDecision>,
}

impl PostHook {
    /// `None` makes the hook panic.
    pub(crate) fn new(name: &str, behaviour: Option<PostExecuteDecision>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            behaviour,
        })
    }
}

impl PostExecuteHook for PostHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn after<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        _result: &'a ResultView<'a>,
    ) -> BoxFuture<'a, Result<PostExecuteDecision, HookError>> {
        Box::pin(async move {
            match &self.behaviour {
                Some(decision) => Ok(decision.clone()),
                None => panic!("post hook panicked on purpose"),
            }
        })
    }
}

pub(crate) struct CountingObserver {
    pub name: String,
    pub fail: Option<bool>,
    pub seen: AtomicUsize,
}

impl CountingObserver {
    /// `Some(false)`: returns an error; `Some(true)`: panics; `None`: fine.
    pub(crate) fn new(name: &str, fail: Option<bool>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            fail,
            seen: AtomicUsize::new(0),
        })
    }
}

impl ResultObserver for CountingObserver {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(
        &self,
        _identity: &CallIdentity,
        _result: &toolrail_session_log::ToolResultRecord,
    ) -> Result<(), ObserverError> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        match self.fail {
            None => Ok(()),
            Some(false) => Err(ObserverError("metrics backend down".to_owned())),
            Some(true) => panic!("observer panicked on purpose"),
        }
    }
}

/// A layer that counts how often it wrapped a body and passes through.
pub(crate) struct CountingLayer {
    pub calls: AtomicUsize,
}

impl ExecuteLayer for CountingLayer {
    fn name(&self) -> &str {
        "counting"
    }

    fn call<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a Value,
        next: ExecNext<'a>,
    ) -> BoxFuture<'a, ToolResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        next.run()
    }
}

pub(crate) fn sink() -> Arc<MemorySink> {
    Arc::new(MemorySink::new())
}

/// What the stage tests import, in one place (not every test file uses all of it).
#[allow(unused_imports)]
pub(crate) mod prelude {
    pub(crate) use std::sync::Arc;
    pub(crate) use std::time::Duration;

    pub(crate) use serde_json::json;
    pub(crate) use toolrail_session_log::{
        ContentBlock, ErrorCode, EventData, MemorySink, ToolResultRecord,
    };
    pub(crate) use toolrail_tools_core::{
        ApprovalAnswer, CallRequest, CommittedResult, GuardVerdict, Pipeline, PipelineBuilder,
        PipelineConfig, PostExecuteAction, PostExecuteDecision, PreExecuteDecision, Registry,
        RegistryBuilder, Tool, ToolSpec, pipeline::BatchControl,
    };
}

use prelude::*;

/// A registry of the given tools, an in-memory log, and pipelines writing to it.
pub(crate) struct Harness {
    pub sink: Arc<MemorySink>,
    pub registry: Registry,
}
impl Harness {
    pub(crate) fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut builder = RegistryBuilder::new();
        for tool in tools {
            builder = builder.external(
                toolrail_session_log::ToolSource::Extension("test".into()),
                tool,
            );
        }
        let (registry, warnings) = builder.build().unwrap();
        assert!(warnings.is_empty());
        Self {
            sink: sink(),
            registry,
        }
    }

    pub(crate) fn pipeline(&self) -> PipelineBuilder {
        Pipeline::builder(self.sink.clone())
    }

    pub(crate) async fn run(&self, pipeline: &Pipeline, name: &str, args: &str) -> CommittedResult {
        let request = CallRequest::new("c1", 0, name, args);
        pipeline
            .execute_one(&self.registry.snapshot(), request, &BatchControl::default())
            .await
            .unwrap()
    }

    pub(crate) fn kinds(&self) -> Vec<String> {
        self.sink.kinds()
    }

    /// Runs one call and cancels its batch `after` (tokio time) it started.
    pub(crate) async fn run_cancelled_after(
        &self,
        pipeline: &Pipeline,
        name: &str,
        after: Duration,
    ) -> CommittedResult {
        let control = BatchControl::default();
        let cancel = control.cancel.clone();
        let snapshot = self.registry.snapshot();
        let (result, ()) = tokio::join!(
            pipeline.execute_one(&snapshot, CallRequest::new("c1", 0, name, "{}"), &control),
            async {
                tokio::time::sleep(after).await;
                cancel.cancel();
            }
        );
        result.unwrap()
    }
}

pub(crate) fn code(result: &CommittedResult) -> Option<&str> {
    result
        .record()
        .error
        .as_ref()
        .map(|error| error.code.as_str())
}

pub(crate) fn text(record: &ToolResultRecord) -> String {
    record
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join("|")
}
