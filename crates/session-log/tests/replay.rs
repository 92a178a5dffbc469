//! Replay derives the model conversation and per-call records from events alone.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use serde_json::json;
use toolrail_session_log::event::*;
use toolrail_session_log::*;

fn event(seq: u64, call: Option<&str>, data: EventData) -> Event {
    Event {
        seq,
        ts: Timestamp::from_millis(1_796_060_909_000 + seq),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    }
}

fn text_result(text: &str) -> EventData {
    EventData::ToolResult(Arc::new(ToolResultRecord::success(vec![
        ContentBlock::text(text),
    ])))
}

fn session() -> Vec<Event> {
    let calls = ["c1", "c2"].map(|id| AssistantBlock::ToolCall {
        call_id: CallId::from(id),
        name: "read".into(),
        arguments_raw: "{}".into(),
    });
    let mut blocks = vec![AssistantBlock::Text {
        text: "reading two files".into(),
    }];
    blocks.extend(calls);
    let call = |name: &str| {
        EventData::ToolCall(ToolCall {
            index: 0,
            name: name.into(),
            arguments_raw: "{}".into(),
            source: Some(ToolSource::Builtin),
            version: Some("1".into()),
            trace: None,
        })
    };
    let parts = vec![
        (
            None,
            EventData::TurnStart(TurnStart {
                user: vec![ContentBlock::text("read a and b")],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        (
            None,
            EventData::AssistantMessage(AssistantMessage {
                blocks,
                stop_reason: StopReason::ToolCalls,
            }),
        ),
        (Some("c1"), call("read")),
        (
            Some("c1"),
            EventData::ArgsRewritten(ArgsRewritten {
                original: json!({}),
                effective: json!({"path": "a"}),
                by: "hook".into(),
                reason: "r".into(),
            }),
        ),
        (Some("c2"), call("read")),
        (Some("c2"), EventData::ToolStart(ToolStart::default())),
        (Some("c1"), EventData::ToolStart(ToolStart::default())),
        (
            Some("c1"),
            EventData::FsObserved(FsObserved {
                path: "a".into(),
                digest: "d1".into(),
            }),
        ),
        (Some("c2"), text_result("content of b")),
        (Some("c1"), text_result("content of a")),
        (
            Some("c1"),
            EventData::ContextMessage(ContextMessage {
                source: "hook".into(),
                content: vec![ContentBlock::text("note")],
            }),
        ),
        (
            None,
            EventData::from_parts("x-future/kind", json!({})).unwrap(),
        ),
        (
            None,
            EventData::AssistantMessage(AssistantMessage {
                blocks: vec![AssistantBlock::Text {
                    text: "done".into(),
                }],
                stop_reason: StopReason::EndTurn,
            }),
        ),
        (
            None,
            EventData::TurnEnd(TurnEnd {
                kind: TurnEndKind::Completed,
                message: None,
            }),
        ),
    ];
    parts
        .into_iter()
        .enumerate()
        .map(|(at, (call, data))| event(at as u64 + 1, call, data))
        .collect()
}

fn describe(items: &[ConversationItem]) -> Vec<String> {
    items
        .iter()
        .map(|item| match item {
            ConversationItem::User(_) => "user".to_owned(),
            ConversationItem::Assistant(message) => {
                format!("assistant({} blocks)", message.blocks.len())
            }
            ConversationItem::ToolResult { call_id, record } => {
                format!("result {call_id}: {}", record.content[0].as_text().unwrap())
            }
            ConversationItem::Context { source, .. } => format!("context from {source}"),
        })
        .collect()
}

#[test]
fn results_answer_calls_in_call_order_and_context_follows_the_batch() {
    assert_eq!(
        describe(&conversation(&session())),
        [
            "user",
            "assistant(3 blocks)",
            "result c1: content of a",
            "result c2: content of b",
            "context from hook",
            "assistant(1 blocks)",
        ]
    );
}

#[test]
fn a_call_without_a_result_is_left_out_until_recovery_answers_it() {
    let mut events = session();
    events.retain(|event| {
        !(event.call_id.as_ref().map(CallId::as_str) == Some("c2")
            && event.data.kind() == "tool/result")
    });
    let described = describe(&conversation(&events));
    assert!(
        !described.iter().any(|line| line.starts_with("result c2")),
        "{described:?}"
    );
}

#[test]
fn call_records_collect_every_fact_of_a_call() {
    let records = call_records(&session());
    assert_eq!(
        records
            .iter()
            .map(|record| record.call_id.as_str())
            .collect::<Vec<_>>(),
        ["c1", "c2"]
    );
    let c1 = &records[0];
    assert_eq!(
        c1.rewritten.as_ref().map(|r| r.effective.clone()),
        Some(json!({"path": "a"}))
    );
    assert_eq!(
        c1.started_at,
        Some(Timestamp::from_millis(1_796_060_909_007))
    );
    assert_eq!(
        c1.committed_at,
        Some(Timestamp::from_millis(1_796_060_909_010))
    );
    assert_eq!(
        c1.result.as_ref().unwrap().content[0].as_text(),
        Some("content of a")
    );
    assert_eq!(
        c1.own_events
            .iter()
            .map(|e| e.data.kind())
            .collect::<Vec<_>>(),
        ["fs/observed", "context/message"]
    );
    assert_eq!(c1.source, Some(ToolSource::Builtin));
}

#[test]
fn code_mode_sub_calls_belong_to_their_parent_with_their_values() {
    let parent = CallId::from("c1");
    let sub = parent.code_sub_call(1);
    let events = vec![
        event(
            1,
            Some("c1"),
            EventData::ToolCall(ToolCall {
                index: 0,
                name: "run_code".into(),
                arguments_raw: "{}".into(),
                source: None,
                version: None,
                trace: None,
            }),
        ),
        event(
            2,
            Some(sub.as_str()),
            EventData::CodeDispatchStart(CodeDispatchStart {
                parent_call_id: parent.clone(),
                name: "read".into(),
                arguments: json!({"path": "a"}),
            }),
        ),
        event(
            3,
            Some(sub.as_str()),
            EventData::CodeDispatch(Box::new(CodeDispatch {
                parent_call_id: parent.clone(),
                name: "read".into(),
                result: ToolResultRecord {
                    value: Some(json!({"lines": 3})),
                    ..ToolResultRecord::success(vec![])
                },
            })),
        ),
    ];
    let records = call_records(&events);
    assert_eq!(records.len(), 1);
    let dispatch = &records[0].dispatches[0];
    assert_eq!(dispatch.call_id.as_str(), "c1:code:1");
    assert_eq!(
        dispatch.started.as_ref().unwrap().arguments,
        json!({"path": "a"})
    );
    assert_eq!(
        dispatch.settled.as_ref().unwrap().result.value,
        Some(json!({"lines": 3})),
        "intermediate values replay"
    );
}

#[tokio::test]
async fn the_conversation_from_stored_lines_equals_the_one_from_memory() {
    // Each event through its stored form (one JSON line), as a store writes and reads it;
    // the stores' own round trip is `toolrail-session-store`'s contract.
    let live = session();
    let lines: Vec<String> = live
        .iter()
        .map(|event| serde_json::to_string(event).unwrap())
        .collect();
    let read: Vec<Event> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(conversation(&read), conversation(&live));
    assert_eq!(call_records(&read), call_records(&live));
}
