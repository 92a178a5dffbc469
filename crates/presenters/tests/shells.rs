//! Background shells (issue 26): a call on a shell is a terminal card named by the shell's
//! id, with its state in the header and its pseudo-terminal and cursor among the facts
//! (insta snapshots in `tests/snapshots`, reviewed by hand); and the session page's section
//! that follows each shell from `shell/started` through the calls that touched it to
//! `shell/exited`, made from the events alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolrail_presenters::{
    Card, CardBody, CardKind, Presenters, ShellCall, ShellEnding, ShellLife, ShellStart,
    ShellTouch, TerminalShell, present_call, present_result, render_ansi, render_html,
    render_plain, session_page, shell_lives,
};
use toolrail_session_log::details::{Details, ShellFacts, ShellState, Terminal};
use toolrail_session_log::event::{ShellEnd, ShellExited, ShellStarted, ToolCall};
use toolrail_session_log::{
    CallId, ContentBlock, ErrorCode, Event, EventData, Timestamp, ToolResultRecord, TurnId,
};

/// A result whose details are `terminal`, reading `text`.
fn terminal_result(text: &str, terminal: Terminal) -> ToolResultRecord {
    let mut result = ToolResultRecord::success(vec![ContentBlock::text(text)]);
    result.details = Some(Details::Terminal(Box::new(terminal)));
    result
}

fn facts(id: &str, state: ShellState, tty: bool, cursor: u64) -> Option<ShellFacts> {
    Some(ShellFacts {
        id: id.to_owned(),
        state,
        tty,
        cursor,
    })
}

fn card(tool: &str, args: &Value, result: &ToolResultRecord) -> Card {
    present_result(CardKind::for_tool(tool), tool, args, result)
}

/// The plain and HTML renderings of `card`, each its own snapshot.
fn snapshot_plain_and_html(name: &str, card: &Card) {
    insta::assert_snapshot!(format!("{name}.plain"), render_plain(card));
    insta::assert_snapshot!(format!("{name}.html"), render_html(card));
}

#[test]
fn calls_on_a_shell_are_terminal_cards_and_shell_list_stays_generic() {
    let kinds: Vec<CardKind> = [
        "bash",
        "shell_output",
        "shell_write",
        "shell_kill",
        "shell_list",
    ]
    .into_iter()
    .map(CardKind::for_tool)
    .collect();
    assert_eq!(
        kinds,
        [
            CardKind::Terminal,
            CardKind::Terminal,
            CardKind::Terminal,
            CardKind::Terminal,
            CardKind::Generic,
        ]
    );
}

#[test]
fn a_call_on_a_shell_before_its_result_names_the_shell_and_what_it_asks() {
    let card = present_call(
        CardKind::for_tool("shell_write"),
        "shell_write",
        &json!({"id": "sh1", "input": "rs\n", "close": true}),
    );
    assert_eq!(card.title, "sh1 · shell_write");
    assert_eq!(
        card.body,
        CardBody::Terminal {
            command: String::new(),
            description: Some("write \"rs\\n\", then close the input".to_owned()),
            exit_code: None,
            signal: None,
            timed_out: false,
            output: None,
            truncated: false,
            shell: Some(TerminalShell {
                id: "sh1".to_owned(),
                state: None,
                tty: false,
                cursor: None,
            }),
        }
    );
    snapshot_plain_and_html("shell_pending_write", &card);
    // Without the shell's id the arguments fit no terminal card.
    let stray = present_call(
        CardKind::for_tool("shell_output"),
        "shell_output",
        &json!({"shell": "sh1"}),
    );
    assert_eq!(stray.kind, CardKind::Generic);
}

