//! Presenters per tool: the shipped card kinds by tool name, and presenters a tool (or an
//! embedder) registers for its own calls. A presenter that panics is replaced by the
//! generic card for that call.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::Value;
use toolrail_session_log::{CallId, CallRecord, ToolResultRecord, event::ApprovalAnswer};

use crate::card::{Card, CardBody, CardKind, CardStatus};
use crate::present::{parse_arguments, present_call, present_result};

/// Makes the cards of one tool's calls. Implementations must be pure: the same arguments
/// and result give the same card, live and on replay.
pub trait Presenter: Send + Sync {
    /// The card of a call with no result yet. `tool` is the name the call used, so one
    /// presenter can show several tools.
    fn present_call(&self, tool: &str, args: &Value) -> Card;
    /// The card of a call and its result; `args` are the effective arguments when a hook
    /// rewrote them.
    fn present_result(&self, tool: &str, args: &Value, result: &ToolResultRecord) -> Card;
}

/// Which presenter shows which tool.
#[derive(Clone, Default)]
pub struct Presenters {
    custom: HashMap<String, Arc<dyn Presenter>>,
}

impl Presenters {
    /// The shipped cards only, chosen by tool name ([`CardKind::for_tool`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// `tool`'s calls are shown by `presenter` from now on.
    pub fn register(mut self, tool: impl Into<String>, presenter: Arc<dyn Presenter>) -> Self {
        self.custom.insert(tool.into(), presenter);
        self
    }

    /// The card of a call without a result.
    pub fn call(&self, tool: &str, args: &Value) -> Card {
        let builtin = || present_call(CardKind::for_tool(tool), tool, args);
        match self.custom.get(tool) {
            Some(presenter) => {
                catch_unwind(AssertUnwindSafe(|| presenter.present_call(tool, args)))
                    .unwrap_or_else(|_| present_call(CardKind::Generic, tool, args))
            }
            None => builtin(),
        }
    }

    /// The card of a call and its result.
    pub fn result(&self, tool: &str, args: &Value, result: &ToolResultRecord) -> Card {
        match self.custom.get(tool) {
            Some(presenter) => catch_unwind(AssertUnwindSafe(|| {
                presenter.present_result(tool, args, result)
            }))
            .unwrap_or_else(|_| present_result(CardKind::Generic, tool, args, result)),
            None => present_result(CardKind::for_tool(tool), tool, args, result),
        }
    }

    /// The card of a call as the log records it: with its result once committed. The
    /// arguments shown are the effective ones when a hook rewrote them. A program's binding
    /// calls are nested from its dispatch events alone; [`Presenters::record_in`] shows them
    /// from their own records.
    pub fn record(&self, record: &CallRecord) -> Card {
        self.record_in(record, &[])
    }

    /// The card of a call, with the cards of its binding calls built from their own records
    /// among `session` (effective arguments, policy notes, results), or from the dispatch
    /// events where a record is missing.
    pub fn record_in(&self, record: &CallRecord, session: &[CallRecord]) -> Card {
        let args = match &record.rewritten {
            Some(rewritten) => rewritten.effective.clone(),
            None => parse_arguments(&record.arguments_raw),
        };
        let mut card = match &record.result {
            Some(result) => self.result(&record.name, &args, result),
            None => self.call(&record.name, &args),
        };
        card.notes.extend(policy_notes(record));
        let children = self.dispatched(record, session);
        if let CardBody::CodeRun { sub_calls, .. } = &mut card.body {
            // The nested cards say all the list said, and more; only a binding whose card
            // has no outcome keeps its entry, which may hold the error it ended with.
            sub_calls.retain(|listed| {
                children.iter().any(|(call_id, child)| {
                    call_id.as_str() == listed.call_id && child.status == CardStatus::Pending
                }) || !children
                    .iter()
                    .any(|(call_id, _)| call_id.as_str() == listed.call_id)
            });
        }
        card.children = children.into_iter().map(|(_, child)| child).collect();
        card
    }

    /// The cards of a program's binding calls: from each one's own record where `session`
    /// has it, else from the dispatch events — what it was asked, and what it returned once
    /// it committed.
    fn dispatched(&self, record: &CallRecord, session: &[CallRecord]) -> Vec<(CallId, Card)> {
        // A binding call is recorded after its program: look from there, so a program whose
        // id a later answer reused never shows the other program's calls.
        let after = session
            .iter()
            .position(|candidate| std::ptr::eq(candidate, record))
            .map_or(session, |at| &session[at + 1..]);
        record
            .dispatches
            .iter()
            .filter_map(|dispatch| {
                if let Some(own) = after
                    .iter()
                    .find(|candidate| candidate.call_id == dispatch.call_id)
                {
                    return Some((dispatch.call_id.clone(), self.record_in(own, session)));
                }
                let started = dispatch.started.as_ref();
                let name = started.map(|started| started.name.as_str()).or_else(|| {
                    dispatch
                        .settled
                        .as_ref()
                        .map(|settled| settled.name.as_str())
                })?;
                let args = started.map_or(Value::Null, |started| started.arguments.clone());
                let card = match &dispatch.settled {
                    Some(settled) => self.result(name, &args, &settled.result),
                    None => self.call(name, &args),
                };
                Some((dispatch.call_id.clone(), card))
            })
            .collect()
    }
}

/// What policy did to a call, as the log records it.
fn policy_notes(record: &CallRecord) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(rewritten) = &record.rewritten {
        notes.push(format!(
            "arguments rewritten by {}: {}",
            rewritten.by, rewritten.reason
        ));
    }
    if let Some(asked) = &record.approval_asked {
        let answer = record
            .approval_decided
            .as_ref()
            .map(|decided| &decided.answer);
        notes.push(approval_note(&asked.reason, answer));
    }
    notes
}

/// The note a card carries for an approval: what was asked and how it was answered
/// (`None`: not answered).
pub fn approval_note(reason: &str, answer: Option<&ApprovalAnswer>) -> String {
    let answer = match answer {
        None => "no answer".to_owned(),
        Some(ApprovalAnswer::AllowedOnce) => "allowed once".to_owned(),
        Some(ApprovalAnswer::AllowedForSession { key }) => {
            format!("allowed for the session ({key})")
        }
        Some(ApprovalAnswer::Rejected { reason: None }) => "rejected".to_owned(),
        Some(ApprovalAnswer::Rejected {
            reason: Some(reason),
        }) => format!("rejected: {reason}"),
        Some(ApprovalAnswer::Cancelled) => "cancelled".to_owned(),
        Some(ApprovalAnswer::Expired) => "expired".to_owned(),
        Some(ApprovalAnswer::Unavailable) => "no one to ask".to_owned(),
    };
    format!("asked: {reason} → {answer}")
}

impl std::fmt::Debug for Presenters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut tools: Vec<&String> = self.custom.keys().collect();
        tools.sort();
        f.debug_struct("Presenters")
            .field("custom", &tools)
            .finish()
    }
}
