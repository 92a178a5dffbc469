//! Pending approvals across a restart: a call whose `approval/asked` has no
//! `approval/decided` (and that neither started nor has a result) was waiting for a person
//! when the session stopped. Recovery never answers it yes: past the question's
//! `expires_at` it is `expired`; otherwise whoever reopens the session asks again through
//! an [`ApprovalResumer`], and without one no one can be asked (`unavailable`).

use std::sync::Arc;

use crate::event::{ApprovalAnswer, ApprovalAsked, ApprovalDecided, DecidedBy, Event, EventData};
use crate::ids::{CallId, StepId, TurnId};
use crate::result::{ErrorCode, ToolResultRecord};
use crate::sink::{BoxFuture, SessionLog, SinkError};
use crate::time::Timestamp;
use crate::trace::TraceRef;

/// A call of the open turn's last assistant message that was waiting for an approval when
/// the session stopped.
#[derive(Debug)]
pub struct PendingApproval<'a> {
    /// The call's id, unique in its message.
    pub call_id: &'a CallId,
    /// The call's position in the message, from 0.
    pub index: u32,
    /// The tool's name as the model sent it.
    pub name: &'a str,
    /// The argument text exactly as the model sent it (and as `tool/call` recorded it).
    pub arguments_raw: &'a str,
    /// The turn the call belongs to.
    pub turn: TurnId,
    /// The model request (step) whose message made the call.
    pub step: Option<StepId>,
    /// The question as it was last asked: reason, effective arguments, session key, deadline.
    pub asked: &'a ApprovalAsked,
    /// When it was last asked.
    pub asked_at: Timestamp,
    /// The span its `tool/call` recorded, when the session was traced.
    pub trace: Option<TraceRef>,
}

impl PendingApproval<'_> {
    /// Whether the question's deadline has passed at `now` (a question without one never
    /// expires).
    pub fn expired_at(&self, now: Timestamp) -> bool {
        self.asked
            .expires_at
            .is_some_and(|deadline| now >= deadline)
    }
}

/// What became of a pending approval when the session reopened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalResumption {
    /// Its deadline had passed: recorded `expired` without asking again.
    Expired,
    /// Asked again; the answer the log's new `approval/decided` records.
    AskedAgain(ApprovalAnswer),
    /// Settled without a new question: the policy, judged again, decided on its own (a
    /// rule now denies it or no longer asks, the arguments or the tool no longer pass).
    NotAskedAgain,
    /// No one could be asked (recovery without an approval service): recorded
    /// `unavailable`, never a yes.
    NoOneToAsk,
}

impl std::fmt::Display for ApprovalResumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let answer = |answer: &ApprovalAnswer| match answer {
            ApprovalAnswer::AllowedOnce => "allowed once".to_owned(),
            ApprovalAnswer::AllowedForSession { key } => format!("allowed for the session ({key})"),
            ApprovalAnswer::Rejected { reason: None } => "rejected".to_owned(),
            ApprovalAnswer::Rejected {
                reason: Some(reason),
            } => format!("rejected ({reason})"),
            ApprovalAnswer::Cancelled => "cancelled".to_owned(),
            ApprovalAnswer::Expired => "expired while asked again".to_owned(),
            ApprovalAnswer::Unavailable => "no one answered".to_owned(),
        };
        match self {
            Self::Expired => f.write_str("expired before the session reopened"),
            Self::AskedAgain(given) => write!(f, "asked again: {}", answer(given)),
            Self::NotAskedAgain => f.write_str("judged again without asking"),
            Self::NoOneToAsk => f.write_str("no one to ask again"),
        }
    }
}

/// What recovery did with one pending approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumedApproval {
    /// The call.
    pub call_id: CallId,
    /// Asked again, expired, or no one to ask.
    pub resumption: ApprovalResumption,
    /// The committed result's error code (`None`: the call ran and succeeded).
    pub code: Option<ErrorCode>,
}

/// Settles the pending approvals recovery finds, as the session's own pipeline would: the
/// runtime implements it with the reopened session's pipeline and approval service.
///
/// Implementors guarantee: when `resume` answers `Ok`, the call has exactly one
/// `tool/result` in the log, appended after any approval events it recorded; a question
/// past the call's [`PendingApproval::asked`] deadline is never asked again and never
/// allowed; a call runs only after an allowing answer given now (or a policy that no
/// longer asks), through every policy stage again.
pub trait ApprovalResumer: Send + Sync {
    /// Asks `call`'s question again, or records it expired, and commits the call's result.
    fn resume<'a>(
        &'a self,
        call: &'a PendingApproval<'a>,
    ) -> BoxFuture<'a, Result<(ApprovalResumption, Option<ErrorCode>), SinkError>>;
}

/// The question `call_id` left pending among `since` (the turn's events from its last
/// assistant message on), with when it was asked: its last `approval/asked` has no
/// `approval/decided` after it. The caller has checked the call did not start.
pub(super) fn pending_question<'a>(
    since: &[&'a Event],
    call_id: &CallId,
) -> Option<(&'a ApprovalAsked, Timestamp)> {
    let mut pending = None;
    for event in since {
        if event.call_id.as_ref() != Some(call_id) {
            continue;
        }
        if let EventData::ApprovalAsked(asked) = &event.data {
            pending = Some((asked, event.ts));
        } else if let EventData::ApprovalDecided(_) = &event.data {
            pending = None;
        }
    }
    pending
}

/// With no one to ask again: `expired` past the deadline, else `unavailable`; the
/// `approval/decided` is appended here and the synthetic refusal returned for recovery to
/// commit. Never a yes.
pub(super) async fn close_unasked(
    log: &dyn SessionLog,
    call: &PendingApproval<'_>,
) -> Result<(ApprovalResumption, Option<ErrorCode>), SinkError> {
    let now = Timestamp::now();
    let (resumption, answer, code, message) = if call.expired_at(now) {
        (
            ApprovalResumption::Expired,
            ApprovalAnswer::Expired,
            ErrorCode::ApprovalExpired,
            crate::outcome::APPROVAL_EXPIRED,
        )
    } else {
        (
            ApprovalResumption::NoOneToAsk,
            ApprovalAnswer::Unavailable,
            ErrorCode::ApprovalUnavailable,
            crate::outcome::APPROVAL_UNAVAILABLE,
        )
    };
    let decided = EventData::ApprovalDecided(ApprovalDecided {
        answer,
        waited_us: waited_us(call.asked_at, now),
        by: DecidedBy::Toolrail,
    });
    super::append(
        log,
        Some(call.turn),
        call.step,
        Some(call.call_id.clone()),
        decided,
    )
    .await?;
    let mut record = ToolResultRecord::failure(code.clone(), message);
    record.synthetic = true;
    super::append(
        log,
        Some(call.turn),
        call.step,
        Some(call.call_id.clone()),
        EventData::ToolResult(Arc::new(record)),
    )
    .await?;
    Ok((resumption, Some(code)))
}

/// Microseconds from `asked_at` to `now` (the question waited across the restart).
pub fn waited_us(asked_at: Timestamp, now: Timestamp) -> u64 {
    now.as_millis()
        .saturating_sub(asked_at.as_millis())
        .saturating_mul(1000)
}
