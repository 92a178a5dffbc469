//! Scanning a JSONL session: the envelopes of every line, payloads decoded when asked, and
//! what is decoded is what reading the whole file gives — for logs this build writes, for the
//! logs an older build wrote (the fixtures of 02617dc), and for lines another writer wrote.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
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

fn draft(call_id: Option<&str>, data: EventData) -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(2)),
        call_id: call_id.map(CallId::from),
        data,
    }
}

/// Scanning agrees with reading whole: same envelopes, same events once decoded.
fn assert_scan_is_read(store: &JsonlStore, id: &SessionId) {
    let read = store.read(id).unwrap();
    let scanned = store.scan(id).unwrap();
    assert_eq!(scanned.len(), read.events.len());
    assert_eq!(scanned.torn_bytes(), read.torn_bytes);
    for (envelope, event) in scanned.envelopes().zip(&read.events) {
        assert_eq!(envelope.seq(), event.seq);
        assert_eq!(envelope.ts(), event.ts);
        assert_eq!(envelope.kind(), event.data.kind());
        assert_eq!(envelope.turn(), event.turn);
        assert_eq!(envelope.step(), event.step);
        assert_eq!(
            envelope.call_id(),
            event.call_id.as_ref().map(CallId::as_str)
        );
    }
    assert_eq!(scanned.events().unwrap(), read.events);
}

#[test]
fn logs_an_older_build_wrote_scan_as_they_read() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../presenters/tests/fixtures/02617dc");
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    for name in ["demo", "more", "code"] {
        std::fs::copy(
            fixtures.join(format!("{name}.jsonl")),
            dir.path().join(format!("{name}.jsonl")),
        )
        .unwrap();
        let id = SessionId::new(name);
        assert_scan_is_read(&store, &id);
        assert!(store.scan(&id).unwrap().len() > 10, "{name} has its events");
    }
}

#[tokio::test]
async fn what_this_build_writes_scans_as_it_reads_large_values_included() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None)
        .unwrap()
        .with_blob_cap(256);
    let log = store.create(start("mixed")).unwrap();
    let big = "y".repeat(2_000);
    let record = ToolResultRecord {
        value: Some(json!({ "text": big })),
        ..ToolResultRecord::success(vec![ContentBlock::text("kept inline")])
    };
    for data in [
        EventData::TurnStart(TurnStart {
            user: vec![ContentBlock::text("with \"quotes\" and \\ and \n")],
            trace: None,
            caller: None,
            client: false,
        }),
        EventData::StepStart(StepStart::default()),
        EventData::ToolStart(ToolStart {
            timeout_ms: Some(5),
        }),
        EventData::ToolResult(Arc::new(record)),
        EventData::StepEnd(StepEnd::default()),
    ] {
        // A call id with characters the envelope must escape reads the general way.
        log.append(draft(Some("c\"1\\é"), data), AppendUrgency::Buffered)
            .await
            .unwrap();
    }
    log.append(
        draft(None, EventData::StepEnd(StepEnd::default())),
        AppendUrgency::Buffered,
    )
    .await
    .unwrap();
    drop(log);
    let id = SessionId::new("mixed");
    assert_scan_is_read(&store, &id);
    let scanned = store.scan(&id).unwrap();
    let EventData::ToolResult(loaded) = scanned.event(4).unwrap().data else {
        panic!("event 5 is the result");
    };
    assert_eq!(
        loaded.value,
        Some(json!({ "text": big })),
        "put back from the shelf"
    );
}

#[test]
fn lines_another_writer_wrote_scan_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let lines = [
        r#"{"seq":1,"ts":"2026-12-02T12:00:00.000Z","kind":"session/start","data":{"format_version":1,"session_id":"other","tools":[]}}"#,
        // `data` first, extra fields, spaces: not as this store writes, read by serde.
        r#"{ "data": {"usage": null}, "kind": "step/end", "seq": 2, "extra": [1, {"a": "}"}], "ts": "2026-12-02T12:00:01.000Z", "turn": 1 }"#,
        // A kind this version does not know is kept as it is.
        r#"{"seq":3,"ts":"2026-12-02T12:00:02.000Z","kind":"future/kind","data":{"anything":true}}"#,
    ];
    std::fs::write(dir.path().join("other.jsonl"), lines.join("\n") + "\n").unwrap();
    let id = SessionId::new("other");
    assert_scan_is_read(&store, &id);
    let scanned = store.scan(&id).unwrap();
    assert_eq!(scanned.envelope(1).unwrap().kind(), "step/end");
    assert_eq!(scanned.envelope(2).unwrap().kind(), "future/kind");
}

#[tokio::test]
async fn torn_tails_gaps_and_bad_payloads_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let log = store.create(start("s")).unwrap();
    for _ in 0..3 {
        log.append(
            draft(None, EventData::StepEnd(StepEnd::default())),
            AppendUrgency::Buffered,
        )
        .await
        .unwrap();
    }
    drop(log);
    let id = SessionId::new("s");
    let path = store.path_of(&id).unwrap();
    let whole = std::fs::read(&path).unwrap();
    let append = |bytes: &[u8]| {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    };

    // A torn last line, with or without its newline, is left out and reported, as by `read`.
    for torn in [&b"{\"seq\":5,\"ts\""[..], b"{\"seq\":5,\"ts\":\"2026-12-02T12:00:00.000Z\",\"kind\":\"step/end\",\"data\":{\"usage\":[}\n"] {
        std::fs::write(&path, &whole).unwrap();
        append(torn);
        let scanned = store.scan(&id).unwrap();
        assert_eq!((scanned.len(), scanned.torn_bytes()), (4, torn.len() as u64));
        assert_scan_is_read(&store, &id);
    }

    // A gap before the end is corruption, naming the line.
    std::fs::write(&path, &whole).unwrap();
    append(b"{\"seq\":9,\"ts\":\"2026-12-02T12:00:00.000Z\",\"kind\":\"step/end\",\"data\":{}}\n");
    append(b"{\"seq\":10,\"ts\":\"2026-12-02T12:00:00.000Z\",\"kind\":\"step/end\",\"data\":{}}\n");
    match store.scan(&id) {
        Err(StoreError::Corrupt { line: 5, why, .. }) => assert!(why.contains("seq 9"), "{why}"),
        other => panic!("{other:?}"),
    }

    // A payload that does not decode, before the end: the scan stands, decoding it names it.
    std::fs::write(&path, &whole).unwrap();
    append(b"{\"seq\":5,\"ts\":\"2026-12-02T12:00:00.000Z\",\"kind\":\"tool/start\",\"data\":{\"timeout_ms\":\"soon\"}}\n");
    append(b"{\"seq\":6,\"ts\":\"2026-12-02T12:00:00.000Z\",\"kind\":\"step/end\",\"data\":{}}\n");
    let scanned = store.scan(&id).unwrap();
    assert_eq!(scanned.len(), 6);
    assert!(scanned.event(5).is_ok());
    match scanned.event(4) {
        Err(StoreError::Corrupt { line: 5, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(store.read(&id).is_err(), "reading whole refuses it at once");

    // Not a session.
    std::fs::write(
        &path,
        b"{\"seq\":1,\"ts\":\"2026-12-02T12:00:00.000Z\",\"kind\":\"step/end\",\"data\":{}}\n",
    )
    .unwrap();
    assert!(matches!(
        store.scan(&id),
        Err(StoreError::NotASession { .. })
    ));
}
