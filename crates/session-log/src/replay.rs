//! Replay: what the model and the UI see, derived from the events alone (DESIGN §6). Both
//! derivations are pure functions of the log, so a live session and a replayed one show the
//! same conversation and the same cards.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::content::ContentBlock;
use crate::event::{
    ApprovalAsked, ApprovalDecided, ArgsRewritten, AssistantMessage, CodeDispatch,
    CodeDispatchStart, ContextMessage, Event, EventData, RecoveryRepaired, TurnEnd, TurnStart,
};
use crate::ids::{CallId, StepId, TurnId};
use crate::result::{ToolResultRecord, ToolSource};
use crate::time::Timestamp;

/// One item of the conversation sent to the model.
#[derive(Clone, Debug, PartialEq)]
pub enum ConversationItem {
    /// The user's message of a turn (`turn/start`).
    User(Vec<ContentBlock>),
    /// An assistant message as logged, calls under repeated ids included.
    Assistant(AssistantMessage),
    /// The answer to one tool call of the preceding assistant message.
    ToolResult {
        /// The call answered, under its id from [`AssistantMessage::tool_calls`].
        call_id: CallId,
        /// The call's committed result.
        record: Arc<ToolResultRecord>,
    },
    /// A message a hook added; it comes after every result of its batch.
    Context {
        /// Who added it: a hook's name, or `user` for a message sent while the batch ran.
        source: String,
        /// What the model reads.
        content: Vec<ContentBlock>,
    },
}

/// The model conversation: user turns, assistant messages, then each tool call of a message
/// answered by its result in call order, then the batch's context messages. A call without a
/// result (a log that was not recovered) is left out; unknown kinds are ignored.
pub fn conversation(events: &[Event]) -> Vec<ConversationItem> {
    let mut items = Vec::new();
    let mut batch = Batch::default();
    for event in events {
        match event.data.narrative() {
            Some(Narrative::User(turn)) => {
                batch.flush(&mut items);
                items.push(ConversationItem::User(turn.user.clone()));
            }
            Some(Narrative::Assistant(message)) => {
                batch.flush(&mut items);
                items.push(ConversationItem::Assistant(message.clone()));
                batch.calls = message
                    .tool_calls()
                    .into_iter()
                    .map(|call| call.call_id)
                    .collect();
            }
            Some(Narrative::Result(record)) => {
                if let Some(call_id) = &event.call_id {
                    batch.results.insert(call_id.clone(), Arc::clone(record));
                }
            }
            Some(Narrative::Context(message)) => {
                batch.context.push(ConversationItem::Context {
                    source: message.source.clone(),
                    content: message.content.clone(),
                });
            }
            Some(Narrative::TurnEnd(_) | Narrative::Recovery(_)) | None => {}
        }
    }
    batch.flush(&mut items);
    items
}

