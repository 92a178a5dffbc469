//! Crash recovery (DESIGN §6): after a crash, every call of the open turn's last assistant
//! message that has no `tool/result` gets an honest synthetic one, in call order —
//! `TOOL_NOT_STARTED` when no `tool/start` was logged, `TOOL_OUTCOME_UNKNOWN` when it was,
//! unless an [`EffectProbe`] can tell from the world whether the call's effect happened. Then
//! `recovery/repaired` lists what was repaired and why, and `turn/end {interrupted}` closes the
//! turn. Everything is appended, durably; history is never rewritten. A repaired log has no
//! open turn, so recovering it again does nothing.
//!
//! A call that was waiting for an approval (`approval/asked`, no `approval/decided`, no
//! `tool/start`) is a pending approval (`pending.rs`): never answered yes by recovery, it is
//! asked again through an [`ApprovalResumer`], or closed as `expired` / `unavailable`.

mod pending;

pub use pending::{
    ApprovalResumer, ApprovalResumption, PendingApproval, ResumedApproval, waited_us,
};

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::content::ContentBlock;
use crate::event::{Event, EventData, RecoveryRepaired, StopReason, TurnEnd, TurnEndKind};
use crate::ids::{CallId, StepId, TurnId};
use crate::result::{ErrorCode, ToolResultRecord};
use crate::sink::SessionLog;
use crate::sink::{AppendUrgency, EventDraft, SinkError};
use crate::time::Timestamp;

/// What recovery knows about a call that started and has no result.
#[derive(Debug)]
pub struct InterruptedCall<'a> {
    /// The call's id, unique in its message (see [`AssistantMessage::tool_calls`]).
    ///
    /// [`AssistantMessage::tool_calls`]: crate::AssistantMessage::tool_calls
    pub call_id: &'a CallId,
    /// The tool's name as the model sent it: what a probe tells its own calls by.
    pub name: &'a str,
    /// The argument text exactly as the model sent it.
    pub arguments_raw: &'a str,
    /// Events the call recorded itself (`fs/write-intent`, `fs/observed`, …), in order.
    pub own_events: Vec<&'a Event>,
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// The effect is in the world: the call completed.
    Completed {
        /// What the probe saw, in a sentence; quoted in the synthetic result and in the
        /// `recovery/repaired` note.
        evidence: String,
    },
    /// The world is as before the call: its effect did not happen.
    DidNotHappen {
        /// What the probe saw, in a sentence; quoted as for `Completed`.
        evidence: String,
    },
}

/// Turns "outcome unknown" into a known outcome for a family of tools by checking the world
/// (the fs tools compare a file's digest with their `fs/write-intent`).
///
/// Implementors guarantee: `probe` only reads; it answers `Ok(None)` for calls it does not
/// understand, and `Err` when it cannot tell — the outcome then stays unknown.
pub trait EffectProbe: Send + Sync {
    /// Checks the world for `call`'s effect: a verdict, `Ok(None)` for a call this probe
    /// does not know, or `Err` saying why it cannot tell.
    fn probe(&self, call: &InterruptedCall<'_>) -> Result<Option<ProbeVerdict>, String>;
}

/// What recovery did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecoveryReport {
    /// Calls that received a synthetic result, in call order, with their code (`None` when a
    /// probe found the call completed). Pending approvals are in `approvals` instead.
    pub repaired: Vec<(CallId, Option<ErrorCode>)>,
    /// Calls that were waiting for an approval, in call order: asked again, expired, or
    /// closed with no one to ask.
    pub approvals: Vec<ResumedApproval>,
    /// Whether an open turn was closed.
    pub closed_turn: Option<TurnId>,
    /// Bytes of a torn tail that opening the file cut off.
    pub torn_bytes_dropped: u64,
}

impl RecoveryReport {
    /// Whether recovery changed anything.
    pub fn is_empty(&self) -> bool {
        self.repaired.is_empty()
            && self.approvals.is_empty()
            && self.closed_turn.is_none()
            && self.torn_bytes_dropped == 0
    }
}

