//! The single-call pipeline, stages 1–10 of DESIGN §3, staged for the scheduler:
//! [`Pipeline::prepare`] (stages 1–5, in model order), [`Pipeline::dispatch`] (stages 6–7,
//! the only part several calls may overlap in) and [`Pipeline::finish`] (stages 8–10, in
//! model order). [`Pipeline::execute_one`] runs them in sequence.
//!
//! Each phase consumes the previous one's type (`ReadyCall` → `SettledCall` →
//! `CommittedResult`), none of which has setters: a call cannot skip a stage or be changed
//! behind the log's back.

mod content_cap;
mod dispatch;
mod finish;
mod policy;
mod prepare;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{
    AppendFuture, AppendUrgency, CallId, EventData, EventDraft, EventSink, SinkError, StepId,
    Timestamp, ToolErrorInfo, ToolResultRecord, TurnId, event::ContextMessage,
};

pub use content_cap::DEFAULT_CONTENT_TEXT_CAP;
pub use dispatch::SettledCall;
pub use finish::PendingCommit;
pub use prepare::{PendingAsk, Preparation, ReadyCall};

use crate::approval::ApprovalService;
use crate::arguments::CallArgs;
use crate::context::{CallIdentity, ProgressSink};
use crate::guard::Guard;
use crate::layer::ExecuteLayer;
use crate::observer::ResultObserver;
use crate::post_hook::PostExecuteHook;
use crate::pre_hook::PreExecuteHook;
use crate::registry::{CallOrigin, ToolEntry, ToolSet};
use crate::tool::ToolOutput;
use crate::view::CallView;

/// An internal failure: the log refused a write. The caller starts nothing new, drains what
/// runs and fabricates no result (DESIGN §5); recovery classifies the call later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// The log refused or failed to append one of a call's events.
    #[error("call `{call_id}`: could not record `{kind}`: {source}")]
    Log {
        /// The call whose event it was.
        call_id: CallId,
        /// The event's kind (`tool/call`, `tool/result`).
        kind: &'static str,
        /// What the sink reported.
        #[source]
        source: SinkError,
    },
    /// A bug in the runtime itself (a task that should not fail did).
    #[error("internal failure: {0}")]
    Internal(String),
}

/// One tool call as the model asked for it.
#[derive(Clone, Debug)]
pub struct CallRequest {
    /// The id the model gave the call; its events are recorded under it.
    pub call_id: CallId,
    /// Position in the assistant message, from 0.
    pub index: u32,
    /// The tool name the model called, as sent; resolved against the request's tool set.
    pub name: String,
    /// Exactly what the model sent; recorded verbatim.
    pub arguments_raw: String,
    /// The user turn the call belongs to; `None` outside any turn (see [`CallRequest::in_step`]).
    pub turn: Option<TurnId>,
    /// The model request (step) within the turn; `None` outside any turn.
    pub step: Option<StepId>,
    /// Who makes the call, which decides the tools its name may resolve to: `Model` unless
    /// [`CallRequest::from_host`] or [`CallRequest::from_code`] says otherwise.
    pub origin: CallOrigin,
    /// Overrides the tool's default deadline.
    pub timeout: Option<Duration>,
    /// The id the model sent, when an earlier call of the same message already had it and
    /// `call_id` is the distinct one the message gave this call: the call is refused with
    /// `INVALID_ARGS`, recorded under `call_id`, and never parsed or run.
    pub repeated_id: Option<CallId>,
}

impl CallRequest {
    /// A call from the model, outside any turn.
    pub fn new(
        call_id: impl Into<CallId>,
        index: u32,
        name: impl Into<String>,
        arguments_raw: impl Into<String>,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            index,
            name: name.into(),
            arguments_raw: arguments_raw.into(),
            turn: None,
            step: None,
            origin: CallOrigin::Model,
            timeout: None,
            repeated_id: None,
        }
    }

    /// Places the call in a turn and step.
    pub fn in_step(mut self, turn: TurnId, step: StepId) -> Self {
        self.turn = Some(turn);
        self.step = Some(step);
        self
    }

    /// Sets the call's deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Marks the call as one whose id `sent` repeated an earlier call's in the same message;
    /// see [`CallRequest::repeated_id`].
    pub fn repeating(mut self, sent: CallId) -> Self {
        self.repeated_id = Some(sent);
        self
    }

    /// Marks the call as coming from the embedding program (hidden tools resolve).
    pub fn from_host(mut self) -> Self {
        self.origin = CallOrigin::Host;
        self
    }

    /// Marks the call as made by a code-mode program (tools kept for code resolve).
    pub fn from_code(mut self) -> Self {
        self.origin = CallOrigin::Code;
        self
    }
}

/// Per-batch controls: the batch's cancellation token and where progress goes.
#[derive(Clone, Debug, Default)]
pub struct BatchControl {
    /// Fires when the batch is cancelled: waiting hooks and approvals stop waiting, calls not
    /// started yet are `NOT_EXECUTED`, and running bodies see it through their call's token.
    pub cancel: CancellationToken,
    /// Where the progress updates of every call in the batch go.
    pub progress: ProgressSink,
}

