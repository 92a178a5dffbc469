//! Presenters a tool registers: they show that tool's calls; one that panics is replaced by
//! the generic card for that call, never a crash.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use toolrail_session_log::details::Details;

use serde_json::{Value, json};
use toolrail_presenters::{
    Card, CardBody, CardKind, CardStatus, Presenter, Presenters, present_call,
};
use toolrail_session_log::{ContentBlock, ToolResultRecord};

struct Deploy;

impl Presenter for Deploy {
    fn present_call(&self, tool: &str, args: &Value) -> Card {
        Card {
            title: format!("deploy to {}", args["target"].as_str().unwrap_or("?")),
            ..present_call(CardKind::Generic, tool, args)
        }
    }

    fn present_result(&self, tool: &str, args: &Value, result: &ToolResultRecord) -> Card {
        Card {
            status: CardStatus::Succeeded,
            body: CardBody::Generic {
                arguments: String::new(),
                output: Some(result.text()),
            },
            ..self.present_call(tool, args)
        }
    }
}

struct Broken;

impl Presenter for Broken {
    fn present_call(&self, _tool: &str, _args: &Value) -> Card {
        panic!("broken presenter")
    }

    fn present_result(&self, _: &str, _: &Value, _: &ToolResultRecord) -> Card {
        panic!("broken presenter")
    }
}

#[test]
fn a_registered_presenter_shows_its_tool_and_a_broken_one_falls_back() {
    let presenters = Presenters::new()
        .register("deploy", Arc::new(Deploy))
        .register("bash", Arc::new(Broken));
    let args = json!({"target": "staging"});
    assert_eq!(presenters.call("deploy", &args).title, "deploy to staging");
    let result = ToolResultRecord::success(vec![ContentBlock::text("done")]);
    let card = presenters.result("deploy", &args, &result);
    assert_eq!(card.title, "deploy to staging");
    assert_eq!(card.status, CardStatus::Succeeded);
    // The broken presenter's tool still gets a card: the generic one.
    let card = presenters.result("bash", &json!({"command": "ls"}), &result);
    assert_eq!(card.kind, CardKind::Generic);
    assert_eq!(card.status, CardStatus::Succeeded);
    assert_eq!(presenters.call("bash", &json!({})).kind, CardKind::Generic);
    // Tools without a registered presenter keep their built-in card.
    assert_eq!(
        presenters.call("grep", &json!({"pattern": "x"})).kind,
        CardKind::Search
    );
}

/// One event of a log, as the JSONL store writes it.
fn event(seq: u64, kind: &str, call_id: &str, data: Value) -> toolrail_session_log::Event {
    serde_json::from_value(json!({
        "seq": seq, "ts": "2026-12-01T00:00:00Z", "kind": kind, "turn": 1, "step": 1,
        "call_id": call_id, "data": data,
    }))
    .unwrap()
}

#[test]
fn a_code_run_card_nests_a_card_for_each_binding_call_from_the_log() {
    let program = "const a = await read({path: 'src/lib.rs'});\nawait bash({command: 'cargo test', description: 't'});";
    let mut read = ToolResultRecord::success(vec![ContentBlock::text("1\tfn main() {}")]);
    read.details = Some(Details::from_value(
        json!({"type": "read", "path": "src/lib.rs", "start_line": 1,
        "end_line": 1, "total_lines": 1, "truncated": false}),
    ));
    let mut bash = ToolResultRecord::success(vec![ContentBlock::text("[exit code 101]")]);
    bash.details = Some(Details::from_value(
        json!({"type": "terminal", "command": "cargo test", "exit_code": 101,
        "timed_out": false, "output_tail": "test failed\n[exit code 101]", "truncated": false}),
    ));
    let mut run = ToolResultRecord::success(vec![ContentBlock::text(
        "(the program printed and returned nothing)",
    )]);
    run.details = Some(Details::from_value(
        json!({"type": "code-run", "language": "javascript", "program": program,
        "sub_calls": [
            {"call_id": "c1:code:1", "tool": "read", "error": null},
            {"call_id": "c1:code:2", "tool": "bash", "error": null},
            {"call_id": "c1:code:3", "tool": "grep", "error": "CODE_BINDING_LOST"}],
        "result": null}),
    ));
    let args = json!({"code": program, "description": "read and test"}).to_string();
    let mut events = vec![
        event(
            1,
            "tool/call",
            "c1",
            json!({"index": 0, "name": "run_code", "arguments_raw": args}),
        ),
        event(2, "tool/start", "c1", json!({})),
    ];
    let mut seq = 3;
    for (n, name, arguments, result) in [
        (1, "read", json!({"path": "src/lib.rs"}), Some(read)),
        (
            2,
            "bash",
            json!({"command": "cargo test", "description": "t"}),
            Some(bash),
        ),
        // Dispatched, never settled: shown as a pending card, not dropped.
        (3, "grep", json!({"pattern": "todo"}), None),
    ] {
        let id = format!("c1:code:{n}");
        events.push(event(
            seq,
            "tool/code-dispatch-start",
            &id,
            json!({"parent_call_id": "c1", "name": name, "arguments": arguments}),
        ));
        seq += 1;
        if let Some(result) = result {
            events.push(event(
                seq,
                "tool/code-dispatch",
                &id,
                json!({"parent_call_id": "c1", "name": name, "result": result}),
            ));
            seq += 1;
        }
    }
    events.push(event(
        seq,
        "tool/result",
        "c1",
        serde_json::to_value(&run).unwrap(),
    ));
    let records = toolrail_session_log::call_records(&events);
    let record = records
        .iter()
        .find(|record| record.call_id.as_str() == "c1")
        .unwrap();
    let card = Presenters::new().record(record);
    let kinds: Vec<(CardKind, String)> = card
        .children
        .iter()
        .map(|child| (child.kind, child.title.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (CardKind::Read, "read src/lib.rs".to_owned()),
            (CardKind::Terminal, "$ cargo test".to_owned()),
            (CardKind::Search, "grep todo".to_owned()),
        ]
    );
    assert_eq!(card.children[2].status, CardStatus::Pending);
    // With the sub-calls' own records, a nested card shows what ran: the arguments a hook
    // rewrote, and the note saying so.
    let rewritten = json!({"command": "cargo test -q", "description": "t"});
    let mut with_own = events.clone();
    with_own.extend([
        event(
            100,
            "tool/call",
            "c1:code:2",
            json!({"index": 1, "name": "bash",
            "arguments_raw": json!({"command": "cargo test", "description": "t"}).to_string()}),
        ),
        event(
            101,
            "tool/args-rewritten",
            "c1:code:2",
            json!({
            "original": {"command": "cargo test", "description": "t"},
            "effective": rewritten, "by": "quiet-tests", "reason": "quieter output"}),
        ),
    ]);
    let records = toolrail_session_log::call_records(&with_own);
    let record = records
        .iter()
        .find(|record| record.call_id.as_str() == "c1")
        .unwrap();
    let card = Presenters::new().record_in(record, &records);
    assert_eq!(card.children[1].title, "$ cargo test -q");
    assert_eq!(
        card.children[1].notes,
        ["arguments rewritten by quiet-tests: quieter output"]
    );
    let card = Presenters::new().record(record);
    insta::assert_snapshot!(
        "code_run_nested.plain",
        toolrail_presenters::render_plain(&card)
    );
    insta::assert_snapshot!(
        "code_run_nested.html",
        toolrail_presenters::render_html(&card)
    );
}