/// Repairs `events` (a whole session, as read back) by appending to `log`, then makes the
/// repairs durable with a barrier, whatever the log's durability mode.
///
/// The turn repaired is the last one: open (a crash), or ended with `error` (an internal
/// failure ended it and left the classification to recovery, DESIGN §5) while calls of its
/// last assistant message had no result.
///
/// # Example
///
/// A crash after the model asked for two calls: `c1` was started, `c2` was not. Each gets
/// an honest result, the turn is closed, and recovering again changes nothing.
///
/// ```
/// use toolrail_session_log::{
///     AppendUrgency, CallId, ContentBlock, ErrorCode, EventData, EventDraft, EventSink,
///     MemorySink, StepId, Timestamp, TurnId, recover,
///     event::{AssistantBlock, AssistantMessage, StopReason, ToolStart, TurnStart},
/// };
///
/// let draft = |call: Option<&str>, data| EventDraft {
///     ts: Timestamp::now(),
///     turn: Some(TurnId(1)),
///     step: Some(StepId(1)),
///     call_id: call.map(CallId::from),
///     data,
/// };
/// let ask = |id: &str| AssistantBlock::ToolCall {
///     call_id: CallId::from(id),
///     name: "write".to_owned(),
///     arguments_raw: "{}".to_owned(),
/// };
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let log = MemorySink::new(); // a store's reopened log in real use
/// let user = TurnStart { user: vec![ContentBlock::text("save both")], trace: None, caller: None, client: false };
/// let message = AssistantMessage {
///     blocks: vec![ask("c1"), ask("c2")],
///     stop_reason: StopReason::ToolCalls,
/// };
/// for event in [
///     draft(None, EventData::TurnStart(user)),
///     draft(None, EventData::AssistantMessage(message)),
///     draft(Some("c1"), EventData::ToolStart(ToolStart::default())),
/// ] {
///     log.append(event, AppendUrgency::Buffered).await?;
/// }
///
/// let report = recover(&log.events(), 0, &[], &log).await?;
/// assert_eq!(report.repaired, [
///     (CallId::from("c1"), Some(ErrorCode::ToolOutcomeUnknown)),
///     (CallId::from("c2"), Some(ErrorCode::ToolNotStarted)),
/// ]);
/// assert_eq!(log.kinds()[3..], ["tool/result", "tool/result", "recovery/repaired", "turn/end"]);
/// assert!(recover(&log.events(), 0, &[], &log).await?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A call that was waiting for an approval is closed with no one to ask again: `expired`
/// past its question's deadline, else `unavailable` (see [`recover_asking_again`] to ask).
pub async fn recover(
    events: &[Event],
    torn_bytes_dropped: u64,
    probes: &[Arc<dyn EffectProbe>],
    log: &dyn SessionLog,
) -> Result<RecoveryReport, SinkError> {
    recover_inner(events, torn_bytes_dropped, probes, None, log).await
}

