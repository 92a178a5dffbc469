//! A session as a reader follows it: what the user said, what the assistant said, each
//! batch of calls (in model order), context messages, recovery notes and turn ends — the
//! one walk over the events that the page and the CLI's replay both render.

use std::collections::{HashMap, HashSet, VecDeque};

use toolrail_session_log::{
    CallRecord, ContentBlock, Event, event::AssistantBlock, replay::Narrative,
};

/// One thing to show, in log order.
#[derive(Debug)]
pub enum SessionItem<'a> {
    /// What the user said to start a turn: its text blocks, joined by newlines.
    User(String),
    /// One text block of an assistant message.
    Assistant(String),
    /// One thinking block of an assistant message (the page folds it, the CLI's replay
    /// leaves it out).
    Thinking(String),
    /// The calls of one assistant message, in model order.
    Batch(Vec<&'a CallRecord>),
    /// A message a hook added to the conversation.
    Context {
        /// The hook that added it.
        source: String,
        /// Its text blocks, joined by newlines.
        text: String,
    },
    /// Recovery repaired the log after a crash.
    Recovery {
        /// What recovery says it did.
        note: String,
        /// How many calls it gave a synthetic result.
        calls: usize,
    },
    /// A turn ended.
    TurnEnd {
        /// How, as the log spells it: `completed`, `aborted`, `error`, `interrupted`,
        /// `max_steps`, `truncated`.
        kind: String,
        /// Why, when the loop said: an error's text, `the step limit was reached`, `a tool
        /// concluded the turn`; `None` when the model ended the turn.
        message: Option<String>,
    },
}

/// The items of `events`, whose call records are `records`. Calls no assistant message
/// named (run outside the agent loop) come last, as one batch; code-mode sub-calls do not
/// (their program's card lists them).
pub fn session_items<'a>(events: &[Event], records: &'a [CallRecord]) -> Vec<SessionItem<'a>> {
    // Records in log order per id: a model may reuse an id in a later answer, and each
    // message takes the next record under it.
    let mut by_id: HashMap<&str, VecDeque<usize>> = HashMap::new();
    for (at, record) in records.iter().enumerate() {
        by_id
            .entry(record.call_id.as_str())
            .or_default()
            .push_back(at);
    }
    let mut shown = vec![false; records.len()];
    let mut items = Vec::new();
    for event in events {
        match event.data.narrative() {
            Some(Narrative::User(turn)) => items.push(SessionItem::User(text_of(&turn.user))),
            Some(Narrative::Assistant(message)) => {
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
                            let at = distinct.next().and_then(|call| {
                                by_id
                                    .get_mut(call.call_id.as_str())
                                    .and_then(VecDeque::pop_front)
                            });
                            if let Some(at) = at {
                                shown[at] = true;
                                calls.push(&records[at]);
                            }
                        }
                    }
                }
                if !calls.is_empty() {
                    items.push(SessionItem::Batch(calls));
                }
            }
            Some(Narrative::Context(message)) => items.push(SessionItem::Context {
                source: message.source.clone(),
                text: text_of(&message.content),
            }),
            Some(Narrative::Recovery(repaired)) => items.push(SessionItem::Recovery {
                note: repaired.note.clone(),
                calls: repaired.calls.len(),
            }),
            Some(Narrative::TurnEnd(end)) => items.push(SessionItem::TurnEnd {
                kind: serde_json::to_value(end.kind)
                    .ok()
                    .and_then(|kind| kind.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                message: end.message.clone(),
            }),
            // Shown through the call records.
            Some(Narrative::Result(_)) | None => {}
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
        .zip(&shown)
        .filter(|(record, shown)| !**shown && !dispatched.contains(record.call_id.as_str()))
        .map(|(record, _)| record)
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
        CallId, ContentBlock, EventData, Timestamp, ToolResultRecord, TurnId, call_records,
        event::{AssistantMessage, StopReason, ToolCall, TurnStart},
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

    fn block(id: &str, raw: &str) -> AssistantBlock {
        AssistantBlock::ToolCall {
            call_id: CallId::new(id),
            name: "probe".to_owned(),
            arguments_raw: raw.to_owned(),
        }
    }

    /// A session of one turn whose model answers are `answers`, each a message with its
    /// calls as `(id sent, raw arguments)`; every call is recorded and answered under the id
    /// the message gives it.
    fn session(answers: &[&[(&str, &str)]]) -> Vec<Event> {
        let mut events = vec![event(
            1,
            None,
            EventData::TurnStart(TurnStart {
                user: vec![],
                trace: None,
                caller: None,
                client: false,
            }),
        )];
        let mut push = |call_id: Option<&str>, data: EventData| {
            let seq = u64::try_from(events.len()).unwrap() + 1;
            events.push(event(seq, call_id, data));
        };
        for answer in answers {
            let message = AssistantMessage {
                blocks: answer.iter().map(|(id, raw)| block(id, raw)).collect(),
                stop_reason: StopReason::ToolCalls,
            };
            let calls: Vec<(String, String)> = message
                .tool_calls()
                .into_iter()
                .map(|call| (call.call_id.to_string(), call.arguments_raw.to_owned()))
                .collect();
            push(None, EventData::AssistantMessage(message));
            for (index, (id, raw)) in calls.iter().enumerate() {
                let call = ToolCall {
                    index: u32::try_from(index).unwrap(),
                    name: "probe".to_owned(),
                    arguments_raw: raw.clone(),
                    source: None,
                    version: None,
                    trace: None,
                };
                push(Some(id), EventData::ToolCall(call));
                let result = ToolResultRecord::success(vec![ContentBlock::text(raw)]);
                push(Some(id), EventData::ToolResult(std::sync::Arc::new(result)));
            }
        }
        events
    }

    /// Each batch as `(call id, raw arguments)` of its records.
    fn batches(events: &[Event]) -> Vec<Vec<(String, String)>> {
        let records = call_records(events);
        session_items(events, &records)
            .iter()
            .filter_map(|item| match item {
                SessionItem::Batch(calls) => Some(
                    calls
                        .iter()
                        .map(|record| (record.call_id.to_string(), record.arguments_raw.clone()))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(id, raw)| ((*id).to_owned(), (*raw).to_owned()))
            .collect()
    }

    /// The model sent `a` twice in one message: one batch, each call once.
    #[test]
    fn a_repeated_call_id_shows_each_call_once() {
        let events = session(&[&[("a", "1"), ("a", "2")]]);
        assert_eq!(batches(&events), [pairs(&[("a", "1"), ("a-dup2", "2")])]);
    }

    /// The model reused `c1` in its next answer: each message shows its own call.
    #[test]
    fn an_id_reused_in_a_later_answer_shows_each_call_in_its_batch() {
        let events = session(&[&[("c1", "first")], &[("c1", "second")]]);
        assert_eq!(
            batches(&events),
            [pairs(&[("c1", "first")]), pairs(&[("c1", "second")])]
        );
    }
}