/// An event that tells the session's story: what the user and the model said, the results
/// the model read, and how turns ended. The rest of the log is the calls' bookkeeping,
/// which readers reach through the call records.
#[derive(Clone, Copy, Debug)]
pub enum Narrative<'a> {
    /// A user turn began (`turn/start`).
    User(&'a TurnStart),
    /// The model answered (`assistant/message`).
    Assistant(&'a AssistantMessage),
    /// A call's committed result (`tool/result`).
    Result(&'a Arc<ToolResultRecord>),
    /// A hook added a message (`context/message`).
    Context(&'a ContextMessage),
    /// A turn ended (`turn/end`).
    TurnEnd(&'a TurnEnd),
    /// Recovery answered calls a crash had left open (`recovery/repaired`).
    Recovery(&'a RecoveryRepaired),
}

/// The results and context messages of the latest assistant message's calls.
#[derive(Default)]
struct Batch {
    calls: Vec<CallId>,
    results: BTreeMap<CallId, Arc<ToolResultRecord>>,
    context: Vec<ConversationItem>,
}

impl Batch {
    fn flush(&mut self, items: &mut Vec<ConversationItem>) {
        for call_id in self.calls.drain(..) {
            if let Some(record) = self.results.remove(&call_id) {
                items.push(ConversationItem::ToolResult { call_id, record });
            }
        }
        self.results.clear();
        items.append(&mut self.context);
    }
}

/// Everything the log knows about one call, for presenters and timelines.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// The call's id: unique in its message, or `<parent>:code:<n>` for a code-mode
    /// sub-call.
    pub call_id: CallId,
    /// The user turn the call was made in.
    pub turn: Option<TurnId>,
    /// The model request that made the call.
    pub step: Option<StepId>,
    /// Position among its message's calls, from 0 (a sub-call: among its program's calls).
    pub index: u32,
    /// The tool's name as the model sent it.
    pub name: String,
    /// The argument text exactly as the model sent it.
    pub arguments_raw: String,
    /// Where the tool came from; `None` until `tool/call` names it, and when the tool set
    /// had no such tool.
    pub source: Option<ToolSource>,
    /// The tool's version; `None` when `source` is.
    pub version: Option<Arc<str>>,
    /// When `tool/call` was logged (for a call that never got one, when its message was).
    pub recorded_at: Timestamp,
    /// The arguments a pre-execute hook put in place of the model's, if one did.
    pub rewritten: Option<ArgsRewritten>,
    /// The approval question, if the call needed one.
    pub approval_asked: Option<ApprovalAsked>,
    /// The approval's answer, once logged.
    pub approval_decided: Option<ApprovalDecided>,
    /// When `tool/start` was logged; `None` when the body never started.
    pub started_at: Option<Timestamp>,
    /// The committed result; `None` when the log has none (it was not recovered).
    pub result: Option<Arc<ToolResultRecord>>,
    /// When `tool/result` was logged.
    pub committed_at: Option<Timestamp>,
    /// Code-mode sub-calls: what the program asked, and what each one returned.
    pub dispatches: Vec<Dispatch>,
    /// Other events that name the call: those the tool recorded itself (`fs/observed`,
    /// `fs/write-intent`, …) and context messages hooks added for it.
    pub own_events: Vec<Event>,
}

impl CallRecord {
    /// A record with nothing but what the call was.
    fn new(call_id: &CallId, event: &Event, index: u32, name: &str, arguments_raw: &str) -> Self {
        Self {
            call_id: call_id.clone(),
            turn: event.turn,
            step: event.step,
            index,
            name: name.to_owned(),
            arguments_raw: arguments_raw.to_owned(),
            source: None,
            version: None,
            recorded_at: event.ts,
            rewritten: None,
            approval_asked: None,
            approval_decided: None,
            started_at: None,
            result: None,
            committed_at: None,
            dispatches: Vec::new(),
            own_events: Vec::new(),
        }
    }
}

/// One code-mode sub-call of a `run_code` call.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    /// The sub-call's id, `<parent>:code:<n>` with `n` from 1.
    pub call_id: CallId,
    /// What the program asked (`tool/code-dispatch-start`), once logged.
    pub started: Option<CodeDispatchStart>,
    /// What the sub-call returned (`tool/code-dispatch`); `None` while it has no result, or
    /// when its result could not be recorded.
    pub settled: Option<CodeDispatch>,
}

/// One record per tool call the model made (from its assistant message, completed by the
/// call's `tool/call`) or the pipeline recorded, in order.
pub fn call_records(events: &[Event]) -> Vec<CallRecord> {
    let mut records: Vec<CallRecord> = Vec::new();
    let mut by_id: BTreeMap<CallId, usize> = BTreeMap::new();
    // Calls seen in an assistant message whose `tool/call` has not come yet: every call the
    // model made gets a record, even one a crash kept from being recorded.
    let mut awaiting_record: BTreeMap<CallId, usize> = BTreeMap::new();
    for event in events {
        if let EventData::AssistantMessage(message) = &event.data {
            for (index, call) in message.tool_calls().into_iter().enumerate() {
                by_id.insert(call.call_id.clone(), records.len());
                awaiting_record.insert(call.call_id.clone(), records.len());
                records.push(CallRecord::new(
                    &call.call_id,
                    event,
                    u32::try_from(index).unwrap_or(u32::MAX),
                    call.name,
                    call.arguments_raw,
                ));
            }
            continue;
        }
        let Some(call_id) = &event.call_id else {
            continue;
        };
        if let EventData::ToolCall(call) = &event.data {
            let record = CallRecord {
                source: call.source.clone(),
                version: call.version.clone(),
                ..CallRecord::new(call_id, event, call.index, &call.name, &call.arguments_raw)
            };
            match awaiting_record
                .remove(call_id)
                .and_then(|at| records.get_mut(at))
            {
                Some(seeded) => *seeded = record,
                None => {
                    by_id.insert(call_id.clone(), records.len());
                    records.push(record);
                }
            }
            continue;
        }
        // A code-mode sub-call's events belong to its parent's record.
        let parent = if let EventData::CodeDispatchStart(start) = &event.data {
            Some(&start.parent_call_id)
        } else if let EventData::CodeDispatch(settled) = &event.data {
            Some(&settled.parent_call_id)
        } else {
            None
        };
        if let Some(parent) = parent {
            if let Some(record) = by_id.get(parent).and_then(|&at| records.get_mut(at)) {
                attach_dispatch(record, call_id, &event.data);
            }
            continue;
        }
        let Some(record) = by_id.get(call_id).and_then(|&at| records.get_mut(at)) else {
            continue;
        };
        // Pipeline facts fill their slots; whatever else names the call is the tool's own.
        if let EventData::ArgsRewritten(rewritten) = &event.data {
            record.rewritten = Some(rewritten.clone());
        } else if let EventData::ApprovalAsked(asked) = &event.data {
            record.approval_asked = Some(asked.clone());
        } else if let EventData::ApprovalDecided(decided) = &event.data {
            record.approval_decided = Some(decided.clone());
        } else if let EventData::ToolStart(_) = &event.data {
            record.started_at = Some(event.ts);
        } else if let EventData::ToolResult(result) = &event.data {
            record.result = Some(Arc::clone(result));
            record.committed_at = Some(event.ts);
        } else {
            record.own_events.push(event.clone());
        }
    }
    records
}

fn attach_dispatch(record: &mut CallRecord, call_id: &CallId, data: &EventData) {
    let at = match record
        .dispatches
        .iter()
        .position(|dispatch| &dispatch.call_id == call_id)
    {
        Some(at) => at,
        None => {
            record.dispatches.push(Dispatch {
                call_id: call_id.clone(),
                started: None,
                settled: None,
            });
            record.dispatches.len() - 1
        }
    };
    if let Some(dispatch) = record.dispatches.get_mut(at) {
        if let EventData::CodeDispatchStart(start) = data {
            dispatch.started = Some(start.clone());
        } else if let EventData::CodeDispatch(settled) = data {
            dispatch.settled = Some(settled.as_ref().clone());
        }
    }
}