/// [`recover`], with every pending approval handed to `approvals` in call order (between the
/// synthetic results of the calls before and after it, so results stay in model order): it
/// asks the question again, or records it expired, and commits the call's result.
///
/// # Example
///
/// A session stopped while `c1` waited for an approval whose deadline has since passed. The
/// resumer here only records expiry, as the runtime's does past a deadline (before it, the
/// runtime's asks the session's approval service again through the pipeline).
///
/// ```
/// use std::sync::Arc;
/// use toolrail_session_log::{
///     AppendUrgency, BoxFuture, CallId, ErrorCode, EventData, EventDraft, EventSink,
///     MemorySink, SinkError, StepId, Timestamp, ToolResultRecord, TurnId,
///     event::{ApprovalAnswer, ApprovalAsked, ApprovalDecided, AssistantBlock, DecidedBy, AssistantMessage, StopReason, TurnStart},
///     recovery::{ApprovalResumer, ApprovalResumption, PendingApproval, recover_asking_again, waited_us},
/// };
///
/// struct ExpireOnly(Arc<MemorySink>);
/// impl ApprovalResumer for ExpireOnly {
///     fn resume<'a>(
///         &'a self,
///         call: &'a PendingApproval<'a>,
///     ) -> BoxFuture<'a, Result<(ApprovalResumption, Option<ErrorCode>), SinkError>> {
///         Box::pin(async move {
///             assert!(call.expired_at(Timestamp::now()));
///             let at = |data| EventDraft {
///                 ts: Timestamp::now(),
///                 turn: Some(call.turn),
///                 step: call.step,
///                 call_id: Some(call.call_id.clone()),
///                 data,
///             };
///             let waited_us = waited_us(call.asked_at, Timestamp::now());
///             let decided = ApprovalDecided { answer: ApprovalAnswer::Expired, waited_us, by: DecidedBy::Toolrail };
///             self.0.append(at(EventData::ApprovalDecided(decided)), AppendUrgency::Durable).await?;
///             let record = ToolResultRecord::failure(ErrorCode::ApprovalExpired, "no answer in time");
///             self.0.append(at(EventData::ToolResult(Arc::new(record))), AppendUrgency::Durable).await?;
///             Ok((ApprovalResumption::Expired, Some(ErrorCode::ApprovalExpired)))
///         })
///     }
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let log = Arc::new(MemorySink::new());
/// let draft = |call: Option<&str>, data| EventDraft {
///     ts: Timestamp::from_millis(1_000),
///     turn: Some(TurnId(1)),
///     step: Some(StepId(1)),
///     call_id: call.map(CallId::from),
///     data,
/// };
/// let message = AssistantMessage {
///     blocks: vec![AssistantBlock::ToolCall {
///         call_id: CallId::from("c1"),
///         name: "bash".to_owned(),
///         arguments_raw: r#"{"command":"make deploy"}"#.to_owned(),
///     }],
///     stop_reason: StopReason::ToolCalls,
/// };
/// let asked = ApprovalAsked {
///     reason: "deploys ask".to_owned(),
///     arguments: Arc::new(serde_json::json!({"command": "make deploy"})),
///     session_key: None,
///     expires_at: Some(Timestamp::from_millis(2_000)),
/// };
/// for event in [
///     draft(None, EventData::TurnStart(TurnStart { user: Vec::new(), trace: None, caller: None, client: false })),
///     draft(None, EventData::AssistantMessage(message)),
///     draft(Some("c1"), EventData::ApprovalAsked(asked)),
/// ] {
///     log.append(event, AppendUrgency::Buffered).await?;
/// }
/// let resumer = ExpireOnly(Arc::clone(&log));
/// let report = recover_asking_again(&log.events(), 0, &[], &resumer, log.as_ref()).await?;
/// assert_eq!(report.approvals[0].resumption, ApprovalResumption::Expired);
/// assert_eq!(
///     log.kinds()[3..],
///     ["approval/decided", "tool/result", "recovery/repaired", "turn/end"]
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn recover_asking_again(
    events: &[Event],
    torn_bytes_dropped: u64,
    probes: &[Arc<dyn EffectProbe>],
    approvals: &dyn ApprovalResumer,
    log: &dyn SessionLog,
) -> Result<RecoveryReport, SinkError> {
    recover_inner(events, torn_bytes_dropped, probes, Some(approvals), log).await
}

