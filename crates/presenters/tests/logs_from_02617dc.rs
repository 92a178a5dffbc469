//! Logs recorded before details were typed (at commit 02617dc) replay to the cards and the
//! conversation that commit showed for them. The fixtures in `tests/fixtures/02617dc/` were
//! written by that commit's `toolrail demo`, its `toolrail run --scenario more.scenario.json`
//! and a `run_code` program (how-code-was-made.rs.txt); each `*.cards.json` is that
//! commit's `toolrail replay --json`, each `*.conversation.json` its `conversation()`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use serde_json::{Value, json};
use toolrail_presenters::{Presenters, SessionItem, Summary, session_items};
use toolrail_session_log::{ConversationItem, Event, call_records, conversation};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/02617dc/{name}"))
}

fn events(log: &str) -> Vec<Event> {
    std::fs::read_to_string(fixture(&format!("{log}.jsonl")))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn expected(log: &str, what: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(&format!("{log}.{what}.json"))).unwrap())
        .unwrap()
}

/// The conversation as the dump at 02617dc wrote it: what the model is sent.
fn conversation_of(events: &[Event]) -> Value {
    conversation(events)
        .into_iter()
        .map(|item| match item {
            ConversationItem::User(blocks) => json!({"user": blocks}),
            ConversationItem::Assistant(message) => json!({"assistant": message}),
            ConversationItem::ToolResult { call_id, record } => json!({"tool_result": {
                "call_id": call_id.as_str(),
                "is_error": record.is_error(),
                "code": record.error_code().map(|code| code.as_str().to_owned()),
                "text": record.text(),
            }}),
            ConversationItem::Context { source, content } => {
                json!({"context": {"source": source, "content": content}})
            }
        })
        .collect()
}

fn replays_as_it_did(log: &str) {
    let events = events(log);
    let records = call_records(&events);
    let presenters = Presenters::new();
    let cards: Vec<_> = session_items(&events, &records)
        .into_iter()
        .flat_map(|item| {
            if let SessionItem::Batch(calls) = item {
                calls
            } else {
                Vec::new()
            }
        })
        .map(|record| presenters.record_in(record, &records))
        .collect();
    let then = expected(log, "cards");
    assert_eq!(
        serde_json::to_value(&cards).unwrap(),
        then["cards"],
        "{log}: cards"
    );
    // The summary gained one count after 02617dc (sandbox refusals, none in these logs).
    let mut summary = serde_json::to_value(Summary::of(&records)).unwrap();
    let refusals = summary.as_object_mut().unwrap().remove("sandbox_refusals");
    assert_eq!(refusals, Some(json!(0)), "{log}");
    assert_eq!(summary, then["summary"], "{log}: summary");
    assert_eq!(
        conversation_of(&events),
        expected(log, "conversation"),
        "{log}: conversation"
    );
}

#[test]
fn the_demo_log_replays_to_the_same_cards_and_conversation() {
    replays_as_it_did("demo");
}

#[test]
fn questions_writes_reads_failures_and_bad_arguments_replay_the_same() {
    replays_as_it_did("more");
}

#[test]
fn a_program_and_its_binding_calls_replay_the_same() {
    replays_as_it_did("code");
}

#[test]
fn the_fixtures_hold_every_shipped_shape_of_details() {
    let kinds: std::collections::BTreeSet<String> = ["demo", "more", "code"]
        .into_iter()
        .flat_map(events)
        .filter_map(|event| {
            let toolrail_session_log::EventData::ToolResult(record) = event.data else {
                return None;
            };
            record
                .details
                .as_ref()
                .and_then(|d| d.kind().map(str::to_owned))
        })
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["code-run", "diff", "read", "search", "terminal"]
    );
}
