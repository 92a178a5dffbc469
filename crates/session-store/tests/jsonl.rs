//! The JSONL store: files that read back exactly, `seq` dense under concurrent appenders,
//! torn tails cut and reported, corruption named by line, never a panic.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::io::Write;
use std::sync::Arc;

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;

fn start(id: &str) -> SessionStart {
    SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools: Vec::new(),
        meta: None,
    }
}

fn draft(n: u32) -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(n)),
        call_id: Some(CallId::from(format!("c{n}"))),
        data: EventData::ToolStart(ToolStart {
            timeout_ms: Some(u64::from(n)),
        }),
    }
}

#[tokio::test]
async fn events_read_back_exactly_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("s1")).unwrap();
    assert_eq!(log.append(draft(1), AppendUrgency::Durable).await, Ok(2));
    assert_eq!(log.append(draft(2), AppendUrgency::Buffered).await, Ok(3));
    log.durable_barrier().await.unwrap();
    drop(log);

    let opened = store.open(&SessionId::new("s1")).unwrap();
    assert_eq!(opened.torn_bytes_dropped, 0);
    let seqs: Vec<u64> = opened.events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(opened.events[0].data.kind(), "session/start");
    assert_eq!(
        opened.events[2].call_id.as_ref().map(CallId::as_str),
        Some("c2")
    );
    // Appends continue after the last event.
    assert_eq!(
        opened.log.append(draft(3), AppendUrgency::Durable).await,
        Ok(4)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appenders_keep_seq_dense_and_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    for durability in [Durability::Strict, Durability::Batched, Durability::None] {
        let store = JsonlStore::new(dir.path(), durability).unwrap();
        let id = format!("{durability:?}");
        let log = Arc::new(store.create(start(&id)).unwrap());
        let mut tasks = Vec::new();
        for appender in 0..8u32 {
            let log = Arc::clone(&log);
            tasks.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for n in 0..200u32 {
                    let urgency = if n % 3 == 0 {
                        AppendUrgency::Durable
                    } else {
                        AppendUrgency::Buffered
                    };
                    seqs.push(
                        log.append(draft(appender * 1000 + n), urgency)
                            .await
                            .unwrap(),
                    );
                }
                seqs
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            let seqs = task.await.unwrap();
            assert!(
                seqs.windows(2).all(|pair| pair[0] < pair[1]),
                "one appender's seqs increase"
            );
            all.extend(seqs);
        }
        all.sort_unstable();
        assert_eq!(
            all,
            (2..=1601).collect::<Vec<u64>>(),
            "{durability:?}: dense, no repeats"
        );
        log.durable_barrier().await.unwrap();
        drop(log);
        let opened = store.open(&SessionId::new(&id)).unwrap();
        assert_eq!(opened.events.len(), 1601);
        assert!(
            opened
                .events
                .iter()
                .enumerate()
                .all(|(at, event)| event.seq == at as u64 + 1)
        );
    }
}

fn append_raw(path: &std::path::Path, bytes: &[u8]) {
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(bytes).unwrap();
}

#[tokio::test]
async fn a_torn_last_line_is_cut_reported_and_gone_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("torn")).unwrap();
    log.append(draft(1), AppendUrgency::Durable).await.unwrap();
    let path = store.path_of(&SessionId::new("torn")).unwrap();
    drop(log);
    let clean_len = std::fs::metadata(&path).unwrap().len();
    let torn = br#"{"seq":3,"ts":"2026-11-30T17:48:29.123Z","kind":"tool/st"#;
    append_raw(&path, torn);

    let opened = store.open(&SessionId::new("torn")).unwrap();
    assert_eq!(opened.torn_bytes_dropped, torn.len() as u64);
    assert_eq!(opened.events.len(), 2);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        clean_len,
        "cut back to the last good line"
    );
    assert_eq!(
        opened.log.append(draft(2), AppendUrgency::Durable).await,
        Ok(3)
    );
    drop(opened);
    let again = store.open(&SessionId::new("torn")).unwrap();
    assert_eq!(again.torn_bytes_dropped, 0, "a repaired file opens clean");
    assert_eq!(again.events.len(), 3);
}

