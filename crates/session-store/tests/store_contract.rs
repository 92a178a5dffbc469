//! One contract, every store: the same tests run against the JSONL files and SQLite, so a
//! store is a choice, not a format.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use serde_json::json;
use toolrail_session_log::details::Details;
use toolrail_session_log::elided::ElidedBlock;
use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;

fn start(id: &str, idempotent: &[&str]) -> SessionStart {
    let tools = ["write", "fetch"]
        .into_iter()
        .map(|name| ToolManifestEntry {
            name: name.into(),
            source: ToolSource::Builtin,
            version: "1".into(),
            read_only: false,
            idempotent: idempotent.contains(&name),
        })
        .collect();
    SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools,
        meta: None,
    }
}

fn draft(call: Option<&str>, data: EventData) -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    }
}

fn message(calls: &[(&str, &str)]) -> EventData {
    let blocks = calls
        .iter()
        .map(|(id, name)| AssistantBlock::ToolCall {
            call_id: CallId::from(*id),
            name: (*name).into(),
            arguments_raw: "{}".into(),
        })
        .collect();
    EventData::AssistantMessage(AssistantMessage {
        blocks,
        stop_reason: StopReason::ToolCalls,
    })
}

async fn round_trip<S: SessionStore>(store: S) {
    let log = store.create(start("rt", &[])).unwrap();
    assert_eq!(
        log.append(
            draft(None, EventData::StepStart(StepStart::default())),
            AppendUrgency::Durable
        )
        .await,
        Ok(2)
    );
    let future = EventData::from_parts("x-next/kind", json!({"kept": true})).unwrap();
    assert_eq!(
        log.append(draft(None, future), AppendUrgency::Buffered)
            .await,
        Ok(3)
    );
    log.barrier().await.unwrap();
    drop(log);
    let opened = store.open(&SessionId::new("rt")).unwrap();
    assert_eq!(opened.torn_bytes_dropped, 0);
    assert_eq!(
        opened
            .events
            .iter()
            .map(|e| e.data.kind())
            .collect::<Vec<_>>(),
        ["session/start", "step/start", "x-next/kind"]
    );
    let EventData::SessionStart(first) = &opened.events[0].data else {
        panic!()
    };
    assert_eq!(first.format_version, FORMAT_VERSION);
    assert_eq!(
        opened
            .log
            .append(
                draft(None, EventData::StepEnd(StepEnd::default())),
                AppendUrgency::Durable
            )
            .await,
        Ok(4)
    );
}

async fn concurrent_appenders_keep_seq_dense<S: SessionStore>(store: S) {
    let log = Arc::new(store.create(start("many", &[])).unwrap());
    let mut tasks = Vec::new();
    for appender in 0..8u32 {
        let log = Arc::clone(&log);
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for n in 0..100u32 {
                let urgency = if n % 4 == 0 {
                    AppendUrgency::Durable
                } else {
                    AppendUrgency::Buffered
                };
                let data = EventData::ToolStart(ToolStart {
                    timeout_ms: Some(u64::from(appender * 1000 + n)),
                });
                seqs.push(log.append(draft(None, data), urgency).await.unwrap());
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    let mut sent = std::collections::BTreeMap::new();
    for (appender, task) in tasks.into_iter().enumerate() {
        let seqs = task.await.unwrap();
        assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]));
        for (n, seq) in seqs.iter().enumerate() {
            sent.insert(*seq, (appender * 1000 + n) as u64);
        }
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (2..=801).collect::<Vec<u64>>());
    log.barrier().await.unwrap();
    drop(log);
    let opened = store.open(&SessionId::new("many")).unwrap();
    assert_eq!(opened.events.len(), 801);
    // Each stored event is the one its appender was given that seq for.
    for event in &opened.events[1..] {
        let EventData::ToolStart(start) = &event.data else {
            panic!("{:?}", event.data)
        };
        assert_eq!(
            start.timeout_ms,
            sent.get(&event.seq).copied(),
            "seq {}",
            event.seq
        );
    }
}