#[test]
fn a_background_start_shows_the_shell_running_on_its_tty() {
    let args = json!({"command": "npm run dev", "description": "start the dev server", "background": true});
    let output = "> dev\n> vite\n\n  VITE ready in 312 ms\n  ➜  Local: http://localhost:5173/";
    let result = terminal_result(
        output,
        Terminal {
            command: "npm run dev".to_owned(),
            description: Some("start the dev server".to_owned()),
            output_tail: Some(output.to_owned()),
            shell: facts("sh1", ShellState::Running, true, 87),
            ..Terminal::default()
        },
    );
    let card = card("bash", &args, &result);
    assert_eq!(card.title, "sh1 · npm run dev");
    snapshot_plain_and_html("shell_started", &card);
    // The state is coloured like a note (yellow), the quiet facts dim.
    assert!(
        render_ansi(&card).contains("  \u{1b}[33mrunning\u{1b}[0m\n"),
        "{:?}",
        render_ansi(&card)
    );
    assert!(render_ansi(&card).contains("\u{1b}[2mread to byte 87\u{1b}[0m"));
}

#[test]
fn a_shell_output_card_says_what_it_read_and_where_the_shell_stands() {
    let args = json!({"id": "sh1", "since": 87, "wait_ms": 2000});
    let output = "  GET / 200 in 14 ms\n  GET /favicon.ico 404 in 2 ms";
    let result = terminal_result(
        output,
        Terminal {
            command: "npm run dev".to_owned(),
            // The shell's purpose; the card says what this call did instead.
            description: Some("start the dev server".to_owned()),
            output_tail: Some(output.to_owned()),
            shell: facts("sh1", ShellState::Running, true, 160),
            ..Terminal::default()
        },
    );
    let card = card("shell_output", &args, &result);
    assert_eq!(card.kind, CardKind::Terminal);
    snapshot_plain_and_html("shell_output", &card);
}

#[test]
fn a_killed_shell_shows_its_signal_and_state() {
    let args = json!({"id": "sh2", "signal": "SIGTERM"});
    let result = terminal_result(
        "[killed by signal 15 (SIGTERM)]",
        Terminal {
            command: "cargo watch -x test\n# forever".to_owned(),
            signal: Some(15),
            output_tail: Some("[killed by signal 15 (SIGTERM)]".to_owned()),
            truncated: true,
            shell: facts("sh2", ShellState::Killed, false, 40_960),
            ..Terminal::default()
        },
    );
    snapshot_plain_and_html("shell_killed", &card("shell_kill", &args, &result));
}

#[test]
fn a_failed_call_on_a_shell_keeps_the_shell_s_name() {
    let result = ToolResultRecord::failure(
        ErrorCode::custom("SHELL_NOT_FOUND").unwrap(),
        "no background shell `sh9`; shell_list lists them",
    );
    let card = card("shell_output", &json!({"id": "sh9"}), &result);
    assert_eq!(
        render_plain(&card),
        "✗ sh9 · shell_output  SHELL_NOT_FOUND\n  no background shell `sh9`; shell_list lists them\n  read output\n"
    );
}

// ---- the page's section ----

fn event(seq: u64, call_id: Option<&str>, data: EventData) -> Event {
    Event {
        seq,
        ts: Timestamp::from_millis(1_000 + seq),
        turn: Some(TurnId(1)),
        step: None,
        call_id: call_id.map(CallId::new),
        data,
    }
}

/// A log whose events are `data`, numbered in order.
fn log(data: Vec<(Option<&str>, EventData)>) -> Vec<Event> {
    data.into_iter()
        .zip(1..)
        .map(|((call_id, data), seq)| event(seq, call_id, data))
        .collect()
}

fn called(index: u32, name: &str, args: Value) -> EventData {
    EventData::ToolCall(ToolCall {
        index,
        name: name.to_owned(),
        arguments_raw: args.to_string(),
        source: None,
        version: None,
        trace: None,
    })
}

fn reported(command: &str, exit_code: Option<i64>, shell: Option<ShellFacts>) -> EventData {
    EventData::ToolResult(Arc::new(terminal_result(
        "…",
        Terminal {
            command: command.to_owned(),
            exit_code,
            output_tail: Some("…".to_owned()),
            shell,
            ..Terminal::default()
        },
    )))
}

fn started(id: &str, command: &str, tty: bool) -> EventData {
    EventData::ShellStarted(ShellStarted {
        id: id.to_owned(),
        command: command.to_owned(),
        mode: "workspace-write".to_owned(),
        tty,
        pid_namespace: tty.then(|| "pid:[4026532001]".to_owned()),
        output: format!("/tmp/toolrail/{id}.out"),
    })
}

