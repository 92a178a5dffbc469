//! What recovery did to a session, in words a person reads: each call a crash left without
//! a result, which tool it was, and what became of it — and `PipelineResumer`, which asks a
//! reopened session's pending approvals again through its own pipeline.

use std::fmt;
use std::sync::Arc;

use toolrail_session_log::{
    BoxFuture, CallId, ErrorCode, Event, EventData, SinkError, TurnId, call_records,
    recovery::{ApprovalResumer, ApprovalResumption, PendingApproval, RecoveryReport},
};
use toolrail_tools_core::pipeline::{BatchControl, PendingAsk, Preparation};
use toolrail_tools_core::{CallRequest, CancellationToken, Pipeline, PipelineError, Registry};

/// One call recovery answered.
#[derive(Clone, Debug, PartialEq)]
pub struct RepairedCall {
    /// The call's id in the log.
    pub call_id: CallId,
    /// The tool's name, as the call named it.
    pub tool: String,
    /// `TOOL_NOT_STARTED`, `TOOL_OUTCOME_UNKNOWN`, or `None` when a probe found the call's
    /// change complete.
    pub outcome: Option<ErrorCode>,
}

impl RepairedCall {
    /// What the outcome means for whoever continues the session.
    pub fn advice(&self) -> &'static str {
        match &self.outcome {
            Some(ErrorCode::ToolNotStarted) => "it never started: safe to retry if still needed",
            Some(ErrorCode::ToolOutcomeUnknown) => {
                "it started and may have acted: verify before retrying"
            }
            Some(_) => "it started; the probe settled what happened",
            None => "it started, and the file probe found its change complete",
        }
    }
}

/// A call that was waiting for an approval when the session stopped, and what became of it.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingApprovalCall {
    /// The call's id in the log.
    pub call_id: CallId,
    /// The tool's name, as the call named it.
    pub tool: String,
    /// Asked again (and the answer), expired, or no one to ask.
    pub resumption: ApprovalResumption,
    /// The committed result's error code; `None`: allowed, it ran and succeeded.
    pub outcome: Option<ErrorCode>,
}

impl fmt::Display for PendingApprovalCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = self.outcome.as_ref().map_or("ran", ErrorCode::as_str);
        write!(
            f,
            "{} ({}): was waiting for an approval — {} → {outcome}",
            self.call_id, self.tool, self.resumption
        )
    }
}

/// What recovery repaired when a session was opened.
///
/// ```
/// use toolrail_runtime::Recovery;
/// let nothing = Recovery::default();
/// assert_eq!(nothing.to_string(), "nothing to repair");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovery {
    /// Each call that received a synthetic result, in call order.
    pub calls: Vec<RepairedCall>,
    /// Each call that was waiting for an approval, in call order: asked again, expired, or
    /// refused with no one to ask (never allowed without an answer).
    pub approvals: Vec<PendingApprovalCall>,
    /// The turn closed as interrupted, if one was open.
    pub closed_turn: Option<TurnId>,
    /// Bytes of a torn last line cut off when the file was opened.
    pub torn_bytes_dropped: u64,
    /// Repairs an earlier opening made (recovery runs once per crash).
    pub earlier_repairs: usize,
}

impl Recovery {
    /// The report of `recover`, with each call's tool read from the session's `events`.
    pub fn new(report: &RecoveryReport, events: &[Event]) -> Self {
        let records = call_records(events);
        let tool = |call_id: &CallId| {
            records
                .iter()
                .rev()
                .find(|record| record.call_id == *call_id)
                .map_or_else(|| "?".to_owned(), |record| record.name.clone())
        };
        let calls = report
            .repaired
            .iter()
            .map(|(call_id, outcome)| RepairedCall {
                call_id: call_id.clone(),
                tool: tool(call_id),
                outcome: outcome.clone(),
            })
            .collect();
        let approvals = report
            .approvals
            .iter()
            .map(|resumed| PendingApprovalCall {
                call_id: resumed.call_id.clone(),
                tool: tool(&resumed.call_id),
                resumption: resumed.resumption.clone(),
                outcome: resumed.code.clone(),
            })
            .collect();
        let earlier_repairs = events
            .iter()
            .filter(|event| matches!(event.data, EventData::RecoveryRepaired(_)))
            .count();
        Self {
            calls,
            approvals,
            closed_turn: report.closed_turn,
            torn_bytes_dropped: report.torn_bytes_dropped,
            earlier_repairs,
        }
    }