/// Where a tool body runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BodyExecution {
    /// In the dispatching task: the fastest. A body that blocks its thread instead of
    /// awaiting holds up the deadline until it returns (it is then committed as
    /// `TOOL_TIMEOUT`, never as a success).
    #[default]
    Inline,
    /// As a task of its own: on a multi-thread runtime a body that blocks its thread is
    /// still abandoned on time (`TOOL_OUTCOME_UNKNOWN`). Costs one spawn per call.
    Task,
}

/// Settings of a pipeline.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Where tool bodies run.
    pub execution: BodyExecution,
    /// How long a cancelled or timed-out body may take to settle before it is abandoned.
    pub cancel_grace: Duration,
    /// The deadline of a call whose request and tool set none.
    pub default_timeout: Option<Duration>,
    /// How long to wait for an approval answer (`None`: as long as the service takes).
    pub approval_timeout: Option<Duration>,
    /// Cap on a value's serialized size, unless the tool sets its own.
    pub max_value_bytes: usize,
    /// Cap on the text a result shows the model (text blocks, and JSON blocks as the compact
    /// text the model is sent), in bytes; default [`DEFAULT_CONTENT_TEXT_CAP`] (64 KiB). Over
    /// it, large blocks keep a head and a tail around a marker saying how many bytes were
    /// left out and under which digest the whole block is kept beside the log
    /// (`ToolResultRecord::elided`). A tool may lower it for its own results
    /// ([`crate::ToolSpec::max_content_text_bytes`]).
    pub max_content_text_bytes: usize,
    /// The workspace root given to tools.
    pub workspace: Option<Arc<Path>>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            execution: BodyExecution::Inline,
            cancel_grace: Duration::from_secs(5),
            default_timeout: None,
            approval_timeout: None,
            max_value_bytes: 1024 * 1024,
            max_content_text_bytes: DEFAULT_CONTENT_TEXT_CAP,
            workspace: None,
        }
    }
}

/// The stages of a pipeline and the log they write to. Share it with an `Arc`.
pub struct Pipeline {
    sink: Arc<dyn EventSink>,
    pre_hooks: Vec<Arc<dyn PreExecuteHook>>,
    approval: Option<Arc<dyn ApprovalService>>,
    guards: Vec<Arc<dyn Guard>>,
    layers: Arc<[Arc<dyn ExecuteLayer>]>,
    post_hooks: Vec<Arc<dyn PostExecuteHook>>,
    observers: Vec<Arc<dyn ResultObserver>>,
    config: PipelineConfig,
}

/// Builds a [`Pipeline`]. Stages run in the order they were added.
pub struct PipelineBuilder {
    pipeline: Pipeline,
    layers: Vec<Arc<dyn ExecuteLayer>>,
}

impl PipelineBuilder {
    /// Adds a pre-execute hook (stage 3). The first added is the outermost of the waterfall,
    /// asked first.
    pub fn pre_hook(mut self, hook: Arc<dyn PreExecuteHook>) -> Self {
        self.pipeline.pre_hooks.push(hook);
        self
    }

    /// Sets the approval service. Without one, every `Ask` ends in `APPROVAL_UNAVAILABLE`.
    pub fn approval(mut self, service: Arc<dyn ApprovalService>) -> Self {
        self.pipeline.approval = Some(service);
        self
    }

    /// Adds a guard (stage 5). Guards are asked in the order added; the first deny wins.
    pub fn guard(mut self, guard: Arc<dyn Guard>) -> Self {
        self.pipeline.guards.push(guard);
        self
    }

    /// Adds an execute layer; the first added is the outermost.
    pub fn layer(mut self, layer: Arc<dyn ExecuteLayer>) -> Self {
        self.layers.push(layer);
        self
    }

    /// Adds a post-execute hook (stage 8). Hooks run in the order added, each seeing the result
    /// as the one before left it; a failure or a block ends the chain.
    pub fn post_hook(mut self, hook: Arc<dyn PostExecuteHook>) -> Self {
        self.pipeline.post_hooks.push(hook);
        self
    }

    /// Adds a result observer (stage 10); observers are notified in the order added.
    pub fn observer(mut self, observer: Arc<dyn ResultObserver>) -> Self {
        self.pipeline.observers.push(observer);
        self
    }

    /// Replaces the settings (by default [`PipelineConfig::default`]).
    pub fn config(mut self, config: PipelineConfig) -> Self {
        self.pipeline.config = config;
        self
    }

    /// The finished pipeline.
    pub fn build(mut self) -> Pipeline {
        self.pipeline.layers = self.layers.into();
        self.pipeline
    }
}

impl Pipeline {
    /// Starts a pipeline writing to `sink`, with no stages and the default settings.
    pub fn builder(sink: Arc<dyn EventSink>) -> PipelineBuilder {
        PipelineBuilder {
            pipeline: Pipeline {
                sink,
                pre_hooks: Vec::new(),
                approval: None,
                guards: Vec::new(),
                layers: Arc::from([]),
                post_hooks: Vec::new(),
                observers: Vec::new(),
                config: PipelineConfig::default(),
            },
            layers: Vec::new(),
        }
    }