fn exited(id: &str, end: ShellEnd, exit_code: Option<i64>, output_bytes: u64) -> EventData {
    EventData::ShellExited(ShellExited {
        id: id.to_owned(),
        end,
        exit_code,
        signal: None,
        output: format!("/tmp/toolrail/{id}.out"),
        output_bytes,
    })
}

fn by(call_id: &str, tool: &str) -> Option<ShellCall> {
    Some(ShellCall {
        call_id: call_id.to_owned(),
        tool: Some(tool.to_owned()),
    })
}

fn touch(call_id: &str, tool: &str, state: ShellState, cursor: u64) -> ShellTouch {
    ShellTouch {
        call: ShellCall {
            call_id: call_id.to_owned(),
            tool: Some(tool.to_owned()),
        },
        state,
        cursor,
        error: None,
    }
}

/// `sh1` is started by `c1`, read twice by `shell_output`, and the second read sees it
/// exit; `sh2` is started by `c4` and never ends in the log.
fn two_shells() -> Vec<Event> {
    let running = |cursor| facts("sh1", ShellState::Running, true, cursor);
    log(vec![
        (
            Some("c1"),
            called(
                0,
                "bash",
                json!({"command": "npm test -- --watch", "background": true}),
            ),
        ),
        (Some("c1"), started("sh1", "npm test -- --watch", true)),
        (
            Some("c1"),
            reported("npm test -- --watch", None, running(120)),
        ),
        (
            Some("c2"),
            called(0, "shell_output", json!({"id": "sh1", "wait_ms": 2000})),
        ),
        (
            Some("c2"),
            reported("npm test -- --watch", None, running(512)),
        ),
        (
            Some("c3"),
            called(0, "shell_output", json!({"id": "sh1", "since": 512})),
        ),
        (Some("c3"), exited("sh1", ShellEnd::Exited, Some(1), 2_048)),
        (
            Some("c3"),
            reported(
                "npm test -- --watch",
                Some(1),
                facts("sh1", ShellState::Exited, true, 2_048),
            ),
        ),
        (
            Some("c4"),
            called(
                0,
                "bash",
                json!({"command": "sleep 600", "background": true}),
            ),
        ),
        (Some("c4"), started("sh2", "sleep 600", false)),
    ])
}