async fn recover_inner(
    events: &[Event],
    torn_bytes_dropped: u64,
    probes: &[Arc<dyn EffectProbe>],
    approvals: Option<&dyn ApprovalResumer>,
    log: &dyn SessionLog,
) -> Result<RecoveryReport, SinkError> {
    let mut report = RecoveryReport {
        torn_bytes_dropped,
        ..RecoveryReport::default()
    };
    let turn = last_turn(events);
    let in_turn: Vec<&Event> = match &turn {
        Some(turn) => events
            .iter()
            .filter(|event| event.turn == Some(turn.id))
            .collect(),
        None => Vec::new(),
    };
    let batch = last_batch(&in_turn);
    let needs_repair = match (&turn, &batch) {
        (Some(turn), _) if !turn.ended => true,
        (Some(_), Some(batch)) => !batch.unanswered.is_empty(),
        (Some(_), None) | (None, _) => false,
    };
    let (Some(turn), true) = (turn, needs_repair) else {
        if torn_bytes_dropped > 0 {
            let note = "cut a torn last line; no turn needed repair";
            append(
                log,
                None,
                None,
                None,
                repaired_event(Vec::new(), torn_bytes_dropped, note),
            )
            .await?;
            log.barrier().await?;
        }
        return Ok(report);
    };
    let idempotent = idempotent_tools(events);
    let mut repaired_ids = Vec::new();
    let mut notes = Vec::new();
    if let Some(batch) = &batch {
        // Only what happened after the message counts: call ids may repeat across steps.
        let since = &in_turn[batch.at..];
        for call in &batch.unanswered {
            let names_call = |event: &&Event| {
                event
                    .call_id
                    .as_ref()
                    .is_some_and(|id| *id == call.call_id || id.is_code_sub_call_of(&call.call_id))
            };
            let started = since.iter().any(|event| {
                event.call_id.as_ref() == Some(&call.call_id)
                    && matches!(event.data, EventData::ToolStart(_))
            });
            let mut evidence = None;
            let pending = match (batch.truncated, &call.repeat_refusal, started) {
                (false, None, false) => pending::pending_question(since, &call.call_id),
                _ => None,
            };
            if let Some((asked, asked_at)) = pending {
                // The span the call opened when it was recorded, so it keeps it.
                let trace = since.iter().find_map(|event| {
                    if let EventData::ToolCall(recorded) = &event.data
                        && event.call_id.as_ref() == Some(&call.call_id)
                    {
                        recorded.trace
                    } else {
                        None
                    }
                });
                let pending = PendingApproval {
                    call_id: &call.call_id,
                    index: call.index,
                    name: call.name,
                    arguments_raw: call.arguments_raw,
                    turn: turn.id,
                    step: batch.step,
                    asked,
                    asked_at,
                    trace,
                };
                let (resumption, code) = match approvals {
                    Some(approvals) => approvals.resume(&pending).await?,
                    None => pending::close_unasked(log, &pending).await?,
                };
                let outcome = code.as_ref().map_or("ran", ErrorCode::as_str);
                notes.push(format!(
                    "{}: waiting for an approval, {resumption} ({outcome})",
                    call.call_id
                ));
                repaired_ids.push(call.call_id.clone());
                report.approvals.push(ResumedApproval {
                    call_id: call.call_id.clone(),
                    resumption,
                    code,
                });
                continue;
            }
            let record = if batch.truncated {
                synthetic(ToolResultRecord::failure(
                    ErrorCode::TruncatedCall,
                    crate::outcome::TRUNCATED_CALL,
                ))
            } else if let Some(refusal) = &call.repeat_refusal {
                // What the live run would have answered: such a call never starts.
                synthetic(ToolResultRecord::failure(ErrorCode::InvalidArgs, refusal))
            } else if started {
                let interrupted = InterruptedCall {
                    call_id: &call.call_id,
                    name: call.name,
                    arguments_raw: call.arguments_raw,
                    own_events: since
                        .iter()
                        .copied()
                        .filter(names_call)
                        .filter(|event| event.data.is_tool_owned())
                        .collect(),
                };
                let (record, found) =
                    started_record(&interrupted, probes, idempotent.contains(call.name));
                evidence = found;
                record
            } else {
                synthetic(ToolResultRecord::failure(
                    ErrorCode::ToolNotStarted,
                    "the session stopped before this call started; it did not run. Safe to retry if still needed.",
                ))
            };
            let code = record.error_code().cloned();
            let outcome = match (&code, &evidence) {
                (None, Some(evidence)) => format!("completed ({evidence})"),
                (None, None) => "completed".to_owned(),
                (Some(code), Some(evidence)) => format!("{code}, did not happen ({evidence})"),
                (Some(code), None) => code.to_string(),
            };
            notes.push(format!("{}: {outcome}", call.call_id));
            append(
                log,
                Some(turn.id),
                batch.step,
                Some(call.call_id.clone()),
                EventData::ToolResult(Arc::new(record)),
            )
            .await?;
            repaired_ids.push(call.call_id.clone());
            report.repaired.push((call.call_id.clone(), code));
        }
    }
    let note = if notes.is_empty() {
        "closed an interrupted turn that had no unanswered calls".to_owned()
    } else {
        format!(
            "answered the calls the stop left open: {}",
            notes.join(", ")
        )
    };
    append(
        log,
        Some(turn.id),
        turn.step,
        None,
        repaired_event(repaired_ids, torn_bytes_dropped, &note),
    )
    .await?;
    if !turn.ended {
        let end = TurnEnd {
            kind: TurnEndKind::Interrupted,
            message: Some("the session stopped before the turn ended".to_owned()),
        };
        append(log, Some(turn.id), turn.step, None, EventData::TurnEnd(end)).await?;
        report.closed_turn = Some(turn.id);
    }
    log.barrier().await?;
    Ok(report)
}

struct LastTurn {
    id: TurnId,
    step: Option<StepId>,
    /// Ended, with kind `error` (a turn that ended any other way is never repaired).
    ended: bool,
}

/// The last turn, if it is open or ended with `error`.
fn last_turn(events: &[Event]) -> Option<LastTurn> {
    let mut last: Option<LastTurn> = None;
    let mut closed_cleanly = false;
    for event in events {
        if let EventData::TurnStart(_) = &event.data {
            last = event.turn.map(|id| LastTurn {
                id,
                step: event.step,
                ended: false,
            });
            closed_cleanly = false;
            continue;
        }
        let Some(turn) = last.as_mut().filter(|turn| Some(turn.id) == event.turn) else {
            continue;
        };
        if let EventData::TurnEnd(end) = &event.data {
            turn.ended = true;
            closed_cleanly = end.kind != TurnEndKind::Error;
        } else if let Some(step) = event.step {
            turn.step = Some(step);
        }
    }
    if closed_cleanly { None } else { last }
}

