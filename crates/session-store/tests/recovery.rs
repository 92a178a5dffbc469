//! Recovery of a session kept in a JSONL file: a crash mid-turn is repaired durably, once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;

#[tokio::test]
async fn a_crashed_jsonl_session_is_repaired_durably_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store
        .create(SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("crash"),
            tools: vec![],
            meta: None,
        })
        .unwrap();
    let add = |turn: u32, call: Option<&str>, data: EventData| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(turn)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    };
    log.append(
        add(
            1,
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
    let blocks = vec![AssistantBlock::ToolCall {
        call_id: CallId::from("c1"),
        name: "write".into(),
        arguments_raw: "{}".into(),
    }];
    log.append(
        add(
            1,
            None,
            EventData::AssistantMessage(AssistantMessage {
                blocks,
                stop_reason: StopReason::ToolCalls,
            }),
        ),
        AppendUrgency::Durable,
    )
    .await
    .unwrap();
    log.append(
        add(1, Some("c1"), EventData::ToolStart(ToolStart::default())),
        AppendUrgency::Durable,
    )
    .await
    .unwrap();
    let path = store.path_of(&SessionId::new("crash")).unwrap();
    drop(log);
    // The crash also tore a line.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, br#"{"seq":5,"ts":"2026-11"#).unwrap();
    drop(file);

    let opened = store.open(&SessionId::new("crash")).unwrap();
    let report = recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log)
        .await
        .unwrap();
    assert_eq!(
        report.repaired,
        vec![(CallId::from("c1"), Some(ErrorCode::ToolOutcomeUnknown))]
    );
    drop(opened);

    let reopened = store.open(&SessionId::new("crash")).unwrap();
    let kinds: Vec<&str> = reopened
        .events
        .iter()
        .map(|event| event.data.kind())
        .collect();
    assert_eq!(kinds[4..], ["tool/result", "recovery/repaired", "turn/end"]);
    let EventData::RecoveryRepaired(repaired) = &reopened.events[5].data else {
        panic!()
    };
    assert_eq!(repaired.torn_bytes_dropped, 22);
    let again = recover(
        &reopened.events,
        reopened.torn_bytes_dropped,
        &[],
        &reopened.log,
    )
    .await
    .unwrap();
    assert!(again.is_empty(), "{again:?}");
}
