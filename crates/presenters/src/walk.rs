//! A session as a reader follows it: what the user said, what the assistant said, each
//! batch of calls (in model order), context messages, recovery notes and turn ends — the
//! one walk over the events that the page and the CLI's replay both render.

use std::collections::{HashMap, HashSet};

use toolrail_session_log::{AssistantBlock, CallRecord, ContentBlock, Event, EventData};

/// One thing to show, in log order.
#[derive(Debug)]
pub enum SessionItem<'a> {
    User(String),
    Assistant(String),
    Thinking(String),
    /// The calls of one assistant message, in model order.
    Batch(Vec<&'a CallRecord>),
    Context {
        source: String,
        text: String,
    },
    Recovery {
        note: String,
        calls: usize,
    },
    TurnEnd {
        kind: String,
        message: Option<String>,
    },
}

/// The items of `events`, whose call records are `records`. Calls no assistant message
/// named (run outside the agent loop) come last, as one batch; code-mode sub-calls do not
/// (their program's card lists them).
pub fn session_items<'a>(events: &[Event], records: &'a [CallRecord]) -> Vec<SessionItem<'a>> {
    let by_id: HashMap<&str, &CallRecord> = records
        .iter()
        .map(|record| (record.call_id.as_str(), record))
        .collect();
    let mut shown: HashSet<&str> = HashSet::new();
    let mut items = Vec::new();
    for event in events {
        match &event.data {
            EventData::TurnStart(turn) => items.push(SessionItem::User(text_of(&turn.user))),
            EventData::AssistantMessage(message) => {
                let mut calls = Vec::new();
                // The calls under their distinct ids, the ones their records have.
                let mut distinct = message.tool_calls().into_iter();
                for block in &message.blocks {
                    match block {
                        AssistantBlock::Text { text } => {
                            items.push(SessionItem::Assistant(text.clone()));
                        }
                        AssistantBlock::Thinking { text } => {
                            items.push(SessionItem::Thinking(text.clone()));
                        }
                        AssistantBlock::ToolCall { .. } => {
                            if let Some(record) = distinct
                                .next()
                                .and_then(|call| by_id.get(call.call_id.as_str()).copied())
                            {
                                shown.insert(record.call_id.as_str());
                                calls.push(record);
                            }
                        }
                    }
                }
                if !calls.is_empty() {
                    items.push(SessionItem::Batch(calls));
                }
            }
            EventData::ContextMessage(message) => items.push(SessionItem::Context {
                source: message.source.clone(),
                text: text_of(&message.content),
            }),
            EventData::RecoveryRepaired(repaired) => items.push(SessionItem::Recovery {
                note: repaired.note.clone(),
                calls: repaired.calls.len(),
            }),
            EventData::TurnEnd(end) => items.push(SessionItem::TurnEnd {
                kind: serde_json::to_value(end.kind)
                    .ok()
                    .and_then(|kind| kind.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                message: end.message.clone(),
            }),
            // Shown through the call records, or not shown at all.
            EventData::SessionStart(_)
            | EventData::StepStart(_)
            | EventData::ToolCall(_)
            | EventData::ArgsRewritten(_)
            | EventData::ApprovalAsked(_)
            | EventData::ApprovalDecided(_)
            | EventData::ToolStart(_)
            | EventData::CodeDispatchStart(_)
            | EventData::CodeDispatch(_)
            | EventData::ToolResult(_)
            | EventData::TodoWrite(_)
            | EventData::QuestionAsked(_)
            | EventData::QuestionAnswered(_)
            | EventData::FsObserved(_)
            | EventData::FsWriteIntent(_)
            | EventData::PlanMode(_)
            | EventData::ToolsLoaded(_)
            | EventData::StepEnd(_)
            | EventData::Unknown(_) => {}
        }
    }
    // A code-mode sub-call belongs to its program's card: the log names it as a dispatch
    // of its parent.
    let dispatched: HashSet<&str> = records
        .iter()
        .flat_map(|record| &record.dispatches)
        .map(|dispatch| dispatch.call_id.as_str())
        .collect();
    let rest: Vec<&CallRecord> = records
        .iter()
        .filter(|record| !shown.contains(record.call_id.as_str()))
        .filter(|record| !dispatched.contains(record.call_id.as_str()))
        .collect();
    if !rest.is_empty() {
        items.push(SessionItem::Batch(rest));
    }
    items
}

fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::wildcard_enum_match_arm)]

    use toolrail_session_log::{
        AssistantMessage, CallId, ContentBlock, StopReason, Timestamp, ToolCall, ToolResultRecord,
        TurnId, TurnStart, call_records,
    };

    use super::*;

    fn event(seq: u64, call_id: Option<&str>, data: EventData) -> Event {
        Event {
            seq,
            ts: Timestamp::from_millis(seq),
            turn: Some(TurnId(1)),
            step: None,
            call_id: call_id.map(CallId::new),
            data,
        }
    }

    /// The model sent `a` twice: the page shows two cards, each with its own record.
    #[test]
    fn a_repeated_call_id_shows_each_call_once() {
        let block = |text: &str| AssistantBlock::ToolCall {
            call_id: CallId::new("a"),
            name: "probe".to_owned(),
            arguments_raw: text.to_owned(),
        };
        let message = AssistantMessage {
            blocks: vec![block("{\"n\":1}"), block("{\"n\":2}")],
            stop_reason: StopReason::ToolCalls,
        };
        let mut events = vec![
            event(1, None, EventData::TurnStart(TurnStart { user: vec![] })),
            event(2, None, EventData::AssistantMessage(message)),
        ];
        for (at, (id, raw)) in [("a", "{\"n\":1}"), ("a-dup2", "{\"n\":2}")]
            .into_iter()
            .enumerate()
        {
            let index = u32::try_from(at).unwrap();
            let call = ToolCall {
                index,
                name: "probe".to_owned(),
                arguments_raw: raw.to_owned(),
                source: None,
                version: None,
            };
            let result = ToolResultRecord::success(vec![ContentBlock::text(id)]);
            events.push(event(
                3 + 2 * u64::from(index),
                Some(id),
                EventData::ToolCall(call),
            ));
            events.push(event(
                4 + 2 * u64::from(index),
                Some(id),
                EventData::ToolResult(std::sync::Arc::new(result)),
            ));
        }
        let records = call_records(&events);
        let items = session_items(&events, &records);
        let batches: Vec<Vec<(&str, &str)>> = items
            .iter()
            .filter_map(|item| match item {
                SessionItem::Batch(calls) => Some(
                    calls
                        .iter()
                        .map(|record| (record.call_id.as_str(), record.arguments_raw.as_str()))
                        .collect(),
                ),
                _ => None,
            })
            .collect();
        assert_eq!(
            batches,
            [vec![("a", "{\"n\":1}"), ("a-dup2", "{\"n\":2}")]],
            "one batch, each call once"
        );
    }
}
