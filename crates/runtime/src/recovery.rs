//! What recovery did to a session, in words a person reads: each call a crash left without
//! a result, which tool it was, and what became of it.

use std::fmt;

use toolrail_session_log::{
    CallId, ErrorCode, Event, EventData, TurnId, call_records, recovery::RecoveryReport,
};

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
        let calls = report
            .repaired
            .iter()
            .map(|(call_id, outcome)| RepairedCall {
                call_id: call_id.clone(),
                tool: records
                    .iter()
                    .find(|record| record.call_id == *call_id)
                    .map_or_else(|| "?".to_owned(), |record| record.name.clone()),
                outcome: outcome.clone(),
            })
            .collect();
        let earlier_repairs = events
            .iter()
            .filter(|event| matches!(event.data, EventData::RecoveryRepaired(_)))
            .count();
        Self {
            calls,
            closed_turn: report.closed_turn,
            torn_bytes_dropped: report.torn_bytes_dropped,
            earlier_repairs,
        }
    }

    /// Whether recovery changed anything.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.closed_turn.is_none() && self.torn_bytes_dropped == 0
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
