//! Crashes and the file tools: an interrupted write is resolved by the effect probe to what
//! really happened, and a process killed while writing leaves the old or the new content,
//! never a torn file. The crash child is this test binary, re-run in child mode.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::bench;
use toolrail_fs_tools::{FsEffectProbe, atomic_replace};
use toolrail_test_support::rng::SeededRng;
use toolrail_tools_core::log::{
    AppendUrgency, CallId, ErrorCode, EventData, EventDraft, EventSink, MemorySink, StepId,
    Timestamp, TurnId,
    event::{AssistantBlock, AssistantMessage, StepStart, StopReason, TurnStart},
    recover,
    recovery::EffectProbe,
};
use toolrail_tools_core::{CallRequest, pipeline::BatchControl};

/// Runs `write` until its `fs/write-intent` is logged and its result is refused (the session
/// "dies" there); returns the events as a reopened log would show them.
async fn interrupted_write(
    b: &support::Bench,
    path: &str,
    content: &str,
) -> Vec<toolrail_tools_core::log::Event> {
    let draft = |call_id: Option<&str>, data| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call_id.map(CallId::from),
        data,
    };
    let turn = EventData::TurnStart(TurnStart {
        user: vec![],
        trace: None,
        caller: None,
        client: false,
    });
    b.sink
        .append(draft(None, turn), AppendUrgency::Durable)
        .await
        .unwrap();
    b.sink
        .append(
            draft(None, EventData::StepStart(StepStart::default())),
            AppendUrgency::Durable,
        )
        .await
        .unwrap();
    let arguments = json!({"path": path, "content": content}).to_string();
    let message = AssistantMessage {
        blocks: vec![AssistantBlock::ToolCall {
            call_id: CallId::from("w1"),
            name: "write".to_owned(),
            arguments_raw: arguments.clone(),
        }],
        stop_reason: StopReason::ToolCalls,
    };
    b.sink
        .append(
            draft(None, EventData::AssistantMessage(message)),
            AppendUrgency::Durable,
        )
        .await
        .unwrap();
    // tool/call, tool/start, fs/write-intent, fs/... are accepted; the result is not.
    b.sink.refuse_after(3);
    let mut request = CallRequest::new("w1", 0, "write", arguments);
    request.turn = Some(TurnId(1));
    request.step = Some(StepId(1));
    let outcome = b
        .pipeline
        .execute_one(&b.tools, request, &BatchControl::default())
        .await;
    assert!(outcome.is_err(), "the result must not be committed");
    b.events()
}

async fn recovered(
    events: &[toolrail_tools_core::log::Event],
) -> (Option<ErrorCode>, String, String) {
    recovered_with(events, FsEffectProbe::new()).await
}

async fn recovered_with(
    events: &[toolrail_tools_core::log::Event],
    probe: FsEffectProbe,
) -> (Option<ErrorCode>, String, String) {
    let log = MemorySink::new();
    let probes: Vec<Arc<dyn EffectProbe>> = vec![Arc::new(probe)];
    let report = recover(events, 0, &probes, &log).await.unwrap();
    assert_eq!(report.repaired.len(), 1);
    let repaired = log.events();
    let result = repaired
        .iter()
        .find_map(|event| match &event.data {
            EventData::ToolResult(record) => Some(record.clone()),
            _ => None,
        })
        .unwrap();
    let note = repaired
        .iter()
        .find_map(|event| match &event.data {
            EventData::RecoveryRepaired(repaired) => Some(repaired.note.clone()),
            _ => None,
        })
        .unwrap();
    let text = result.content[0].as_text().unwrap().to_owned();
    (report.repaired[0].1.clone(), text, note)
}

#[tokio::test]
async fn an_interrupted_write_that_happened_is_recovered_as_completed() {
    let b = bench();
    let events = interrupted_write(&b, "done.txt", "written\n").await;
    assert_eq!(
        std::fs::read_to_string(b.path("done.txt")).unwrap(),
        "written\n"
    );
    let (code, text, note) = recovered(&events).await;
    assert_eq!(code, None, "{text}");
    assert!(
        text.contains("it completed") && text.contains("digest the write intended"),
        "{text}"
    );
    assert!(
        note.contains("w1: completed (") && note.contains("done.txt"),
        "{note}"
    );
}

#[tokio::test]
async fn an_interrupted_write_that_did_not_happen_is_recovered_as_such() {
    let b = bench();
    let events = interrupted_write(&b, "never.txt", "written\n").await;
    // As if the process had died before the rename: the file is as before (absent).
    std::fs::remove_file(b.path("never.txt")).unwrap();
    let (code, text, note) = recovered(&events).await;
    assert_eq!(code, Some(ErrorCode::ToolFailed));
    assert!(
        text.contains("did not happen")
            && text.contains("absent")
            && text.contains("Safe to retry"),
        "{text}"
    );
    assert!(note.contains("w1: TOOL_FAILED, did not happen ("), "{note}");
}

#[tokio::test]
async fn a_file_changed_since_leaves_the_outcome_unknown() {
    let b = bench();
    let events = interrupted_write(&b, "other.txt", "written\n").await;
    std::fs::write(b.path("other.txt"), "someone else\n").unwrap();
    let (code, text, _) = recovered(&events).await;
    assert_eq!(code, Some(ErrorCode::ToolOutcomeUnknown));
    assert!(text.contains("neither as before"), "{text}");
}