    /// The settings the pipeline runs with.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Runs every stage of one call in sequence, then logs its context messages.
    pub async fn execute_one(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        control: &BatchControl,
    ) -> Result<CommittedResult, PipelineError> {
        let settled = match self.prepare(tools, request, control).await? {
            Preparation::Ready(ready) => self.dispatch(ready, control).await?,
            Preparation::Refused(refused) => refused,
        };
        let committed = self.finish(settled).await?;
        self.log_context(&committed).await?;
        Ok(committed)
    }

    /// Appends the context messages of a committed call. The scheduler calls this after the
    /// whole batch committed, in model order.
    pub async fn log_context(&self, committed: &CommittedResult) -> Result<(), PipelineError> {
        for message in &committed.context {
            self.append(
                &committed.identity,
                Instant::now(),
                EventData::ContextMessage(message.clone()),
                AppendUrgency::Buffered,
            )
            .await?;
        }
        Ok(())
    }

    /// Hands one event of a call to the sink, which fixes its place in the log at once; the
    /// returned future answers when it is as durable as `urgency` asks.
    fn append_now(
        &self,
        identity: &CallIdentity,
        at: Instant,
        data: EventData,
        urgency: AppendUrgency,
    ) -> AppendFuture<'_> {
        let draft = EventDraft {
            ts: Timestamp::from_instant(at.into_std()),
            turn: identity.turn,
            step: identity.step,
            call_id: Some(identity.call_id.clone()),
            data,
        };
        self.sink.append(draft, urgency)
    }

    /// Appends one event of a call, stamped with `at` (a clock read the caller already made
    /// for its timing). The draft goes to the sink at once; only the sink's answer is awaited.
    fn append(
        &self,
        identity: &CallIdentity,
        at: Instant,
        data: EventData,
        urgency: AppendUrgency,
    ) -> impl Future<Output = Result<u64, PipelineError>> + Send + '_ {
        let kind = data.known_kind().unwrap_or("unknown");
        let call_id = identity.call_id.clone();
        let appended = self.append_now(identity, at, data, urgency);
        async move {
            appended.await.map_err(|source| PipelineError::Log {
                call_id,
                kind,
                source,
            })
        }
    }
}

/// What every phase carries: who the call is, which tool, the effective arguments, and when
/// each phase happened.
struct CallCore {
    identity: Arc<CallIdentity>,
    entry: Option<Arc<ToolEntry>>,
    arguments: CallArgs,
    /// The request's deadline override.
    timeout: Option<Duration>,
    /// The batch's token: policy and post-execute hooks stop waiting when it fires.
    cancel: CancellationToken,
    /// The approval service allowed this call at stage 4.
    approval_granted: bool,
    /// The call's span, when the log is traced (written into its `tool/call`).
    trace: Option<toolrail_session_log::TraceRef>,
    marks: TimingMarks,
}

impl CallCore {
    /// The call as a policy stage sees it, for the given tool.
    fn view<'a>(&'a self, entry: &'a ToolEntry) -> CallView<'a> {
        CallView {
            identity: &self.identity,
            spec: entry.spec(),
            source: entry.source(),
            arguments: &self.arguments,
        }
    }
}

#[derive(Clone, Copy)]
struct TimingMarks {
    recorded: Instant,
    prepared: Instant,
    approval: Duration,
    /// When `tool/start` was stamped.
    started: Option<Instant>,
    /// When the body began, after `tool/start` was as durable as asked (an fsync is neither
    /// queueing nor running).
    body_started: Option<Instant>,
    settled: Option<Instant>,
}

/// How a call settled before finish.
enum Settlement {
    /// Refused or never started: no side effects.
    Refused {
        error: ToolErrorInfo,
        synthetic: bool,
    },
    /// The body ran (or was abandoned): its outcome and the effects it reported.
    Ran {
        outcome: Result<ToolOutput, ToolErrorInfo>,
        effects: Vec<toolrail_session_log::Effect>,
        synthetic: bool,
    },
}

/// A call whose result is in the log: the one record the model, the UI and storage share.
/// Only the pipeline's commit makes one (its fields are read, never set), so holding a
/// `CommittedResult` means its `tool/result` was appended.
#[derive(Debug, PartialEq)]
pub struct CommittedResult {
    identity: Arc<CallIdentity>,
    seq: u64,
    record: Arc<ToolResultRecord>,
    context: Vec<ContextMessage>,
}

impl CommittedResult {
    /// The call it answers.
    pub fn identity(&self) -> &Arc<CallIdentity> {
        &self.identity
    }

    /// The `seq` of its `tool/result` event.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The record as committed.
    pub fn record(&self) -> &Arc<ToolResultRecord> {
        &self.record
    }

    /// The record, without the rest.
    pub fn into_record(self) -> Arc<ToolResultRecord> {
        self.record
    }

    /// Context messages hooks added, to be logged after the batch.
    pub fn context(&self) -> &[ContextMessage] {
        &self.context
    }
}

/// Sleeps until `at`, or forever without a deadline (no timer is created then).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
