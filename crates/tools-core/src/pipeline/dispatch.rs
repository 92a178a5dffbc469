//! Stages 6–7: start and execute. The deadline and the cancellation grace are enforced
//! here, around every layer, so an uncooperative body cannot hang a batch: past the grace it
//! is abandoned and committed as `TOOL_OUTCOME_UNKNOWN`, never as "not executed".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use toolrail_session_log::{
    AppendUrgency, BoxFuture, ErrorCode, EventData, ToolErrorInfo, event::ToolStart,
};

use super::prepare::{ReadyCall, info};
use super::{BatchControl, BodyExecution, CallCore, Pipeline, PipelineError, Settlement};
use crate::arguments::CallArgs;
use crate::context::{CallIdentity, ToolContext};
use crate::layer::{ExecNext, ExecuteLayer};
use crate::tool::{Tool, ToolFailure, ToolOutput, ToolResult};
use crate::unwind::CatchUnwind;

/// A call whose body settled (or was never started). Finish it to commit its result.
#[must_use = "a settled call must be finished to commit its result"]
pub struct SettledCall {
    pub(super) core: CallCore,
    pub(super) settlement: Settlement,
}

impl SettledCall {
    /// A call that never started. Results for calls the runtime stopped (`NOT_EXECUTED`,
    /// `TRUNCATED_CALL`) are synthetic: no stage decided them on the call's merits.
    pub(super) fn refused(mut core: CallCore, error: ToolErrorInfo) -> Self {
        core.marks.settled = Some(Instant::now());
        let synthetic = matches!(
            error.code,
            ErrorCode::NotExecuted | ErrorCode::TruncatedCall
        );
        Self {
            core,
            settlement: Settlement::Refused { error, synthetic },
        }
    }

    /// The call's identity, fixed when it was recorded.
    pub fn identity(&self) -> &CallIdentity {
        &self.core.identity
    }

    /// The arguments the call was judged (and, if it ran, executed) with; for a call refused
    /// before its arguments parsed, what could be read of them.
    pub fn shared_arguments(&self) -> Arc<Value> {
        Arc::clone(self.core.arguments.shared())
    }

    /// Whether the body started (stage 6 was logged).
    pub fn started(&self) -> bool {
        matches!(self.settlement, Settlement::Ran { .. })
    }

    /// The error code the call settled with, before post-execute hooks.
    pub fn error_code(&self) -> Option<&ErrorCode> {
        match &self.settlement {
            Settlement::Refused { error, .. } => Some(&error.code),
            Settlement::Ran {
                outcome: Err(error),
                ..
            } => Some(&error.code),
            Settlement::Ran { outcome: Ok(_), .. } => None,
        }
    }
}

/// Why a body was interrupted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Interrupt {
    Cancelled,
    TimedOut(Duration),
}

impl Pipeline {
    /// Stages 6–7 for a prepared call. Calls of a batch may be dispatched concurrently.
    pub async fn dispatch(
        &self,
        ready: ReadyCall,
        control: &BatchControl,
    ) -> Result<SettledCall, PipelineError> {
        if control.cancel.is_cancelled() {
            return Ok(ready
                .not_executed("the batch was cancelled before this call started; it did not run"));
        }
        let ReadyCall { mut core, entry } = ready;
        let spec = entry.spec();
        let timeout = core
            .timeout
            .or_else(|| spec.timeout())
            .or(self.config.default_timeout);

        // Stage 6: the start is a fact before the body may act; durable for calls that may
        // change the world, so recovery can tell "never started" from "may have acted".
        let urgency = if spec.is_read_only() {
            AppendUrgency::Buffered
        } else {
            AppendUrgency::Durable
        };
        let start = ToolStart {
            timeout_ms: timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        };
        let stamped = Instant::now();
        self.append(
            &core.identity,
            stamped,
            EventData::ToolStart(start),
            urgency,
        )
        .await?;
        // A durable start may have waited for an fsync: that is not the body's time.
        let started = match urgency {
            AppendUrgency::Durable => Instant::now(),
            AppendUrgency::Buffered => stamped,
        };
        core.marks.started = Some(stamped);
        core.marks.body_started = Some(started);

        // Stage 7.
        // A deadline cancels this call alone, so it needs a token of its own; without one the
        // batch's token is the call's (and costs no allocation).
        let call_cancel = if timeout.is_some() {
            control.cancel.child_token()
        } else {
            control.cancel.clone()
        };
        let ctx = ToolContext::new(
            Arc::clone(&core.identity),
            call_cancel.clone(),
            control.progress.clone(),
            Arc::clone(&self.sink),
            self.config.workspace.clone(),
        )
        .with_approval(core.approval_granted)
        .with_trace(core.trace);
        // A deadline too far away to represent is no deadline.
        let deadline = timeout.and_then(|limit| started.checked_add(limit).map(|at| (at, limit)));
        // The body's own handle (the call's settlement moves `core`), with what the argument
        // check decoded.
        let arguments = core.arguments.hand_over();
        let mut running = Body::start(
            self.config.execution,
            &self.layers,
            entry.tool(),
            &ctx,
            &arguments,
        );

        let interrupt = tokio::select! {
            biased;
            settled = &mut running => {
                let now = Instant::now();
                core.marks.settled = Some(now);
                let effects = ctx.effect_log().snapshot();
                let outcome = match deadline {
                    // A body that blocked its thread past the deadline kept the timer from
                    // firing; it is still late.
                    Some((at, limit)) if now > at => interrupted_outcome(Interrupt::TimedOut(limit), settled),
                    // A body that noticed the batch's cancel before we did settled because of it.
                    _ if call_cancel.is_cancelled() => interrupted_outcome(Interrupt::Cancelled, settled),
                    _ => match settled {
                        Ok(result) => result.map_err(tool_failure),
                        Err(panic) => Err(info(ErrorCode::ToolFailed, format!("the tool panicked: {panic}"))),
                    },
                };
                return Ok(SettledCall { core, settlement: Settlement::Ran { outcome, effects, synthetic: false } });
            }
            () = call_cancel.cancelled() => Interrupt::Cancelled,
            () = super::sleep_until(deadline.map(|(at, _)| at)) => {
                let (_, limit) = deadline.unwrap_or((started, Duration::ZERO));
                Interrupt::TimedOut(limit)
            }
        };
        // Ask the body to stop, then give it the grace to settle with its real outcome.
        call_cancel.cancel();
        let grace = self.config.cancel_grace;
        let late = tokio::time::timeout(grace, &mut running).await;
        core.marks.settled = Some(Instant::now());
        let effects = ctx.effect_log().snapshot();
        drop(running);
        let safe_to_retry = spec.is_idempotent() || spec.is_read_only();
        let (outcome, synthetic) = match late {
            Ok(settled) => (interrupted_outcome(interrupt, settled), false),
            Err(_) => (Err(abandoned(interrupt, grace, safe_to_retry)), true),
        };
        Ok(SettledCall {
            core,
            settlement: Settlement::Ran {
                outcome,
                effects,
                synthetic,
            },
        })
    }
}

