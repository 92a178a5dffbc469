//! The session page in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) loads the demo's page from disk with no network; the DOM it builds has
//! one card and one timeline lane per call, and a screenshot goes to the test's output
//! folder (`target/tmp/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Chromium on the PATH; CI must have it (`.ci/run` installs it), elsewhere its absence
/// skips the test with a note.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed; CI must have it (.ci/run installs it)"
        );
        eprintln!("chromium is not installed: the page is not checked in a browser here");
    }
    found
}

/// Runs headless Chromium on `page` with `extra` flags, killed after a minute. Its output
/// is read while it runs, so a large DOM cannot fill the pipe and stall it.
fn headless(chromium: &Path, profile: &Path, page: &Path, extra: &[&str]) -> Output {
    let child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("chromium did not finish within a minute");
        }
    }
}

#[test]
fn the_demo_page_has_a_card_and_a_lane_per_call_in_a_real_browser() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("demo");
    let demo = assert_cmd::Command::cargo_bin("toolrail")
        .unwrap()
        .args(["demo", "--session-dir", session.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let page = session.join("session.html");
    let profile = dir.path().join("profile");

    let dom = dom_of(&chromium, &profile, &page);
    let calls: Vec<String> = (1..=9).map(|n| format!("c{n}")).collect();
    assert_eq!(
        dom.matches("<article class=\"card").count(),
        calls.len(),
        "{dom}"
    );
    assert_eq!(
        dom.matches("<div class=\"lane").count(),
        calls.len(),
        "{dom}"
    );
    for call in &calls {
        assert!(
            dom.contains(&format!(
                "<div class=\"call\" id=\"call-{call}\" data-call-id=\"{call}\">"
            )),
            "no card for {call}"
        );
        assert!(
            dom.contains(&format!("data-call-id=\"{call}\"><span class=\"label\">")),
            "no lane for {call}"
        );
    }
    // The denied call is a failed card; nothing on the page comes from the network.
    assert!(dom.contains("status-failed"), "{dom}");
    for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!dom.contains(external), "the page loads `{external}…`");
    }

    screenshot(&chromium, &profile, &page, "demo-session-page.png");
}