#[test]
fn the_page_follows_each_shell_from_its_start_through_its_calls_to_its_end() {
    let events = two_shells();
    let lives = shell_lives(&events);
    assert_eq!(
        lives,
        [
            ShellLife {
                id: "sh1".to_owned(),
                command: "npm test -- --watch".to_owned(),
                started: Some(ShellStart {
                    by: by("c1", "bash"),
                    mode: "workspace-write".to_owned(),
                    tty: true,
                    pid_namespace: Some("pid:[4026532001]".to_owned()),
                    output: "/tmp/toolrail/sh1.out".to_owned(),
                }),
                touches: vec![
                    touch("c1", "bash", ShellState::Running, 120),
                    touch("c2", "shell_output", ShellState::Running, 512),
                    touch("c3", "shell_output", ShellState::Exited, 2_048),
                ],
                ended: Some(ShellEnding {
                    by: by("c3", "shell_output"),
                    end: ShellEnd::Exited,
                    exit_code: Some(1),
                    signal: None,
                    output_bytes: 2_048,
                }),
            },
            ShellLife {
                id: "sh2".to_owned(),
                command: "sleep 600".to_owned(),
                started: Some(ShellStart {
                    by: by("c4", "bash"),
                    mode: "workspace-write".to_owned(),
                    tty: false,
                    pid_namespace: None,
                    output: "/tmp/toolrail/sh2.out".to_owned(),
                }),
                touches: Vec::new(),
                ended: None,
            },
        ]
    );
    let lines: Vec<Vec<String>> = lives.iter().map(ShellLife::lines).collect();
    assert_eq!(
        lines,
        [
            vec![
                "sh1 · npm test -- --watch · exited",
                "started by c1 bash · workspace-write · tty · pid:[4026532001] · output in /tmp/toolrail/sh1.out",
                "c1 bash → running · read to byte 120",
                "c2 shell_output → running · read to byte 512",
                "c3 shell_output → exited · read to byte 2048",
                "exited · exit 1 · 2048 bytes of output · seen by c3 shell_output",
            ],
            vec![
                "sh2 · sleep 600 · running at the end of the log",
                "started by c4 bash · workspace-write · output in /tmp/toolrail/sh2.out",
                "no shell/exited in the log: still running",
            ],
        ]
    );

    let page = session_page("shells", &events, &Presenters::new());
    let from = page
        .find("<section class=\"shells\">")
        .expect("a shells section");
    let to = from + page[from..].find("</section>\n").expect("its end") + "</section>\n".len();
    assert_eq!(
        &page[from..to],
        "<section class=\"shells\">
<h2>background shells</h2>
<div class=\"shell\" data-shell=\"sh1\">
<p class=\"shell-head\"><span class=\"id\">sh1</span> · <code>npm test -- --watch</code> <span class=\"shell-state exited\">exited</span></p>
<ol class=\"shell-life\">
<li class=\"started\">started by c1 bash · workspace-write · tty · pid:[4026532001] · output in /tmp/toolrail/sh1.out</li>
<li class=\"touched running\" data-call-id=\"c1\">c1 bash → running · read to byte 120</li>
<li class=\"touched running\" data-call-id=\"c2\">c2 shell_output → running · read to byte 512</li>
<li class=\"touched exited\" data-call-id=\"c3\">c3 shell_output → exited · read to byte 2048</li>
<li class=\"ended exited\">exited · exit 1 · 2048 bytes of output · seen by c3 shell_output</li>
</ol>
</div>
<div class=\"shell\" data-shell=\"sh2\">
<p class=\"shell-head\"><span class=\"id\">sh2</span> · <code>sleep 600</code> <span class=\"shell-state running\">running at the end of the log</span></p>
<ol class=\"shell-life\">
<li class=\"started\">started by c4 bash · workspace-write · output in /tmp/toolrail/sh2.out</li>
<li class=\"ended running\">no shell/exited in the log: still running</li>
</ol>
</div>
</section>
"
    );
    // The cards on the page name their shell too.
    assert_eq!(page.matches("data-shell=\"sh1\"").count(), 1 + 3);
}

#[test]
fn a_shell_the_runtime_ended_on_resume_says_so_and_a_new_start_is_a_new_life() {
    let mut events = two_shells();
    let next = events.len() as u64;
    // The session resumed: the runtime wrote sh2 off, and the new runtime numbered a new
    // shell sh2 again.
    events.push(event(
        next + 1,
        None,
        exited("sh2", ShellEnd::EndedWithRuntime, None, 0),
    ));
    events.push(event(
        next + 2,
        Some("c5"),
        called(
            0,
            "bash",
            json!({"command": "make serve", "background": true}),
        ),
    ));
    events.push(event(
        next + 3,
        Some("c5"),
        started("sh2", "make serve", false),
    ));
    let lines: Vec<Vec<String>> = shell_lives(&events)
        .iter()
        .skip(1)
        .map(ShellLife::lines)
        .collect();
    assert_eq!(
        lines,
        [
            vec![
                "sh2 · sleep 600 · ended with the runtime",
                "started by c4 bash · workspace-write · output in /tmp/toolrail/sh2.out",
                "ended with the runtime · 0 bytes of output · recorded by the runtime",
            ],
            vec![
                "sh2 · make serve · running at the end of the log",
                "started by c5 bash · workspace-write · output in /tmp/toolrail/sh2.out",
                "no shell/exited in the log: still running",
            ],
        ]
    );
}

#[test]
fn a_page_without_shells_has_no_shells_section() {
    let events = log(vec![(
        Some("c1"),
        called(0, "bash", json!({"command": "ls"})),
    )]);
    assert!(shell_lives(&events).is_empty());
    assert!(!session_page("none", &events, &Presenters::new()).contains("class=\"shells\""));
}