/// Where a body runs (see [`BodyExecution`]).
enum Body<'a> {
    Inline(CatchUnwind<BoxFuture<'a, ToolResult>>),
    Task(JoinHandle<Result<ToolResult, String>>),
}

impl<'a> Body<'a> {
    fn start(
        execution: BodyExecution,
        layers: &'a Arc<[Arc<dyn ExecuteLayer>]>,
        tool: &'a Arc<dyn Tool>,
        ctx: &'a ToolContext,
        arguments: &'a CallArgs,
    ) -> Self {
        match execution {
            BodyExecution::Inline => {
                let next = ExecNext::new(layers, tool.as_ref(), ctx, arguments);
                Self::Inline(CatchUnwind::start(|| next.run()))
            }
            BodyExecution::Task => {
                let (layers, tool, ctx, arguments) = (
                    Arc::clone(layers),
                    Arc::clone(tool),
                    ctx.clone(),
                    arguments.hand_over(),
                );
                Self::Task(tokio::spawn(async move {
                    let next = ExecNext::new(&layers, tool.as_ref(), &ctx, &arguments);
                    CatchUnwind::start(|| next.run()).await
                }))
            }
        }
    }
}

impl Future for Body<'_> {
    type Output = Result<ToolResult, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Inline(body) => Pin::new(body).poll(cx),
            Self::Task(handle) => Pin::new(handle).poll(cx).map(|joined| match joined {
                Ok(settled) => settled,
                Err(error) => Err(format!(
                    "the task running the tool ended abnormally: {error}"
                )),
            }),
        }
    }
}

impl Drop for Body<'_> {
    fn drop(&mut self) {
        // An abandoned task body is stopped at its next await; a body that blocks its thread
        // cannot be stopped, but no longer holds up anything.
        if let Self::Task(handle) = self {
            handle.abort();
        }
    }
}

/// A body's failure as recorded: its code is one a tool may use ([`ToolFailure`] holds a
/// `ToolCode`, which has no pipeline code), so nothing is rewritten.
fn tool_failure(failure: ToolFailure) -> ToolErrorInfo {
    failure.into_info()
}

/// The outcome of a body that settled within the grace after an interrupt.
fn interrupted_outcome(
    interrupt: Interrupt,
    settled: Result<Result<ToolOutput, ToolFailure>, String>,
) -> Result<ToolOutput, ToolErrorInfo> {
    match (interrupt, settled) {
        // A call that finished keeps its true result, even if the batch was cancelled.
        (Interrupt::Cancelled, Ok(Ok(output))) => Ok(output),
        (Interrupt::Cancelled, Ok(Err(failure))) => Err(info(
            ErrorCode::Aborted,
            format!(
                "the call was cancelled while running and stopped: {}",
                failure.message()
            ),
        )),
        (Interrupt::Cancelled, Err(panic)) => Err(info(
            ErrorCode::Aborted,
            format!("the call was cancelled while running and then panicked: {panic}"),
        )),
        (Interrupt::TimedOut(limit), settled) => {
            let how = match settled {
                Ok(Ok(_)) => "it finished only after the deadline".to_owned(),
                Ok(Err(failure)) => format!("it stopped: {}", failure.message()),
                Err(panic) => format!("it then panicked: {panic}"),
            };
            Err(info(
                ErrorCode::ToolTimeout,
                format!(
                    "the call did not finish within {}; it was cancelled and {how}. Any effects it reported are listed",
                    human(limit)
                ),
            ))
        }
    }
}

fn abandoned(interrupt: Interrupt, grace: Duration, safe_to_retry: bool) -> ToolErrorInfo {
    let why = match interrupt {
        Interrupt::Cancelled => "the call was cancelled while running".to_owned(),
        Interrupt::TimedOut(limit) => format!("the call did not finish within {}", human(limit)),
    };
    let advice = toolrail_session_log::outcome::retry_advice(safe_to_retry);
    info(
        ErrorCode::ToolOutcomeUnknown,
        format!(
            "{why} and did not stop within the grace of {}; it was abandoned and its outcome is unknown — {advice}",
            human(grace)
        ),
    )
}

fn human(duration: Duration) -> String {
    if duration.as_millis() < 1000 {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}