/// The DOM Chromium builds from `page`.
fn dom_of(chromium: &Path, profile: &Path, page: &Path) -> String {
    let dom = headless(chromium, profile, page, &["--dump-dom"]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    String::from_utf8(dom.stdout).unwrap()
}

/// A screenshot of `page` in the test's output folder, checked to be a PNG of substance.
fn screenshot(chromium: &Path, profile: &Path, page: &Path, name: &str) {
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_file(&shot);
    let taken = headless(
        chromium,
        profile,
        page,
        &[
            "--window-size=1200,1800",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}

#[test]
fn a_model_session_page_names_its_model_start_and_tokens_per_step() {
    use toolrail_test_support::http::{
        Answer, call_chunk, finish_chunk, scripted_server, text_chunk,
    };
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "alpha\n").unwrap();
    let (_gate, gate) = std::sync::mpsc::channel();
    let (url, _requests) = scripted_server(
        vec![
            Answer::new(vec![
                text_chunk("Reading the notes."),
                call_chunk(0, "r1", "read", r#"{"path": "notes.md"}"#),
                call_chunk(
                    1,
                    "w1",
                    "write",
                    r#"{"path": "notes.md", "content": "beta\n"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![
                text_chunk("They say alpha; the write was refused."),
                finish_chunk("stop"),
            ]),
        ],
        gate,
    );
    let page = dir.path().join("chat.html");
    let run = assert_cmd::Command::cargo_bin("toolrail")
        .unwrap()
        .current_dir(dir.path())
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .args([
            "run",
            "--prompt",
            "What do the notes say?",
            "--provider",
            "openai",
        ])
        .args([
            "--model",
            "scripted-model",
            "--base-url",
            &url,
            "--approve",
            "never",
        ])
        .args(["--html", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let profile = dir.path().join("profile");
    let dom = dom_of(&chromium, &profile, &page);
    assert!(
        dom.contains(&format!(
            "<dd class=\"model\">scripted-model (openai at {url})</dd>"
        )),
        "{dom}"
    );
    assert!(dom.contains("<dd class=\"started\">20"), "{dom}");
    assert_eq!(dom.matches("<tr class=\"step\">").count(), 2, "{dom}");
    assert!(
        dom.contains("tokens: 20 in · 10 out over 2 model requests"),
        "{dom}"
    );
    assert!(
        dom.contains("Reading the notes.") && dom.contains("They say alpha"),
        "{dom}"
    );
    assert_eq!(dom.matches("<article class=\"card").count(), 2, "{dom}");
    assert!(dom.contains("APPROVAL_REJECTED"), "{dom}");
    screenshot(&chromium, &profile, &page, "model-session-page.png");
}

#[test]
fn a_five_megabyte_output_is_collapsed_and_kept_out_of_the_page() {
    use toolrail_session_log::{
        AppendUrgency, CallId, ContentBlock, EventData, EventDraft, EventSink, SessionId,
        SessionLog, StepId, Timestamp, ToolResultRecord, TurnId,
        event::{
            AssistantBlock, AssistantMessage, FORMAT_VERSION, SessionStart, StopReason, ToolCall,
            TurnEnd, TurnEndKind, TurnStart,
        },
    };
    use toolrail_session_store::{Durability, JsonlStore, SessionStore};
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store
        .create(SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("big"),
            tools: Vec::new(),
            meta: None,
        })
        .unwrap();
    let draft = |call: Option<&str>, data| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    };
    let arguments = r#"{"query": "everything"}"#;
    let big: String = (0..100_000)
        .map(|line| format!("row {line:06} of the export\n"))
        .collect();
    assert_eq!(big.len(), 2_500_000);
    let big = big.repeat(2);
    let events = vec![
        draft(
            None,
            EventData::TurnStart(TurnStart {
                user: vec![ContentBlock::text("Export it all.")],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        draft(
            None,
            EventData::AssistantMessage(AssistantMessage {
                blocks: vec![AssistantBlock::ToolCall {
                    call_id: CallId::from("x1"),
                    name: "export".into(),
                    arguments_raw: arguments.into(),
                }],
                stop_reason: StopReason::ToolCalls,
            }),
        ),
        draft(
            Some("x1"),
            EventData::ToolCall(ToolCall {
                index: 0,
                name: "export".into(),
                arguments_raw: arguments.into(),
                source: None,
                version: None,
                trace: None,
            }),
        ),
        draft(
            Some("x1"),
            EventData::ToolResult(std::sync::Arc::new(ToolResultRecord::success(vec![
                ContentBlock::text(&big),
            ]))),
        ),
        draft(
            None,
            EventData::TurnEnd(TurnEnd {
                kind: TurnEndKind::Completed,
                message: None,
            }),
        ),
    ];
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            for event in events {
                log.append(event, AppendUrgency::Durable).await.unwrap();
            }
            log.barrier().await.unwrap();
        });
    drop(log);
    let page = dir.path().join("big.html");
    let replay = assert_cmd::Command::cargo_bin("toolrail")
        .unwrap()
        .args([
            "replay",
            store
                .path_of(&SessionId::new("big"))
                .unwrap()
                .to_str()
                .unwrap(),
        ])
        .args(["--html", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(
        size < 600_000,
        "the page holds {size} bytes of a 5 MB output"
    );
    let profile = dir.path().join("profile");
    let dom = dom_of(&chromium, &profile, &page);
    let details = dom
        .find("<details class=\"long-output\"")
        .map(|at| &dom[at..dom[at..].find('>').map_or(dom.len(), |end| at + end)])
        .unwrap_or_else(|| panic!("no collapsed output"));
    assert!(!details.contains(" open"), "collapsed: {details}");
    assert!(
        details.contains(&format!("data-bytes=\"{}\"", big.len())),
        "{details}"
    );
    assert!(
        dom.contains("200000 lines, 5.0 MB</summary>"),
        "the summary names its size"
    );
    assert!(dom.contains("bytes left out of the page (the session log holds them)"));
    assert!(dom.contains("row 000000 of the export") && dom.contains("row 099999 of the export"));
    screenshot(&chromium, &profile, &page, "collapsed-output-page.png");
}
