//! Every card kind in every renderer, snapshot-tested (insta; snapshots in `tests/snapshots`,
//! reviewed by hand): the kinds as the shipped tools record them, a failed call, a call
//! written off by the runtime, truncated output, pending calls, and details in a shape the
//! kind does not know, which must fall back to the generic card.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use toolrail_presenters::{
    Card, CardKind, present_call, present_result, render_ansi, render_html, render_plain,
};
use toolrail_session_log::details::Details;
use toolrail_session_log::{ContentBlock, Effect, ErrorCode, ToolResultRecord};

fn success(text: &str, value: Option<Value>, details: Option<Value>) -> ToolResultRecord {
    let mut result = ToolResultRecord::success(vec![ContentBlock::text(text)]);
    result.value = value;
    result.details = details.map(Details::from_value);
    result
}

/// The three renderings of `card`, each its own snapshot. Escapes are made visible.
fn snapshot_all(name: &str, card: &Card) {
    insta::assert_snapshot!(format!("{name}.plain"), render_plain(card));
    insta::assert_snapshot!(
        format!("{name}.ansi"),
        render_ansi(card).replace('\u{1b}', "␛")
    );
    insta::assert_snapshot!(format!("{name}.html"), render_html(card));
    // The plain text is the ANSI text without its escapes.
    assert_eq!(strip_ansi(&render_ansi(card)), render_plain(card));
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn card(tool: &str, args: &Value, result: &ToolResultRecord) -> Card {
    present_result(CardKind::for_tool(tool), tool, args, result)
}

#[test]
fn terminal() {
    let args = json!({"command": "cargo test -q", "description": "run the tests"});
    let result = success(
        "running 3 tests\n...\ntest result: ok. 3 passed\n[exit code 0]",
        Some(json!({"exit_code": 0})),
        Some(json!({
            "type": "terminal", "command": "cargo test -q", "description": "run the tests",
            "exit_code": 0, "signal": null, "timed_out": false, "truncated": false,
            "output_tail": "running 3 tests\n...\ntest result: ok. 3 passed\n[exit code 0]",
        })),
    );
    let card = card("bash", &args, &result);
    assert_eq!(card.kind, CardKind::Terminal);
    snapshot_all("terminal", &card);
}

#[test]
fn terminal_truncated_and_timed_out() {
    let args = json!({"command": "yes | head -c 100000; sleep 60", "description": "flood"});
    let tail: String = (1..=30).map(|n| format!("y {n}\n")).collect();
    let result = success(
        &tail,
        None,
        Some(json!({
            "type": "terminal", "command": "yes | head -c 100000; sleep 60", "description": "flood",
            "exit_code": null, "signal": 9, "timed_out": true, "truncated": true,
            "output_tail": format!("{tail}[timed out after 300 ms; the command's processes were stopped]\n[killed by signal 9 (SIGKILL)]"),
        })),
    );
    snapshot_all("terminal_truncated", &card("bash", &args, &result));
}

#[test]
fn diff() {
    let args =
        json!({"path": "src/lib.rs", "edits": [{"old": "a + b", "new": "a.saturating_add(b)"}]});
    let mut result = success(
        "Edited `src/lib.rs`: 1 edit, +1 −1 lines.",
        None,
        Some(json!({"type": "diff", "files": [{
            "path": "src/lib.rs", "added": 1, "removed": 1,
            "diff": "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n pub fn add(a: u8, b: u8) -> u8 {\n-    a + b\n+    a.saturating_add(b)\n }\n",
        }]})),
    );
    result.effects.push(Effect::FileWritten {
        path: "src/lib.rs".into(),
        before: Some("blake3:aa".into()),
        after: "blake3:bb".into(),
    });
    let card = card("edit", &args, &result);
    assert_eq!(card.kind, CardKind::Diff);
    snapshot_all("diff", &card);
}

#[test]
fn search() {
    let args = json!({"pattern": "fn add", "path": "src"});
    let result = success(
        "src/lib.rs\n     1: pub fn add(a: u8, b: u8) -> u8 {",
        None,
        Some(
            json!({"type": "search", "pattern": "fn add", "omitted_files": 2, "omitted_matches": 5,
            "files": [{"path": "src/lib.rs", "lines": [
                {"line": 1, "text": "pub fn add(a: u8, b: u8) -> u8 {", "match": true},
                {"line": 2, "text": "    a + b", "match": false},
            ]}, {"path": "src/main.rs", "count": 4}]}),
        ),
    );
    snapshot_all("search", &card("grep", &args, &result));
}

#[test]
fn read() {
    let args = json!({"path": "src/lib.rs", "offset": 1, "limit": 20});
    let result = success(
        "     1\tpub fn add",
        None,
        Some(
            json!({"type": "read", "path": "src/lib.rs", "start_line": 1, "end_line": 20, "total_lines": 57, "truncated": true}),
        ),
    );
    snapshot_all("read", &card("read", &args, &result));
}

#[test]
fn web() {
    let args = json!({"url": "https://example.org/"});
    let result = success(
        "Example Domain",
        None,
        Some(
            json!({"type": "web", "url": "https://example.org/", "status": 200, "title": "Example Domain",
            "excerpt": "This domain is for use in illustrative examples in documents."}),
        ),
    );
    snapshot_all("web", &card("web_fetch", &args, &result));
}

#[test]
fn a_stranger_s_tool_gets_the_card_its_details_name() {
    // No shipped tool is called `apply_patch`: its diff details make it a diff card.
    let result = success(
        "Patched.",
        None,
        Some(json!({"type": "diff", "files": [{
            "path": "src/lib.rs", "added": 1, "removed": 1,
            "diff": "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-old\n+new\n",
        }]})),
    );
    let card = present_result(
        CardKind::for_tool("apply_patch"),
        "apply_patch",
        &json!({"patch": "…"}),
        &result,
    );
    assert_eq!(card.kind, CardKind::Diff);
    assert!(
        render_plain(&card).contains("+ new"),
        "{}",
        render_plain(&card)
    );
    // Details of no known kind leave the tool's own card.
    let odd = success("x", None, Some(json!({"type": "hologram"})));
    assert_eq!(card_kind("bash", &odd), CardKind::Generic);
}

fn card_kind(tool: &str, result: &ToolResultRecord) -> CardKind {
    present_result(
        CardKind::for_tool(tool),
        tool,
        &json!({"command": "ls"}),
        result,
    )
    .kind
}

#[test]
fn todo() {
    let args = json!({"todos": [
        {"content": "read the failing test", "status": "completed"},
        {"content": "fix the overflow", "status": "in_progress"},
        {"content": "run the tests", "status": "pending"},
    ]});
    let result = success(
        "Todo list updated: 3 items (1 completed, 1 in progress, 1 pending).",
        Some(json!({"completed": 1, "in_progress": 1, "pending": 1})),
        None,
    );
    let card = card("todo_write", &args, &result);
    assert_eq!(card.kind, CardKind::Todo);
    snapshot_all("todo", &card);
}

#[test]
fn question() {
    let args = json!({"questions": [
        {"id": "db", "question": "Which database?", "options": ["sqlite", "postgres"]},
        {"id": "name", "question": "Project name?"},
    ]});
    let result = success(
        "db: postgres\nname: no answer",
        Some(
            json!({"db": {"state": "answered", "answer": "postgres"}, "name": {"state": "expired", "answer": null}}),
        ),
        None,
    );
    snapshot_all("question", &card("ask_user", &args, &result));
}

#[test]
fn code_run() {
    let args = json!({"code": "const a = await read({path: 'a'});\nreturn a.length;", "description": "count"});
    let result = success(
        "12",
        Some(json!(12)),
        Some(json!({"type": "code-run", "language": "javascript",
            "sub_calls": [{"call_id": "c1:code:1", "tool": "read"}, {"call_id": "c1:code:2", "tool": "write", "error": "POLICY_DENIED"}],
            "logs": "reading a", "result": 12})),
    );
    snapshot_all("code_run", &card("run_code", &args, &result));
}

#[test]
fn generic() {
    let args = json!({"target": "staging", "dry_run": true});
    let result = success("deployed <nothing> & done", None, None);
    let card = card("deploy", &args, &result);
    assert_eq!(card.kind, CardKind::Generic);
    snapshot_all("generic", &card);
}

#[test]
fn failed_call_keeps_its_kind_and_effects() {
    let args = json!({"path": "src/lib.rs", "content": "fn main() {}\n"});
    let mut result = ToolResultRecord::failure(
        ErrorCode::custom("FS_STALE_VERSION").unwrap(),
        "`src/lib.rs` changed since it was read; read it again",
    );
    result.effects.push(Effect::FileWritten {
        path: "notes.txt".into(),
        before: None,
        after: "blake3:cc".into(),
    });
    let card = card("write", &args, &result);
    assert_eq!(card.kind, CardKind::Diff);
    snapshot_all("failed", &card);
}

#[test]
fn synthetic_result_says_the_runtime_wrote_it() {
    let args = json!({"command": "make deploy", "description": "deploy"});
    let mut result = ToolResultRecord::failure(
        ErrorCode::ToolOutcomeUnknown,
        "the session ended while this call ran; it may have acted: verify before retrying",
    );
    result.synthetic = true;
    snapshot_all("synthetic", &card("bash", &args, &result));
}

#[test]
fn details_of_another_shape_fall_back_to_the_generic_card() {
    // Terminal details without a command, diff details whose files are not a list, search
    // details whose files are not a list, and details that are not an object at all.
    let cases = [
        (
            "bash",
            json!({"command": "ls"}),
            json!({"type": "terminal", "exit_code": "zero"}),
        ),
        (
            "edit",
            json!({"path": "a"}),
            json!({"type": "diff", "files": "a"}),
        ),
        (
            "grep",
            json!({"pattern": "x"}),
            json!({"type": "search", "pattern": "x", "files": 3}),
        ),
        ("read", json!({"path": "a"}), json!([1, 2, 3])),
    ];
    for (tool, args, details) in cases {
        let card = card(tool, &args, &success("out", None, Some(details.clone())));
        assert_eq!(card.kind, CardKind::Generic, "{tool} with {details}");
        render_plain(&card);
        render_html(&card);
    }
    let card = card(
        "bash",
        &json!({"command": "ls"}),
        &success("out", None, Some(json!({"type": "terminal"}))),
    );
    snapshot_all("fallback", &card);
}

#[test]
fn arguments_that_do_not_fit_the_kind_fall_back_too() {
    for (tool, args) in [
        ("bash", json!({"cmd": "ls"})),
        ("todo_write", json!({"todos": "all of them"})),
        ("ask_user", json!(null)),
        ("edit", json!("{\"path\": ")),
    ] {
        let card = present_call(CardKind::for_tool(tool), tool, &args);
        assert_eq!(card.kind, CardKind::Generic, "{tool} with {args}");
    }
}

#[test]
fn pending_calls() {
    let terminal = present_call(
        CardKind::Terminal,
        "bash",
        &json!({"command": "cargo build\ncargo test", "description": "build and test"}),
    );
    snapshot_all("pending_terminal", &terminal);
    let raw = present_call(
        CardKind::Generic,
        "deploy",
        &toolrail_presenters::parse_arguments("{\"target\": "),
    );
    snapshot_all("pending_raw", &raw);
}

#[test]
fn control_characters_in_tool_output_reach_no_terminal() {
    let args = json!({"command": "printf 'evil'", "description": "x"});
    let output = "ok\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}[2J\rover\tand\nnext";
    let result = success(
        output,
        None,
        Some(
            json!({"type": "terminal", "command": "printf 'evil'\u{1b}[31m", "exit_code": 0,
            "output_tail": output}),
        ),
    );
    let card = card("bash", &args, &result);
    for text in [render_plain(&card), render_ansi(&card)] {
        assert!(
            !text.contains("\u{1b}]") && !text.contains("\u{1b}[2J") && !text.contains('\r'),
            "{text:?}"
        );
        assert!(
            text.contains("\\u{1b}]52;") && text.contains("over\tand"),
            "{text:?}"
        );
    }
    assert!(!render_plain(&card).contains('\u{1b}'));
}

#[test]
fn numbers_from_a_log_cannot_overflow() {
    let read = present_call(
        CardKind::Read,
        "read",
        &json!({"path": "a", "offset": u64::MAX, "limit": 5}),
    );
    render_plain(&read);
    let mut result = success("x", None, None);
    result.timing.policy_us = u64::MAX;
    result.timing.queued_us = u64::MAX;
    result.timing.run_us = u64::MAX;
    result.timing.total_us = 3;
    let events = vec![];
    let _ =
        toolrail_presenters::session_page("t", &events, &toolrail_presenters::Presenters::new());
    render_html(&card("deploy", &json!({}), &result));
}

#[test]
fn a_failure_shows_its_whole_message_and_a_sandbox_refusal_its_lines() {
    let args = json!({"path": "src/lib.rs", "edits": "x"});
    let result = ToolResultRecord::failure(
        ErrorCode::InvalidArgs,
        "the arguments of `edit` do not match its input schema:\n/edits: \"x\" is not of type \"array\"",
    );
    let plain = render_plain(&card("edit", &args, &result));
    assert!(plain.contains("do not match its input schema:"), "{plain}");
    assert!(
        plain.contains("/edits: \"x\" is not of type \"array\""),
        "{plain}"
    );

    let refused = success(
        "touch: cannot touch '/etc/x': Permission denied\n[exit code 1]",
        Some(json!({"exit_code": 1})),
        Some(json!({
            "type": "terminal", "command": "touch /etc/x", "exit_code": 1, "signal": null,
            "timed_out": false, "truncated": false,
            "output_tail": "touch: cannot touch '/etc/x': Permission denied\n[exit code 1]",
            "sandbox_refused": {"mode": "workspace-write", "lines": ["touch: cannot touch '/etc/x': Permission denied"]},
        })),
    );
    let card = card("bash", &json!({"command": "touch /etc/x"}), &refused);
    assert_eq!(
        card.notes,
        ["the sandbox (workspace-write) refused: touch: cannot touch '/etc/x': Permission denied"]
    );
    assert!(render_html(&card).contains("the sandbox (workspace-write) refused"));
}