/// Recovery looks at the file a crashed session named: a FIFO put there since must not
/// block it (nothing opens it for reading), and leaves the outcome unknown.
#[tokio::test]
async fn a_fifo_where_the_file_was_leaves_the_outcome_unknown_without_blocking() {
    let b = bench();
    let events = interrupted_write(&b, "piped.txt", "written\n").await;
    std::fs::remove_file(b.path("piped.txt")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        b.path("piped.txt"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let (code, text, _) = tokio::time::timeout(Duration::from_secs(20), recovered(&events))
        .await
        .expect("recovery blocked on a FIFO");
    assert_eq!(code, Some(ErrorCode::ToolOutcomeUnknown), "{text}");
    assert!(text.contains("is not a regular file"), "{text}");
}

#[tokio::test]
async fn a_write_stopped_before_its_intent_did_not_happen_in_a_strict_log() {
    let b = bench();
    let events = interrupted_write(&b, "early.txt", "written\n").await;
    // As if the process had died after tool/start, before the intent was logged: then the
    // tool had not touched the file.
    let events: Vec<_> = events
        .into_iter()
        .filter(|event| !matches!(event.data, EventData::FsWriteIntent(_)))
        .collect();
    std::fs::remove_file(b.path("early.txt")).unwrap();
    let (code, text, _) = recovered(&events).await;
    assert_eq!(code, Some(ErrorCode::ToolOutcomeUnknown), "{text}");
    let (code, text, _) = recovered_with(&events, FsEffectProbe::for_strict_log()).await;
    assert_eq!(code, Some(ErrorCode::ToolFailed), "{text}");
    assert!(text.contains("no write intent was logged"), "{text}");
}

const CHILD_ENV: &str = "TOOLRAIL_FS_CRASH_CHILD_FILE";
const ITERATIONS: u64 = 40;
const SIZE: usize = 1 << 20;

/// Version `n` of the file: 1 MiB of its own line, so any mix of two versions shows.
fn version(n: u64) -> Vec<u8> {
    let line = format!("version {n:08}\n");
    line.as_bytes().iter().copied().cycle().take(SIZE).collect()
}

/// Child mode: replace the file with version after version, reporting each one done.
#[test]
fn crash_child() {
    let Ok(file) = std::env::var(CHILD_ENV) else {
        return;
    };
    let file = PathBuf::from(file);
    for n in 1..u64::MAX {
        println!("start {n}");
        atomic_replace(&file, &version(n)).unwrap();
        println!("wrote {n}");
    }
}

#[test]
fn a_writer_killed_at_any_moment_leaves_a_whole_version() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut rng = SeededRng::new(0xF11E_5AFE_0001);
    let started = Instant::now();
    let (mut killed_mid_write, mut temporaries_left) = (0, 0);
    for iteration in 0..ITERATIONS {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "bounded in time"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("target.txt");
        std::fs::write(&file, version(0)).unwrap();
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // The last version reported written, and the last one started.
        let reader = std::thread::spawn(move || {
            let number = |line: &str, word: &str| {
                line.split(word)
                    .nth(1)
                    .and_then(|n| n.trim().parse::<u64>().ok())
            };
            let (mut wrote, mut started) = (None, None);
            // The first report shares its line with the harness's `test crash_child ... `.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                wrote = number(&line, "wrote ").or(wrote);
                started = number(&line, "start ").or(started);
            }
            (wrote, started)
        });
        std::thread::sleep(Duration::from_millis(10 + rng.next_u64() % 90));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (wrote, started) = reader.join().unwrap();
        let last_reported = wrote.unwrap_or(0);
        let inside_a_write = started.unwrap_or(0) > last_reported;
        let content = std::fs::read(&file).unwrap();
        assert_eq!(content.len(), SIZE, "iteration {iteration}: a torn file");
        let first_line = content.split(|byte| *byte == b'\n').next().unwrap();
        let shown = String::from_utf8_lossy(first_line).into_owned();
        let n: u64 = shown.strip_prefix("version ").unwrap().parse().unwrap();
        assert_eq!(
            content,
            version(n),
            "iteration {iteration}: a mix of versions"
        );
        assert!(
            n == last_reported || n == last_reported + 1,
            "iteration {iteration}: version {n} after {last_reported} was reported"
        );
        let left_a_temporary = dir_has_temporary(dir.path());
        if inside_a_write {
            killed_mid_write += 1;
        }
        temporaries_left += usize::from(left_a_temporary);
        // Whatever the kill left behind, the next write into the folder removes it.
        atomic_replace(&file, &version(0)).unwrap();
        assert!(
            !dir_has_temporary(dir.path()),
            "iteration {iteration}: a temporary file stayed after the next write"
        );
    }
    // The kills must have landed inside writes some of the time, or the test proves little.
    assert!(killed_mid_write > 0, "no kill landed inside a write");
    println!(
        "{killed_mid_write} of {ITERATIONS} kills landed inside a write; {temporaries_left} left a named temporary file"
    );
}

fn dir_has_temporary(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        entry
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp")
    })
}