#[tokio::test]
async fn a_whole_last_event_without_its_newline_is_kept_and_the_next_append_starts_a_line() {
    // A committed result whose line lost only its final newline (a crash between the last
    // byte and the newline) is the result that was appended: recovery must not call it an
    // unknown outcome.
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("nonl")).unwrap();
    let path = store.path_of(&SessionId::new("nonl")).unwrap();
    let at = |call: Option<&str>, data: EventData| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    };
    let message = AssistantMessage {
        blocks: vec![AssistantBlock::ToolCall {
            call_id: CallId::from("c1"),
            name: "write".into(),
            arguments_raw: "{}".into(),
        }],
        stop_reason: StopReason::ToolCalls,
    };
    let recorded = ToolCall {
        index: 0,
        name: "write".into(),
        arguments_raw: "{}".into(),
        source: None,
        version: None,
        trace: None,
    };
    let result = Arc::new(ToolResultRecord::success(vec![ContentBlock::text(
        "written",
    )]));
    for draft in [
        at(
            None,
            EventData::TurnStart(TurnStart {
                user: vec![],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        at(None, EventData::AssistantMessage(message)),
        at(Some("c1"), EventData::ToolCall(recorded)),
        at(Some("c1"), EventData::ToolStart(ToolStart::default())),
        at(Some("c1"), EventData::ToolResult(Arc::clone(&result))),
    ] {
        log.append(draft, AppendUrgency::Durable).await.unwrap();
    }
    drop(log);
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(whole.last(), Some(&b'\n'));
    std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();

    // Reading (no lock, no repair) sees the result too.
    let read = store.read(&SessionId::new("nonl")).unwrap();
    assert_eq!((read.events.len(), read.torn_bytes), (6, 0));

    let opened = store.open(&SessionId::new("nonl")).unwrap();
    assert_eq!(opened.torn_bytes_dropped, 0);
    assert_eq!(opened.events.len(), 6);
    assert_eq!(
        opened.events[5].data,
        EventData::ToolResult(Arc::clone(&result))
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        whole,
        "the newline is put back before anything else is appended"
    );
    let report = recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log)
        .await
        .unwrap();
    assert!(report.repaired.is_empty(), "{report:?}");
    drop(opened);

    let again = store.open(&SessionId::new("nonl")).unwrap();
    assert_eq!(again.torn_bytes_dropped, 0);
    let kinds: Vec<&str> = again.events.iter().map(|event| event.data.kind()).collect();
    assert_eq!(
        kinds[5..],
        ["tool/result", "recovery/repaired", "turn/end"],
        "recovery appended on lines of their own"
    );
}

#[tokio::test]
async fn a_last_line_without_its_newline_that_is_not_the_next_event_is_torn() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    drop(store.create(start("nonl")).unwrap());
    let path = store.path_of(&SessionId::new("nonl")).unwrap();
    let clean_len = std::fs::metadata(&path).unwrap().len();
    // Whole JSON, but it repeats seq 1: not the event this file can hold next.
    let line = br#"{"seq":1,"ts":"2026-11-30T17:48:29.123Z","kind":"step/end","data":{}}"#;
    append_raw(&path, line);
    let opened = store.open(&SessionId::new("nonl")).unwrap();
    assert_eq!(opened.torn_bytes_dropped, line.len() as u64);
    assert_eq!(opened.events.len(), 1);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), clean_len);
}

#[tokio::test]
async fn a_corrupt_line_before_the_end_is_an_error_naming_it_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("bad")).unwrap();
    let path = store.path_of(&SessionId::new("bad")).unwrap();
    drop(log);
    append_raw(&path, b"this is not json\n");
    append_raw(
        &path,
        br#"{"seq":3,"ts":"2026-11-30T17:48:29.123Z","kind":"step/end","data":{}}"#,
    );
    append_raw(&path, b"\n");
    let before = std::fs::read(&path).unwrap();
    let error = store.open(&SessionId::new("bad")).err().unwrap();
    let text = error.to_string();
    assert!(
        matches!(error, StoreError::Corrupt { line: 2, .. }),
        "{text}"
    );
    assert!(text.contains("line 2"), "{text}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "nothing is cut from a corrupt file"
    );
}

#[tokio::test]
async fn seq_gaps_and_repeats_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    for (id, seq) in [("gap", 3), ("repeat", 1)] {
        let log = store.create(start(id)).unwrap();
        let path = store.path_of(&SessionId::new(id)).unwrap();
        drop(log);
        append_raw(&path, format!("{{\"seq\":{seq},\"ts\":\"2026-11-30T17:48:29.123Z\",\"kind\":\"step/end\",\"data\":{{}}}}\n").as_bytes());
        let error = store.open(&SessionId::new(id)).err().unwrap();
        assert!(
            error
                .to_string()
                .contains(&format!("seq {seq} where 2 was expected")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn unknown_kinds_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("future")).unwrap();
    let path = store.path_of(&SessionId::new("future")).unwrap();
    drop(log);
    let line = r#"{"seq":2,"ts":"2026-11-30T17:48:29.123Z","kind":"x-next/thing","data":{"a":1}}"#;
    append_raw(&path, format!("{line}\n").as_bytes());
    let opened = store.open(&SessionId::new("future")).unwrap();
    assert_eq!(opened.events[1].data.kind(), "x-next/thing");
    assert_eq!(serde_json::to_string(&opened.events[1]).unwrap(), line);
}

#[tokio::test]
async fn bad_names_existing_sessions_and_foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    for bad in ["../escape", "", ".hidden", "a/b"] {
        assert!(
            matches!(
                store.create(start(bad)),
                Err(StoreError::InvalidSessionId { .. })
            ),
            "{bad}"
        );
    }
    drop(store.create(start("once")).unwrap());
    assert!(matches!(
        store.create(start("once")),
        Err(StoreError::Exists { .. })
    ));
    std::fs::write(
        dir.path().join("other.jsonl"),
        "{\"seq\":1,\"ts\":\"2026-11-30T17:48:29.123Z\",\"kind\":\"step/end\",\"data\":{}}\n",
    )
    .unwrap();
    let error = store.open(&SessionId::new("other")).err().unwrap();
    assert!(matches!(error, StoreError::NotASession { .. }), "{error}");
    let missing = store.open(&SessionId::new("missing")).err().unwrap();
    assert!(missing.to_string().contains("missing.jsonl"), "{missing}");
}