/// A model that reused `c1` for two programs in two answers: each program's card nests its
/// own binding call, and each gets an anchor of its own on the page.
#[test]
fn two_programs_under_one_reused_id_each_show_their_own_calls() {
    let mut events = Vec::new();
    let mut push = |kind: &str, call_id: Option<&str>, data: Value| {
        let seq = events.len() as u64 + 1;
        events.push(
            serde_json::from_value::<toolrail_session_log::Event>(json!({
                "seq": seq, "ts": "2026-12-01T00:00:00Z", "kind": kind, "turn": 1,
                "step": seq, "call_id": call_id, "data": data,
            }))
            .unwrap(),
        );
    };
    for path in ["a.rs", "b.rs"] {
        let program = format!("await read({{path: '{path}'}});");
        let args = json!({"code": program, "description": "read"}).to_string();
        push(
            "assistant/message",
            None,
            json!({"blocks": [{"type": "tool_call", "call_id": "c1", "name": "run_code",
                "arguments_raw": args}], "stop_reason": "tool_calls"}),
        );
        push(
            "tool/call",
            Some("c1"),
            json!({"index": 0, "name": "run_code", "arguments_raw": args}),
        );
        push("tool/start", Some("c1"), json!({}));
        push(
            "tool/code-dispatch-start",
            Some("c1:code:1"),
            json!({"parent_call_id": "c1", "name": "read", "arguments": {"path": path}}),
        );
        push(
            "tool/call",
            Some("c1:code:1"),
            json!({"index": 0, "name": "read",
                "arguments_raw": json!({"path": path}).to_string()}),
        );
        let read = ToolResultRecord::success(vec![ContentBlock::text(path)]);
        push(
            "tool/result",
            Some("c1:code:1"),
            serde_json::to_value(&read).unwrap(),
        );
        push(
            "tool/code-dispatch",
            Some("c1:code:1"),
            json!({"parent_call_id": "c1", "name": "read", "result": read}),
        );
        let mut run = ToolResultRecord::success(vec![ContentBlock::text("done")]);
        run.details = Some(Details::from_value(
            json!({"type": "code-run", "language": "javascript",
            "program": program, "result": null,
            "sub_calls": [{"call_id": "c1:code:1", "tool": "read", "error": null}]}),
        ));
        push(
            "tool/result",
            Some("c1"),
            serde_json::to_value(&run).unwrap(),
        );
    }
    let records = toolrail_session_log::call_records(&events);
    let programs: Vec<&toolrail_session_log::CallRecord> = records
        .iter()
        .filter(|record| record.call_id.as_str() == "c1")
        .collect();
    assert_eq!(programs.len(), 2);
    let nested: Vec<String> = programs
        .iter()
        .map(|program| {
            let card = Presenters::new().record_in(program, &records);
            card.children[0].title.clone()
        })
        .collect();
    assert_eq!(nested, ["read a.rs", "read b.rs"]);
    let page = toolrail_presenters::session_page("t", &events, &Presenters::new());
    assert!(page.contains("id=\"call-c1\""), "{page}");
    assert!(page.contains("id=\"call-c1~2\""), "{page}");
}