struct PendingCall<'a> {
    call_id: CallId,
    index: u32,
    /// Why the runtime refuses it, when its id repeated an earlier call's.
    repeat_refusal: Option<String>,
    name: &'a str,
    arguments_raw: &'a str,
}

/// The turn's last assistant message and its calls without a result.
struct LastBatch<'a> {
    /// Position of the message in the turn's events.
    at: usize,
    step: Option<StepId>,
    truncated: bool,
    unanswered: Vec<PendingCall<'a>>,
}

fn last_batch<'a>(in_turn: &[&'a Event]) -> Option<LastBatch<'a>> {
    let (at, message, step) = in_turn.iter().enumerate().rev().find_map(|(at, event)| {
        if let EventData::AssistantMessage(message) = &event.data {
            Some((at, message, event.step))
        } else {
            None
        }
    })?;
    let answered: BTreeSet<&CallId> = in_turn[at..]
        .iter()
        .filter(|event| matches!(event.data, EventData::ToolResult(_)))
        .filter_map(|event| event.call_id.as_ref())
        .collect();
    let unanswered = message
        .tool_calls()
        .into_iter()
        .enumerate()
        .filter(|(_, call)| !answered.contains(&call.call_id))
        .map(|(index, call)| PendingCall {
            repeat_refusal: call.repeat_refusal(),
            index: u32::try_from(index).unwrap_or(u32::MAX),
            call_id: call.call_id,
            name: call.name,
            arguments_raw: call.arguments_raw,
        })
        .collect();
    Some(LastBatch {
        at,
        step,
        truncated: message.stop_reason == StopReason::Length,
        unanswered,
    })
}

/// Tool names the session's tool set marks idempotent.
fn idempotent_tools(events: &[Event]) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    for event in events {
        if let EventData::SessionStart(start) = &event.data {
            names.extend(
                start
                    .tools
                    .iter()
                    .filter(|tool| tool.idempotent)
                    .map(|tool| tool.name.as_str()),
            );
        }
    }
    names
}

/// The synthetic record of a call that started, and the evidence a probe gave, if any.
fn started_record(
    call: &InterruptedCall<'_>,
    probes: &[Arc<dyn EffectProbe>],
    idempotent: bool,
) -> (ToolResultRecord, Option<String>) {
    let mut probe_errors: Vec<String> = Vec::new();
    for probe in probes {
        match probe.probe(call) {
            Ok(Some(ProbeVerdict::Completed { evidence })) => {
                let record = synthetic(ToolResultRecord::success(vec![ContentBlock::text(
                    format!(
                        "The session stopped while this call was running. Recovery checked: it completed ({evidence}). Its output was not kept."
                    ),
                )]));
                return (record, Some(evidence));
            }
            Ok(Some(ProbeVerdict::DidNotHappen { evidence })) => {
                let record = synthetic(ToolResultRecord::failure(
                    ErrorCode::ToolFailed,
                    format!(
                        "the session stopped while this call was running; recovery checked and its effect did not happen ({evidence}). Safe to retry."
                    ),
                ));
                return (record, Some(evidence));
            }
            Ok(None) => {}
            Err(error) => {
                probe_errors.push(error);
            }
        }
    }
    let advice = crate::outcome::retry_advice(idempotent);
    let mut message = format!(
        "the session stopped while this call was running and its outcome is unknown — {advice}"
    );
    if !probe_errors.is_empty() {
        message.push_str(&format!(" (checking failed: {})", probe_errors.join("; ")));
    }
    let record = synthetic(ToolResultRecord::failure(
        ErrorCode::ToolOutcomeUnknown,
        message,
    ));
    (record, None)
}

fn synthetic(mut record: ToolResultRecord) -> ToolResultRecord {
    record.synthetic = true;
    record
}

fn repaired_event(calls: Vec<CallId>, torn_bytes_dropped: u64, note: &str) -> EventData {
    EventData::RecoveryRepaired(RecoveryRepaired {
        calls,
        torn_bytes_dropped,
        note: note.to_owned(),
    })
}

async fn append(
    sink: &dyn SessionLog,
    turn: Option<TurnId>,
    step: Option<StepId>,
    call_id: Option<CallId>,
    data: EventData,
) -> Result<u64, SinkError> {
    let draft = EventDraft {
        ts: Timestamp::now(),
        turn,
        step,
        call_id,
        data,
    };
    sink.append(draft, AppendUrgency::Durable).await
}
