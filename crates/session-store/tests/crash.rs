//! Crash test with real processes: a child appends in `strict` mode and reports each `seq`
//! once its append returned; the parent kills it with SIGKILL at random moments. After every
//! kill the reopened log must hold every reported `seq`, open cleanly (a torn tail cut), and
//! recovery must classify the interrupted call against the marker files the child wrote right
//! after each `tool/start` returned. The child is this test binary, re-run in child mode.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;
use toolrail_test_support::rng::SeededRng;

const CHILD_ENV: &str = "TOOLRAIL_CRASH_CHILD_DIR";
const ITERATIONS: u64 = 100;

/// Child mode (only when the parent sets the variable): append calls until killed.
#[tokio::test]
async fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let store = JsonlStore::new(&dir, Durability::Strict).unwrap();
    let log = store
        .create(SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("crash"),
            tools: vec![],
            meta: None,
        })
        .unwrap();
    let draft = |call: Option<&str>, data: EventData| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    };
    log.append(
        draft(
            None,
            EventData::TurnStart(TurnStart {
                user: vec![],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        AppendUrgency::Durable,
    )
    .await
    .unwrap();
    for n in 0..100_000u32 {
        let id = format!("c{n}");
        let call = AssistantBlock::ToolCall {
            call_id: CallId::from(id.as_str()),
            name: "write".into(),
            arguments_raw: "{}".into(),
        };
        let message = AssistantMessage {
            blocks: vec![call],
            stop_reason: StopReason::ToolCalls,
        };
        log.append(
            draft(None, EventData::AssistantMessage(message)),
            AppendUrgency::Buffered,
        )
        .await
        .unwrap();
        let recorded = ToolCall {
            index: 0,
            name: "write".into(),
            arguments_raw: "{}".into(),
            source: None,
            version: None,
            trace: None,
        };
        log.append(
            draft(Some(&id), EventData::ToolCall(recorded)),
            AppendUrgency::Buffered,
        )
        .await
        .unwrap();
        let start = log
            .append(
                draft(Some(&id), EventData::ToolStart(ToolStart::default())),
                AppendUrgency::Durable,
            )
            .await
            .unwrap();
        println!("seq {start}");
        std::fs::write(dir.join(format!("marker-{id}")), b"started").unwrap();
        let result = EventData::ToolResult(Arc::new(ToolResultRecord::success(vec![
            ContentBlock::text("ok"),
        ])));
        let done = log
            .append(draft(Some(&id), result), AppendUrgency::Durable)
            .await
            .unwrap();
        println!("seq {done}");
    }
}

fn markers(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            entry
                .ok()?
                .file_name()
                .to_str()?
                .strip_prefix("marker-")
                .map(str::to_owned)
        })
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn killed_writers_lose_nothing_they_reported_and_recovery_tells_the_truth() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut rng = SeededRng::new(0x7001_2A11_5EED);
    let started = Instant::now();
    let mut unknown_seen = 0;
    let mut effective = 0;
    for iteration in 0..ITERATIONS {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the crash test is bounded in time"
        );
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|line| {
                    line.strip_prefix("seq ")
                        .and_then(|n| n.parse::<u64>().ok())
                })
                .collect::<Vec<u64>>()
        });
        std::thread::sleep(Duration::from_millis(20 + rng.next_u64() % 120));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let reported = reader.join().unwrap();

        let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
        let id = SessionId::new("crash");
        if !dir.path().join("crash.jsonl").exists() {
            assert!(
                reported.is_empty(),
                "iteration {iteration}: nothing can be reported before the file exists"
            );
            continue;
        }
        let opened = match store.open(&id) {
            Ok(opened) => opened,
            Err(StoreError::NotASession { .. }) if reported.is_empty() => continue, // killed inside create
            Err(error) => panic!("iteration {iteration}: {error}"),
        };
        let last = opened.events.len() as u64;
        if !reported.is_empty() {
            effective += 1;
        }
        for seq in &reported {
            assert!(
                *seq <= last,
                "iteration {iteration}: seq {seq} was reported durable but the log ends at {last}"
            );
        }
        let report = recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log)
            .await
            .unwrap();
        // Every marker names a call whose start is in the log.
        let records = call_records(&opened.events);
        for marker in markers(dir.path()) {
            let record = records
                .iter()
                .find(|record| record.call_id.as_str() == marker);
            assert!(
                record.is_some_and(|record| record.started_at.is_some()),
                "iteration {iteration}: {marker} acted but its tool/start is not in the log"
            );
        }
        // The interrupted call is classified by whether its start was logged.
        for (call_id, code) in &report.repaired {
            let started = records
                .iter()
                .any(|record| &record.call_id == call_id && record.started_at.is_some());
            let expected = if started {
                ErrorCode::ToolOutcomeUnknown
            } else {
                ErrorCode::ToolNotStarted
            };
            assert_eq!(
                code.as_ref(),
                Some(&expected),
                "iteration {iteration}: {call_id}"
            );
            if started {
                unknown_seen += 1;
            }
            if !started {
                assert!(
                    !markers(dir.path()).contains(&call_id.to_string()),
                    "iteration {iteration}: NOT_STARTED for a call that acted"
                );
            }
        }
        drop(opened);
        let reopened = store.open(&id).unwrap();
        assert_eq!(
            reopened.torn_bytes_dropped, 0,
            "iteration {iteration}: repaired logs open clean"
        );
        let again = recover(&reopened.events, 0, &[], &reopened.log)
            .await
            .unwrap();
        assert!(
            again.is_empty(),
            "iteration {iteration}: recovery is idempotent"
        );
    }
    // With 100 random kills some must land between a start and its result, or the test
    // would not be testing what it claims.
    assert!(unknown_seen > 0, "no kill landed inside a running call");
    assert!(
        effective >= ITERATIONS / 2,
        "only {effective} of {ITERATIONS} kills came after the child had appended"
    );
}
