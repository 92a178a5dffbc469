//! What a running tool body may use: its identity, the cancellation token, a progress sink,
//! an effect log that outlives any failure, and a way to record tool-owned events.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{
    AppendUrgency, CallId, Effect, EventData, EventDraft, EventSink, SinkError, StepId, Timestamp,
    ToolEvent, ToolSource, TraceRef, TurnId,
};

/// Who a call is: fixed when it is recorded, read-only afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallIdentity {
    /// The id the call's events are recorded under.
    pub call_id: CallId,
    /// Position in the assistant message.
    pub index: u32,
    /// The tool name the model called, as sent (it may name no tool in the set).
    pub name: String,
    /// The user turn the call belongs to; `None` for a call made outside any turn.
    pub turn: Option<TurnId>,
    /// The model request (step) within the turn that made the call; `None` outside any turn.
    pub step: Option<StepId>,
    /// Absent when the name was not in the tool set.
    pub source: Option<ToolSource>,
    /// The tool's [`ToolSpec::version`](crate::ToolSpec::version); absent when the name was not in
    /// the tool set.
    pub version: Option<Arc<str>>,
}

/// One progress update of a running call.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressUpdate {
    /// The call that reported the progress.
    pub call_id: CallId,
    /// What the body passed to [`ToolContext::progress`]; its shape is the tool's own.
    pub data: Value,
}

/// Where progress updates go. Sending never blocks and never fails the call: with no
/// listener, or once the listener stopped listening, updates are dropped.
#[derive(Clone, Debug, Default)]
pub struct ProgressSink {
    sender: Option<mpsc::UnboundedSender<ProgressUpdate>>,
}

impl ProgressSink {
    /// A sink that drops everything.
    pub fn discard() -> Self {
        Self { sender: None }
    }

    /// A sink that forwards to a channel.
    pub fn channel(sender: mpsc::UnboundedSender<ProgressUpdate>) -> Self {
        Self {
            sender: Some(sender),
        }
    }

    fn send(&self, update: ProgressUpdate) {
        if let Some(sender) = &self.sender {
            // A closed receiver means nobody listens any more; progress is best-effort.
            let _ = sender.send(update);
        }
    }
}

/// The effects a call reported. Shared between the body and the pipeline, so effects stay
/// known even when the body panics, times out or is abandoned.
#[derive(Clone, Debug, Default)]
pub(crate) struct EffectLog {
    effects: Arc<Mutex<Vec<Effect>>>,
}

impl EffectLog {
    pub(crate) fn push(&self, effect: Effect) {
        self.effects.lock().push(effect);
    }

    pub(crate) fn snapshot(&self) -> Vec<Effect> {
        self.effects.lock().clone()
    }
}

/// The context a tool body runs in.
#[derive(Clone)]
pub struct ToolContext {
    identity: Arc<CallIdentity>,
    cancel: CancellationToken,
    progress: ProgressSink,
    effects: EffectLog,
    events: Arc<dyn EventSink>,
    workspace: Option<Arc<Path>>,
    approval_granted: bool,
    trace: Option<TraceRef>,
}

impl ToolContext {
    pub(crate) fn new(
        identity: Arc<CallIdentity>,
        cancel: CancellationToken,
        progress: ProgressSink,
        events: Arc<dyn EventSink>,
        workspace: Option<Arc<Path>>,
    ) -> Self {
        Self {
            identity,
            cancel,
            progress,
            effects: EffectLog::default(),
            events,
            workspace,
            approval_granted: false,
            trace: None,
        }
    }

    pub(crate) fn with_approval(mut self, granted: bool) -> Self {
        self.approval_granted = granted;
        self
    }

    pub(crate) fn with_trace(mut self, trace: Option<TraceRef>) -> Self {
        self.trace = trace;
        self
    }

    /// The call's `execute_tool` span, when the session exports telemetry: a tool that
    /// calls another service passes it on as the W3C trace context (an MCP call sends a
    /// span of its own under it as `params._meta.traceparent`), so the service's spans
    /// join the session's trace. `None` when the session is not traced.
    pub fn trace(&self) -> Option<TraceRef> {
        self.trace
    }