#[tokio::test]
async fn the_pipeline_writes_through_the_store_like_any_sink() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log: Arc<dyn EventSink> = Arc::new(store.create(start("sink")).unwrap());
    let seq = log.append(draft(7), AppendUrgency::Durable).await.unwrap();
    assert_eq!(seq, 2);
}

#[tokio::test]
async fn a_failed_group_is_taken_back_and_every_later_append_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict)
        .unwrap()
        .with_blob_cap(64);
    let log = store.create(start("fail")).unwrap();
    assert_eq!(log.append(draft(1), AppendUrgency::Durable).await, Ok(2));
    // Where the large values would go is a file, so the next group cannot be written.
    std::fs::write(dir.path().join("fail.blobs"), b"in the way").unwrap();
    let big = ToolResultRecord {
        value: Some(serde_json::json!("x".repeat(500))),
        ..ToolResultRecord::success(vec![])
    };
    let big = EventDraft {
        data: EventData::ToolResult(Arc::new(big)),
        ..draft(2)
    };
    let refused = log.append(big, AppendUrgency::Durable).await.unwrap_err();
    assert!(refused.to_string().contains("fail.blobs"), "{refused}");
    assert!(
        log.append(draft(3), AppendUrgency::Buffered).await.is_err(),
        "sticky"
    );
    assert!(log.durable_barrier().await.is_err());
    drop(log);
    let opened = store.open(&SessionId::new("fail")).unwrap();
    assert_eq!(
        opened.events.len(),
        2,
        "nothing of the failed group came back"
    );
}

#[tokio::test]
async fn a_session_is_open_in_one_log_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("one")).unwrap();
    let second = store.open(&SessionId::new("one")).err().unwrap();
    assert!(matches!(second, StoreError::Locked { .. }), "{second}");
    drop(log);
    let opened = store.open(&SessionId::new("one")).unwrap();
    assert!(matches!(
        store.open(&SessionId::new("one")),
        Err(StoreError::Locked { .. })
    ));
    drop(opened);
}

#[tokio::test]
async fn a_damaged_last_line_with_its_newline_is_torn() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    drop(store.create(start("garbage")).unwrap());
    let path = store.path_of(&SessionId::new("garbage")).unwrap();
    append_raw(&path, b"\0\0\0\0\0\0\0\0\n");
    let opened = store.open(&SessionId::new("garbage")).unwrap();
    assert_eq!(opened.torn_bytes_dropped, 9);
    assert_eq!(opened.events.len(), 1);
}

#[tokio::test]
async fn reading_changes_nothing_and_works_while_the_log_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("s1")).unwrap();
    log.append(draft(1), AppendUrgency::Durable).await.unwrap();
    // The log is still open (and locked for writers): reading does not need the lock.
    let read = store.read(&SessionId::new("s1")).unwrap();
    assert_eq!(read.events.len(), 2);
    assert_eq!(read.torn_bytes, 0);
    drop(log);
    // A torn tail is reported and left in the file.
    let path = store.path_of(&SessionId::new("s1")).unwrap();
    let whole = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"seq\":3,\"ts\"")
        .unwrap();
    let read = store.read(&SessionId::new("s1")).unwrap();
    assert_eq!((read.events.len(), read.torn_bytes), (2, 13));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole + 13);
}

#[test]
fn a_session_file_appears_whole_and_is_never_created_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store.create(start("once")).unwrap();
    drop(log);
    // The file holds its session/start from the moment it exists, and nothing else is left.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["once.jsonl"]);
    let opened = store.open(&SessionId::new("once")).unwrap();
    assert_eq!(opened.events.len(), 1);
    drop(opened);
    let again = store.create(start("once")).err();
    assert!(
        matches!(again, Some(StoreError::Exists { .. })),
        "{again:?}"
    );
    let text = std::fs::read_to_string(dir.path().join("once.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 1, "the first session is untouched");
}
