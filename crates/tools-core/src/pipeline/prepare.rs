//! Stage 1 (record) and the outcome of stages 1–5: a call ready to start, or refused before
//! it could (the policy stages 2–5 are `policy.rs`). Nothing here acts on the world; a
//! refusal at any stage has no side effects.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{
    AppendUrgency, ErrorCode, EventData, Timestamp, ToolErrorInfo, TraceRef,
    event::{ApprovalAnswer, ToolCall},
    message_calls::repeated_call_id_refusal,
    recovery::ApprovalResumption,
};

use super::policy::Stop;
use super::{
    BatchControl, CallCore, CallRequest, Pipeline, PipelineError, SettledCall, TimingMarks,
};
use crate::arguments::{ArgumentError, CallArgs, parse_arguments};
use crate::context::CallIdentity;
use crate::registry::{ToolEntry, ToolSet};
use crate::spec::{Concurrency, ToolSpec};
use crate::unwind::catch;

/// Whether stage 1 parses the raw arguments (a cut-off call's text is never trusted).
#[derive(Clone, Copy)]
enum Parsing {
    Parse,
    Skip,
}

/// Whether stage 1 appends `tool/call` (a call a restart left waiting for its approval is
/// in the log already).
#[derive(Clone, Copy)]
enum Recording {
    Append,
    /// Recorded before (a pending approval asked again), with the span it opened then.
    AlreadyRecorded(Option<TraceRef>),
}

/// The arguments of a call refused before they were parsed.
static NO_ARGUMENTS: LazyLock<Arc<Value>> = LazyLock::new(|| Arc::new(Value::Null));

/// When a question a restart left unanswered was asked, and until when it may wait: read
/// from its `approval/asked` (see [`Pipeline::prepare_pending`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingAsk {
    /// When the question was last asked.
    pub asked_at: Timestamp,
    /// Its recorded deadline; `None` (none was recorded): the pipeline's approval timeout,
    /// counted from now.
    pub expires_at: Option<Timestamp>,
    /// The span its `tool/call` recorded, when the session was traced: the call keeps it
    /// ([`ToolContext::trace`](crate::ToolContext::trace)), so what it passes on joins the
    /// trace it began in.
    pub trace: Option<TraceRef>,
}

/// A question asked again by [`Pipeline::prepare_pending`]: the deadline it keeps, and the
/// answer stage 4 got, if it asked.
pub(super) struct AskedAgain {
    pub expires_at: Option<Timestamp>,
    pub answer: Option<ApprovalAnswer>,
}

/// The outcome of preparation.
#[must_use = "a prepared call must be dispatched, or its refusal finished: dropping it leaves the call without a result"]
pub enum Preparation {
    /// Allowed by every policy stage; may be dispatched.
    Ready(ReadyCall),
    /// Refused before it could start; go straight to finish.
    Refused(SettledCall),
}

/// A call that passed stages 1–5. Frozen: its arguments and identity cannot change.
#[must_use = "a ready call must be dispatched: dropping it leaves the call without a result"]
pub struct ReadyCall {
    pub(super) core: CallCore,
    pub(super) entry: Arc<ToolEntry>,
}

impl ReadyCall {
    /// The call's identity, fixed when it was recorded.
    pub fn identity(&self) -> &CallIdentity {
        &self.core.identity
    }

    /// The effective arguments (after any logged rewrite).
    pub fn arguments(&self) -> &Value {
        &self.core.arguments
    }

    /// The effective arguments, shared (for live views that outlive the call).
    pub fn shared_arguments(&self) -> Arc<Value> {
        Arc::clone(self.core.arguments.shared())
    }

    /// The spec of the tool the call resolved to, as the registry offers it.
    pub fn spec(&self) -> &ToolSpec {
        self.entry().spec()
    }

    /// Re-reads the tool's concurrency for these arguments (right before start). A panic
    /// makes the call `Exclusive`, the safe answer.
    pub fn concurrency(&self) -> Concurrency {
        let tool = self.entry().tool();
        catch(|| tool.concurrency(&self.core.arguments)).unwrap_or(Concurrency::Exclusive)
    }

    /// Settles the call without starting it (`NOT_EXECUTED`): the batch was cancelled or an
    /// earlier call stopped it. The result is marked synthetic.
    pub fn not_executed(self, reason: impl Into<String>) -> SettledCall {
        SettledCall::refused(
            self.core,
            ToolErrorInfo {
                code: ErrorCode::NotExecuted,
                message: reason.into(),
                by: None,
            },
        )
    }

    pub(super) fn entry(&self) -> &Arc<ToolEntry> {
        &self.entry
    }
}