    /// Whether the approval service allowed this very call (stage 4). A rule or a session
    /// approval that let the call through without asking is not a grant; a tool that widens
    /// what a call may do on request ([`Tool::must_ask`](crate::Tool::must_ask)) checks it.
    pub fn approval_granted(&self) -> bool {
        self.approval_granted
    }

    /// The call's identity.
    pub fn identity(&self) -> &CallIdentity {
        &self.identity
    }

    /// The call's cancellation token: cancelled on batch cancel and on timeout. A body that
    /// watches it settles in time and keeps an honest outcome; one that does not is
    /// abandoned after the grace and committed as `TOOL_OUTCOME_UNKNOWN`.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Reports progress to whoever watches the batch.
    pub fn progress(&self, data: Value) {
        self.progress.send(ProgressUpdate {
            call_id: self.identity.call_id.clone(),
            data,
        });
    }

    /// Reports a confirmed change to the world. It is kept whatever happens to the call later.
    pub fn report_effect(&self, effect: Effect) {
        self.effects.push(effect);
    }

    /// Records a tool-owned event (`fs/observed`, `fs/write-intent`, `todo/write`, …) in the
    /// session log, stamped with this call's id, turn and step. Only a [`ToolEvent`] can be
    /// recorded: the events that state what the pipeline did (`tool/start`, `tool/result`,
    /// approvals, …) have no such form, so a tool cannot write its own outcome:
    ///
    /// ```compile_fail
    /// # use std::sync::Arc;
    /// # use toolrail_tools_core::ToolContext;
    /// # use toolrail_tools_core::log::{AppendUrgency, ContentBlock, EventData, ToolResultRecord};
    /// # async fn forge(ctx: &ToolContext) {
    /// let forged = EventData::ToolResult(Arc::new(ToolResultRecord::success(vec![])));
    /// ctx.record(forged, AppendUrgency::Durable).await; // EventData is not a ToolEvent
    /// # }
    /// ```
    ///
    /// ```
    /// # use toolrail_tools_core::ToolContext;
    /// # use toolrail_tools_core::log::{AppendUrgency, event::FsObserved};
    /// # async fn observe(ctx: &ToolContext) -> Result<(), toolrail_tools_core::context::RecordError> {
    /// let seen = FsObserved { path: "/w/a".into(), digest: "sha256:…".into() };
    /// ctx.record(seen, AppendUrgency::Buffered).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn record(
        &self,
        event: impl Into<ToolEvent>,
        urgency: AppendUrgency,
    ) -> Result<u64, RecordError> {
        self.record_at(event, Timestamp::now(), urgency).await
    }

    /// As [`ToolContext::record`], stamped with the moment `at` the fact happened rather
    /// than the moment it is recorded: a request is stamped when it was sent, though its id
    /// is known only after.
    ///
    /// ```
    /// # use toolrail_tools_core::ToolContext;
    /// # use toolrail_tools_core::log::{AppendUrgency, Timestamp, event::FsObserved};
    /// # async fn observe(ctx: &ToolContext) -> Result<(), toolrail_tools_core::context::RecordError> {
    /// let read_at = Timestamp::now();
    /// let seen = FsObserved { path: "/w/a".into(), digest: "sha256:…".into() };
    /// ctx.record_at(seen, read_at, AppendUrgency::Buffered).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn record_at(
        &self,
        event: impl Into<ToolEvent>,
        at: Timestamp,
        urgency: AppendUrgency,
    ) -> Result<u64, RecordError> {
        let data = EventData::from(event.into());
        let draft = EventDraft {
            ts: at,
            turn: self.identity.turn,
            step: self.identity.step,
            call_id: Some(self.identity.call_id.clone()),
            data,
        };
        self.events
            .append(draft, urgency)
            .await
            .map_err(RecordError::Log)
    }

    /// The workspace root the embedder configured, if any.
    pub fn workspace(&self) -> Option<&Path> {
        self.workspace.as_deref()
    }

    pub(crate) fn effect_log(&self) -> &EffectLog {
        &self.effects
    }
}

/// Why a tool's event was not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The log refused or failed the append.
    #[error(transparent)]
    Log(SinkError),
}