/// A crash is a log dropped mid-turn: recovery through the store answers what is open.
async fn recovery_cases<S: SessionStore>(store: S) {
    let log = store.create(start("crash", &["fetch"])).unwrap();
    let add = |call: Option<&'static str>, data: EventData| (call, data);
    let events = [
        add(
            None,
            EventData::TurnStart(TurnStart {
                user: vec![],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        add(
            None,
            message(&[
                ("a", "write"),
                ("b", "write"),
                ("c", "write"),
                ("d", "fetch"),
                ("e", "write"),
            ]),
        ),
        add(Some("a"), EventData::ToolStart(ToolStart::default())),
        add(
            Some("a"),
            EventData::ToolResult(Arc::new(ToolResultRecord::success(vec![
                ContentBlock::text("ok"),
            ]))),
        ),
        add(Some("b"), EventData::ToolStart(ToolStart::default())),
        add(
            Some("c"),
            EventData::ToolCall(ToolCall {
                index: 2,
                name: "write".into(),
                arguments_raw: "{}".into(),
                source: None,
                version: None,
                trace: None,
            }),
        ),
        add(Some("d"), EventData::ToolStart(ToolStart::default())),
    ];
    for (call, data) in events {
        log.append(draft(call, data), AppendUrgency::Durable)
            .await
            .unwrap();
    }
    drop(log);

    let opened = store.open(&SessionId::new("crash")).unwrap();
    let report = recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log)
        .await
        .unwrap();
    let codes: Vec<(&str, Option<&str>)> = report
        .repaired
        .iter()
        .map(|(id, code)| (id.as_str(), code.as_ref().map(ErrorCode::as_str)))
        .collect();
    assert_eq!(
        codes,
        [
            ("b", Some("TOOL_OUTCOME_UNKNOWN")),
            ("c", Some("TOOL_NOT_STARTED")),
            ("d", Some("TOOL_OUTCOME_UNKNOWN")),
            ("e", Some("TOOL_NOT_STARTED")),
        ]
    );
    drop(opened);

    let reopened = store.open(&SessionId::new("crash")).unwrap();
    let results: Vec<&ToolResultRecord> = reopened
        .events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolResult(record) if record.synthetic => Some(record.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(
        results[2].content[0]
            .as_text()
            .unwrap()
            .contains("idempotent: safe to retry"),
        "d is idempotent"
    );
    assert_eq!(reopened.events.last().unwrap().data.kind(), "turn/end");
    let again = recover(&reopened.events, 0, &[], &reopened.log)
        .await
        .unwrap();
    assert!(again.is_empty(), "opening a repaired log repairs nothing");
    // The conversation now answers every call.
    let answered = conversation(&reopened.events)
        .iter()
        .filter(|item| matches!(item, ConversationItem::ToolResult { .. }))
        .count();
    assert_eq!(answered, 5);
}

async fn names_and_existing_sessions<S: SessionStore>(store: S) {
    for bad in ["../escape", "", ".hidden", "a/b"] {
        assert!(
            matches!(
                store.create(start(bad, &[])),
                Err(StoreError::InvalidSessionId { .. })
            ),
            "{bad}"
        );
    }
    drop(store.create(start("once", &[])).unwrap());
    assert!(matches!(
        store.create(start("once", &[])),
        Err(StoreError::Exists { .. })
    ));
    let missing = store.open(&SessionId::new("missing")).err().unwrap();
    assert!(missing.to_string().contains("missing"), "{missing}");
}

async fn large_values_are_kept_beside_the_log_and_read_back<S: SessionStore>(store: S) {
    let big = "x".repeat(5_000);
    // A block cut for the model's cap: its whole is kept beside the log however small.
    let whole = ContentBlock::text("whole text, cut for the model ".repeat(4));
    let record = ToolResultRecord {
        value: Some(json!({ "text": big })),
        details: Some(Details::from_value(
            json!({ "kind": "read", "lines": [big.clone(), big.clone()] }),
        )),
        elided: vec![ElidedBlock::new(1, whole)],
        ..ToolResultRecord::success(vec![
            ContentBlock::text("small stays inline"),
            ContentBlock::text("whole text, […] for the model "),
        ])
    };
    let log = store.create(start("big", &[])).unwrap();
    let result = EventData::ToolResult(Arc::new(record.clone()));
    log.append(draft(Some("c1"), result.clone()), AppendUrgency::Durable)
        .await
        .unwrap();
    let dispatch = EventData::CodeDispatch(Box::new(CodeDispatch {
        parent_call_id: CallId::from("c1"),
        name: "read".into(),
        result: record.clone(),
    }));
    log.append(
        draft(Some("c1:code:1"), dispatch.clone()),
        AppendUrgency::Durable,
    )
    .await
    .unwrap();
    // The same value twice is kept once (content addressing).
    log.append(draft(Some("c2"), result.clone()), AppendUrgency::Durable)
        .await
        .unwrap();
    drop(log);
    let opened = store.open(&SessionId::new("big")).unwrap();
    assert_eq!(opened.events[1].data, result, "the value came back whole");
    assert_eq!(opened.events[2].data, dispatch);
    assert_eq!(opened.events[3].data, result);
    let EventData::ToolResult(loaded) = &opened.events[1].data else {
        panic!()
    };
    // Readers never see blob references: the record has no field for them.
    assert!(
        loaded.elided[0].whole.is_some(),
        "the whole block came back"
    );
}

macro_rules! contract {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;

            #[tokio::test]
            async fn round_trip() {
                let dir = tempfile::tempdir().unwrap();
                super::round_trip($make(dir.path(), Durability::Strict)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_appenders_keep_seq_dense() {
                for durability in [Durability::Strict, Durability::Batched, Durability::None] {
                    let dir = tempfile::tempdir().unwrap();
                    super::concurrent_appenders_keep_seq_dense($make(dir.path(), durability)).await;
                }
            }

            #[tokio::test]
            async fn recovery_cases() {
                let dir = tempfile::tempdir().unwrap();
                super::recovery_cases($make(dir.path(), Durability::Strict)).await;
            }

            #[tokio::test]
            async fn large_values_are_kept_beside_the_log_and_read_back() {
                let dir = tempfile::tempdir().unwrap();
                let store = ($make)(dir.path(), Durability::Strict).with_blob_cap(1024);
                super::large_values_are_kept_beside_the_log_and_read_back(store).await;
            }

            #[tokio::test]
            async fn names_and_existing_sessions() {
                let dir = tempfile::tempdir().unwrap();
                super::names_and_existing_sessions($make(dir.path(), Durability::Batched)).await;
            }
        }
    };
}

contract!(jsonl, |dir: &std::path::Path, durability| JsonlStore::new(
    dir, durability
)
.unwrap());
contract!(sqlite, |dir: &std::path::Path, durability| {
    SqliteStore::new(dir.join("sessions.db"), durability).unwrap()
});

/// The same contract against a real PostgreSQL server, a fresh database per store.
mod postgres_store {
    use super::*;
    use toolrail_test_support::pg::PgServer;

    fn store(server: &PgServer, durability: Durability) -> PostgresStore {
        PostgresStore::connect(&server.fresh_database(), durability).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn round_trip() {
        let Some(server) = PgServer::start() else {
            return;
        };
        super::round_trip(store(&server, Durability::Strict)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_appenders_keep_seq_dense() {
        let Some(server) = PgServer::start() else {
            return;
        };
        for durability in [Durability::Strict, Durability::Batched, Durability::None] {
            super::concurrent_appenders_keep_seq_dense(store(&server, durability)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn recovery_cases() {
        let Some(server) = PgServer::start() else {
            return;
        };
        super::recovery_cases(store(&server, Durability::Strict)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_values_are_kept_beside_the_log_and_read_back() {
        let Some(server) = PgServer::start() else {
            return;
        };
        let store = store(&server, Durability::Strict).with_blob_cap(1024);
        super::large_values_are_kept_beside_the_log_and_read_back(store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn names_and_existing_sessions() {
        let Some(server) = PgServer::start() else {
            return;
        };
        super::names_and_existing_sessions(store(&server, Durability::Batched)).await;
    }
}

#[tokio::test]
async fn sqlite_names_a_corrupt_row_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::new(&path, Durability::Strict).unwrap();
    drop(store.create(start("bad", &[])).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO events (session, seq, line) VALUES ('bad', 2, 'not json')",
        [],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO events (session, seq, line) VALUES ('bad', 3, '{\"seq\":3,\"ts\":\"2026-11-30T17:48:29.123Z\",\"kind\":\"step/end\",\"data\":{}}')",
        [],
    )
    .unwrap();
    let error = store.open(&SessionId::new("bad")).err().unwrap();
    assert!(
        matches!(error, StoreError::Corrupt { line: 2, .. }),
        "{error}"
    );
    let rows: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM events WHERE session = 'bad'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(rows, 3);
}

#[tokio::test]
async fn jsonl_lines_reference_large_values_and_a_missing_blob_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict)
        .unwrap()
        .with_blob_cap(1024);
    let log = store.create(start("spill", &[])).unwrap();
    let record = ToolResultRecord {
        value: Some(json!("y".repeat(4_000))),
        ..ToolResultRecord::success(vec![])
    };
    log.append(
        draft(Some("c1"), EventData::ToolResult(Arc::new(record))),
        AppendUrgency::Durable,
    )
    .await
    .unwrap();
    drop(log);
    let text = std::fs::read_to_string(store.path_of(&SessionId::new("spill")).unwrap()).unwrap();
    assert!(!text.contains("yyyy"), "the large value is not in the line");
    assert!(
        text.contains("\"value_blob\":{\"digest\":\"sha256:"),
        "{text}"
    );
    let blobs: Vec<_> = std::fs::read_dir(dir.path().join("spill.blobs"))
        .unwrap()
        .collect();
    assert_eq!(blobs.len(), 1);
    std::fs::remove_dir_all(dir.path().join("spill.blobs")).unwrap();
    let error = store.open(&SessionId::new("spill")).err().unwrap();
    assert!(
        matches!(error, StoreError::Corrupt { line: 2, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("cannot be read"), "{error}");
}

#[tokio::test]
async fn sqlite_keeps_large_values_in_the_blobs_table_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::new(&path, Durability::Strict)
        .unwrap()
        .with_blob_cap(1024);
    let log = store.create(start("spill", &[])).unwrap();
    let record = Arc::new(ToolResultRecord {
        value: Some(json!("z".repeat(4_000))),
        ..ToolResultRecord::success(vec![])
    });
    for call in ["c1", "c2"] {
        log.append(
            draft(Some(call), EventData::ToolResult(Arc::clone(&record))),
            AppendUrgency::Durable,
        )
        .await
        .unwrap();
    }
    drop(log);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let blobs: i64 = conn
        .query_row("SELECT COUNT(*) FROM blobs", [], |row| row.get(0))
        .unwrap();
    assert_eq!(blobs, 1);
    let inline: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM events WHERE line LIKE '%zzzz%'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(inline, 0);
}
