//! Bad input through the whole runtime (agent loop, pipeline, a JSONL log reopened after):
//! each case ends in a clear result or error, never a panic or a stack overflow, and leaves
//! a log that opens again with every call answered.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::path::Path;

use serde_json::json;
use toolrail_session_log::{
    ConversationItem, Event, EventData, SessionId, conversation, event::AssistantBlock,
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_testkit::Scenario;

/// One turn: the model sends `calls` (id, raw arguments) to `probe`, then ends.
fn one_message(calls: Vec<(String, String)>) -> Scenario {
    let calls: Vec<serde_json::Value> = calls
        .into_iter()
        .map(|(id, arguments)| json!({"id": id, "name": "probe", "arguments": arguments}))
        .collect();
    Scenario::from_json(
        &json!({
            "config": {"tools": {"enabled": ["probe"]}, "store": {"durability": "none"},
                       "permissions": {"preset": "full-auto"}},
            "turns": [{"user": "go", "model": [
                {"tool_calls": calls, "stop_reason": "tool_use"},
                {"text": "done", "stop_reason": "end_turn"}
            ]}]
        })
        .to_string(),
    )
    .unwrap()
}

/// The log reopened from disk; every call has exactly one result.
fn reopened(dir: &Path, calls: usize) -> Vec<Event> {
    let store = JsonlStore::new(dir, Durability::Strict).unwrap();
    let events = store.open(&SessionId::new("scenario")).unwrap().events;
    let results = events
        .iter()
        .filter(|event| matches!(event.data, EventData::ToolResult(_)))
        .count();
    assert_eq!(results, calls);
    events
}

fn result_of<'a>(events: &'a [Event], id: &str) -> &'a toolrail_session_log::ToolResultRecord {
    events
        .iter()
        .find_map(|event| match (&event.data, &event.call_id) {
            (EventData::ToolResult(record), Some(call)) if call.as_str() == id => Some(&**record),
            _ => None,
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_of_ten_mebibytes_are_logged_whole_and_an_oversized_result_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(10 << 20);
    let raw = json!({"value": big}).to_string();
    one_message(vec![("c1".to_owned(), raw.clone())])
        .run(dir.path())
        .await
        .unwrap();
    let events = reopened(dir.path(), 1);
    // The raw text the model sent is in the log as sent (spilled beside it by digest).
    let logged = events
        .iter()
        .find_map(|event| match &event.data {
            EventData::ToolCall(call) => Some(call.arguments_raw.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(logged.len(), raw.len());
    assert!(
        logged == raw,
        "the arguments changed on their way to the log"
    );
    // The probe hands the 10 MiB value back: over the result cap, a clear error says so.
    let record = result_of(&events, "c1");
    let text = record.content[0].as_text().unwrap();
    assert!(
        record.is_error() && text.contains("over the cap of 1048576 bytes"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_a_hundred_thousand_deep_is_a_syntax_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let object = format!("{{\"value\": {deep}}}");
    one_message(vec![("c1".to_owned(), deep), ("c2".to_owned(), object)])
        .run(dir.path())
        .await
        .unwrap();
    let events = reopened(dir.path(), 2);
    for id in ["c1", "c2"] {
        let record = result_of(&events, id);
        assert_eq!(
            record.error_code().map(ToString::to_string).as_deref(),
            Some("SYNTAX_ERROR"),
            "{id}: {:?}",
            record.content
        );
        let text = record.content[0].as_text().unwrap();
        assert!(text.contains("recursion limit"), "{id}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_calls_in_one_message_are_all_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let calls: Vec<(String, String)> = (0..10_000)
        .map(|n| (format!("c{n}"), "{}".to_owned()))
        .collect();
    one_message(calls).run(dir.path()).await.unwrap();
    let events = reopened(dir.path(), 10_000);
    let order: Vec<String> = events
        .iter()
        .filter(|event| matches!(event.data, EventData::ToolResult(_)))
        .map(|event| event.call_id.as_ref().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (0..10_000).map(|n| format!("c{n}")).collect();
    assert_eq!(order, expected, "results are committed in model order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_call_ids_are_refused_under_ids_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    // The last repeat's arguments are not even JSON: it is refused for its id before they
    // are parsed.
    let calls = [("a", "{}"), ("a", "{}"), ("b", "{}"), ("a", "{")]
        .iter()
        .map(|(id, arguments)| ((*id).to_owned(), (*arguments).to_owned()))
        .collect();
    one_message(calls).run(dir.path()).await.unwrap();
    let events = reopened(dir.path(), 4);

    // Each call has its own id everywhere: results, starts, and the next request.
    let results: Vec<(String, Option<String>)> = events
        .iter()
        .filter_map(|event| match (&event.data, &event.call_id) {
            (EventData::ToolResult(record), Some(call)) => Some((
                call.to_string(),
                record.error_code().map(|code| code.to_string()),
            )),
            _ => None,
        })
        .collect();
    let invalid = Some("INVALID_ARGS".to_owned());
    assert_eq!(
        results,
        [
            ("a".to_owned(), None),
            ("a-dup2".to_owned(), invalid.clone()),
            ("b".to_owned(), None),
            ("a-dup3".to_owned(), invalid),
        ]
    );
    let started: Vec<String> = events
        .iter()
        .filter(|event| matches!(event.data, EventData::ToolStart(_)))
        .map(|event| event.call_id.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(started, ["a", "b"], "a refused repeat never starts");
    let of_repeat: Vec<&str> = events
        .iter()
        .filter(|event| {
            event
                .call_id
                .as_ref()
                .is_some_and(|id| id.as_str() == "a-dup3")
        })
        .map(|event| event.data.kind())
        .collect();
    assert_eq!(of_repeat, ["tool/call", "tool/result"]);
    let text = result_of(&events, "a-dup2").content[0].as_text().unwrap();
    assert!(
        text.contains("`a` was already used") && text.contains("recorded as `a-dup2`"),
        "{text}"
    );

    // The message is logged as the model sent it; the conversation rebuilt from the log
    // (what a resumed session sends) answers each call under the id the message gives it.
    let items = conversation(&events);
    let message = items
        .iter()
        .find_map(|item| match item {
            ConversationItem::Assistant(message) if !message.tool_calls().is_empty() => {
                Some(message)
            }
            _ => None,
        })
        .unwrap();
    let sent: Vec<String> = message
        .blocks
        .iter()
        .filter_map(|block| match block {
            AssistantBlock::ToolCall { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(sent, ["a", "a", "b", "a"], "the message is logged as sent");
    let asked: Vec<String> = message
        .tool_calls()
        .into_iter()
        .map(|call| call.call_id.to_string())
        .collect();
    let answered: Vec<String> = items
        .iter()
        .filter_map(|item| match item {
            ConversationItem::ToolResult { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(asked, answered);
}