impl Pipeline {
    /// Stages 1–5 for one call. Run calls of a batch through here one at a time, in model
    /// order, so `tool/call` events and approvals follow that order.
    pub async fn prepare(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        control: &BatchControl,
    ) -> Result<Preparation, PipelineError> {
        if let Some(sent) = &request.repeated_id {
            let message = repeated_call_id_refusal(sent, &request.call_id);
            let settled = self
                .record_unprepared(tools, request, info(ErrorCode::InvalidArgs, message))
                .await?;
            return Ok(Preparation::Refused(settled));
        }
        let (mut core, parsed) = self
            .record(
                tools,
                request,
                control.cancel.clone(),
                Parsing::Parse,
                Recording::Append,
            )
            .await?;
        let outcome = self.policy(&mut core, parsed, tools, control, None).await;
        preparation(core, outcome)
    }

    /// Stages 2–5 again for a call the log recorded whose approval a restart left unanswered
    /// (`approval/asked` with no `approval/decided`, no `tool/start`): `tool/call` is not
    /// appended again, everything else is judged again — the arguments parsed, the hooks and
    /// rules asked, the approval service asked again under the question's recorded deadline
    /// (recorded as a new `approval/asked`), the guards. Past that deadline nothing is asked:
    /// `approval/decided {expired}` is appended and the call is refused `APPROVAL_EXPIRED`,
    /// as when the timeout passes in a live run. Dispatch or finish the outcome as usual;
    /// the call then has exactly one `tool/result`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use toolrail_session_log::{CallId, MemorySink, Timestamp, recovery::ApprovalResumption};
    /// # use toolrail_tools_core::{CallRequest, Pipeline, RegistryBuilder};
    /// # use toolrail_tools_core::pipeline::{BatchControl, PendingAsk, Preparation};
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let log = Arc::new(MemorySink::new());
    /// let pipeline = Pipeline::builder(log.clone()).build();
    /// let (registry, _warnings) = RegistryBuilder::new().build()?;
    /// let tools = registry.snapshot();
    /// // Asked a minute ago with a 30-second deadline: it expired while the runtime was down.
    /// let now = Timestamp::now().as_millis();
    /// let pending = PendingAsk {
    ///     asked_at: Timestamp::from_millis(now - 60_000),
    ///     expires_at: Some(Timestamp::from_millis(now - 30_000)),
    ///     trace: None,
    /// };
    /// let request = CallRequest::new("c1", 0, "deploy", "{}");
    /// let (prepared, what) = pipeline
    ///     .prepare_pending(&tools, request, pending, &BatchControl::default())
    ///     .await?;
    /// assert_eq!(what, ApprovalResumption::Expired);
    /// let Preparation::Refused(refused) = prepared else { unreachable!() };
    /// let committed = pipeline.finish(refused).await?;
    /// assert_eq!(committed.record().error_code().map(|code| code.as_str()), Some("APPROVAL_EXPIRED"));
    /// assert_eq!(log.kinds(), ["approval/decided", "tool/result"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn prepare_pending(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        pending: PendingAsk,
        control: &BatchControl,
    ) -> Result<(Preparation, ApprovalResumption), PipelineError> {
        let (mut core, parsed) = self
            .record(
                tools,
                request,
                control.cancel.clone(),
                Parsing::Parse,
                Recording::AlreadyRecorded(pending.trace),
            )
            .await?;
        let now = Timestamp::now();
        if pending.expires_at.is_some_and(|deadline| now >= deadline) {
            // The arguments as they were judged, for the stages after (nothing is asked).
            if let (Some(entry), Some(Ok(value))) = (&core.entry, parsed)
                && let Ok(arguments) = super::policy::validate(entry, value)
            {
                core.arguments = arguments;
            }
            self.record_expired(&core, pending.asked_at, now).await?;
            core.marks.prepared = Instant::now();
            let refused = SettledCall::refused(core, super::policy::expired_refusal());
            return Ok((Preparation::Refused(refused), ApprovalResumption::Expired));
        }
        let mut again = AskedAgain {
            expires_at: pending.expires_at,
            answer: None,
        };
        let outcome = self
            .policy(&mut core, parsed, tools, control, Some(&mut again))
            .await;
        let resumption = match (again.answer, &self.approval) {
            (Some(ApprovalAnswer::Unavailable), None) => ApprovalResumption::NoOneToAsk,
            (Some(answer), _) => ApprovalResumption::AskedAgain(answer),
            (None, _) => ApprovalResumption::NotAskedAgain,
        };
        Ok((preparation(core, outcome)?, resumption))
    }

    /// Records a call of an assistant message that the output-length limit cut off, and
    /// settles it as `TRUNCATED_CALL` without parsing it: its arguments may be incomplete,
    /// so nothing about it is trusted. Finish it like any other call.
    pub async fn record_truncated(
        &self,
        tools: &ToolSet,
        request: CallRequest,
    ) -> Result<SettledCall, PipelineError> {
        let message = toolrail_session_log::outcome::TRUNCATED_CALL;
        self.record_unprepared(tools, request, info(ErrorCode::TruncatedCall, message))
            .await
    }

    /// Records a call the batch will never prepare (it was cancelled, or an earlier call
    /// stopped it) and settles it as `NOT_EXECUTED` with `reason`. Finish it in model order.
    pub async fn record_not_executed(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        reason: impl Into<String>,
    ) -> Result<SettledCall, PipelineError> {
        self.record_unprepared(tools, request, info(ErrorCode::NotExecuted, reason))
            .await
    }

    async fn record_unprepared(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        error: ToolErrorInfo,
    ) -> Result<SettledCall, PipelineError> {
        let (mut core, _) = self
            .record(
                tools,
                request,
                CancellationToken::new(),
                Parsing::Skip,
                Recording::Append,
            )
            .await?;
        core.marks.prepared = Instant::now();
        Ok(SettledCall::refused(core, error))
    }

    /// Stage 1: the call becomes a recorded fact, arguments exactly as sent. Parsing is pure,
    /// so it looks at the text before the text moves into the event; its outcome is acted on
    /// only after the call is recorded.
    async fn record(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        cancel: CancellationToken,
        parsing: Parsing,
        recording: Recording,
    ) -> Result<(CallCore, Option<Result<Value, ArgumentError>>), PipelineError> {
        let recorded = Instant::now();
        let entry = tools.resolve(&request.name, request.origin).cloned();
        let identity = Arc::new(CallIdentity {
            call_id: request.call_id,
            index: request.index,
            name: request.name,
            turn: request.turn,
            step: request.step,
            source: entry.as_ref().map(|entry| entry.source().clone()),
            version: entry
                .as_ref()
                .map(|entry| Arc::clone(entry.spec().shared_version())),
        });
        // A call recorded here opens a span when the log is traced; one recorded before
        // (a pending approval asked again) keeps the span it was recorded with.
        let trace = match recording {
            Recording::Append => self.sink.next_call_span(),
            Recording::AlreadyRecorded(trace) => trace,
        };
        let call = ToolCall {
            index: identity.index,
            name: identity.name.clone(),
            arguments_raw: request.arguments_raw,
            source: identity.source.clone(),
            version: identity.version.clone(),
            trace,
        };
        let parsed = match (parsing, &entry) {
            (Parsing::Parse, Some(_)) => Some(parse_arguments(&call.arguments_raw)),
            (Parsing::Parse | Parsing::Skip, _) => None,
        };
        match recording {
            Recording::Append => {
                self.append(
                    &identity,
                    recorded,
                    EventData::ToolCall(call),
                    AppendUrgency::Buffered,
                )
                .await?;
            }
            Recording::AlreadyRecorded(_) => {}
        }
        let core = CallCore {
            identity,
            entry,
            arguments: CallArgs::new(Arc::clone(&NO_ARGUMENTS)),
            timeout: request.timeout,
            cancel,
            approval_granted: false,
            trace,
            marks: TimingMarks {
                recorded,
                prepared: recorded,
                approval: Duration::ZERO,
                started: None,
                body_started: None,
                settled: None,
            },
        };
        Ok((core, parsed))
    }
}

pub(super) fn info(code: ErrorCode, message: impl Into<String>) -> ToolErrorInfo {
    ToolErrorInfo {
        code,
        message: message.into(),
        by: None,
    }
}

/// As [`info`], naming the guard or hook that refused or failed the call.
pub(super) fn info_by(
    code: ErrorCode,
    message: impl Into<String>,
    by: impl Into<String>,
) -> ToolErrorInfo {
    ToolErrorInfo {
        by: Some(by.into()),
        ..info(code, message)
    }
}

pub(super) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The end of the policy stages as a preparation: ready, refused (settled at once), or the
/// log failed.
fn preparation(
    mut core: CallCore,
    outcome: Result<Arc<ToolEntry>, Stop>,
) -> Result<Preparation, PipelineError> {
    core.marks.prepared = Instant::now();
    match outcome {
        Ok(entry) => Ok(Preparation::Ready(ReadyCall { core, entry })),
        Err(Stop::Refused(error)) => Ok(Preparation::Refused(SettledCall::refused(core, error))),
        Err(Stop::Log(error)) => Err(error),
    }
}