    /// Whether recovery changed anything.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
            && self.approvals.is_empty()
            && self.closed_turn.is_none()
            && self.torn_bytes_dropped == 0
    }
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing to repair");
        }
        let mut lines = Vec::new();
        if self.torn_bytes_dropped > 0 {
            lines.push(format!(
                "cut a torn last line ({} bytes): a write the crash interrupted",
                self.torn_bytes_dropped
            ));
        }
        for call in &self.calls {
            let code = call
                .outcome
                .as_ref()
                .map_or("completed", |code| code.as_str());
            lines.push(format!(
                "{} ({}): {code} — {}",
                call.call_id,
                call.tool,
                call.advice()
            ));
        }
        for call in &self.approvals {
            lines.push(call.to_string());
        }
        if let Some(turn) = self.closed_turn {
            lines.push(format!("turn {} closed as interrupted", turn.0));
        }
        if self.earlier_repairs > 0 {
            lines.push(format!(
                "(the log holds {} earlier repairs)",
                self.earlier_repairs
            ));
        }
        f.write_str(&lines.join("\n"))
    }
}

/// Whether [`Store::recover`](crate::Store::recover) writes what it repairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoverMode {
    /// Append the synthetic results, the repair note and the turn's end to the log.
    Repair,
    /// Say what would be repaired; the log is read, never written (a torn last line is
    /// left as it is).
    DryRun,
}

impl crate::Store {
    /// Recovers session `id` as resuming it would, without resuming it: each call an
    /// interrupted turn left open gets its honest outcome (file writes are probed for what
    /// really happened); [`RecoverMode::DryRun`] only says what it would do.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use toolrail_runtime::{RecoverMode, Store};
    /// let store = Store::jsonl(".toolrail/sessions")?;
    /// let would = store.recover(&"s1".into(), RecoverMode::DryRun).await?;
    /// println!("{would}");
    /// # Ok(()) }
    /// ```
    pub async fn recover(
        &self,
        id: &toolrail_session_log::SessionId,
        mode: RecoverMode,
    ) -> Result<Recovery, crate::BuildError> {
        let probe = crate::agent::probe_for(self.durability());
        match mode {
            RecoverMode::Repair => {
                let opened = self.open_session(id)?;
                crate::agent::repair(
                    &opened.events,
                    opened.torn_bytes_dropped,
                    probe,
                    &opened.log,
                )
                .await
            }
            RecoverMode::DryRun => {
                let events = self.read(id)?;
                if events.is_empty() {
                    return Err(crate::BuildError::Session(format!(
                        "`{}` holds no session `{id}`",
                        self.url()
                    )));
                }
                // The repairs go to a scratch log: said, never written.
                let scratch: std::sync::Arc<dyn toolrail_session_log::SessionLog> =
                    std::sync::Arc::new(toolrail_session_log::MemorySink::new());
                crate::agent::repair(&events, 0, probe, &scratch).await
            }
        }
    }
}

/// Asks a reopened session's pending approvals again through the session's own pipeline:
/// the rules, hooks, approval service (under the question's recorded deadline) and guards
/// judge the call again, an allowed call is dispatched like any other, and its real
/// result is committed; past the deadline it is `APPROVAL_EXPIRED` without asking. When
/// `cancel` fires (a worker lost its lease, a client cancelled) the question is withdrawn
/// and the call refused `APPROVAL_CANCELLED`, never run: with no recorded deadline it could
/// otherwise wait forever.
pub(crate) struct PipelineResumer {
    pub pipeline: Arc<Pipeline>,
    pub registry: Registry,
    pub cancel: CancellationToken,
}

impl PipelineResumer {
    async fn settle(
        &self,
        call: &PendingApproval<'_>,
    ) -> Result<(ApprovalResumption, Option<ErrorCode>), PipelineError> {
        let mut request = CallRequest::new(
            call.call_id.clone(),
            call.index,
            call.name,
            call.arguments_raw,
        );
        request.turn = Some(call.turn);
        request.step = call.step;
        let pending = PendingAsk {
            asked_at: call.asked_at,
            expires_at: call.asked.expires_at,
            trace: call.trace,
        };
        // The tools as they are now: a tool gone since is `UNKNOWN_TOOL`, never run.
        let tools = self.registry.snapshot();
        let control = BatchControl {
            cancel: self.cancel.clone(),
            ..BatchControl::default()
        };
        let pipeline = &self.pipeline;
        let (prepared, resumption) = pipeline
            .prepare_pending(&tools, request, pending, &control)
            .await?;
        let settled = match prepared {
            Preparation::Ready(ready) => pipeline.dispatch(ready, &control).await?,
            Preparation::Refused(refused) => refused,
        };
        let committed = pipeline.finish(settled).await?;
        pipeline.log_context(&committed).await?;
        Ok((resumption, committed.record().error_code().cloned()))
    }
}

impl ApprovalResumer for PipelineResumer {
    fn resume<'a>(
        &'a self,
        call: &'a PendingApproval<'a>,
    ) -> BoxFuture<'a, Result<(ApprovalResumption, Option<ErrorCode>), SinkError>> {
        Box::pin(async move {
            self.settle(call).await.map_err(|error| match error {
                PipelineError::Log { source, .. } => source,
                PipelineError::Internal(message) => SinkError::Refused(format!(
                    "asking call `{}`'s approval again failed inside the runtime: {message}",
                    call.call_id
                )),
            })
        })
    }
}
