//! A scenario run at a place that already holds the session resumes it from the log: plan
//! mode as the log left it, the interrupted turn going on from its next scripted step, and
//! a session whose first worker died before its first turn seeded and run whole, and a
//! call its worker died asking about asked again with its own scripted answer.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use toolrail_runtime::Store;
use toolrail_session_log::{
    AppendUrgency, BoxFuture, CallId, ContentBlock, Event, EventData, EventDraft, EventSink,
    SessionId, StepId, Timestamp, TurnId,
    event::{
        ApprovalAnswer, ApprovalAsked, ApprovalDecided, AssistantBlock, AssistantMessage,
        DecidedBy, FORMAT_VERSION, PlanMode, SessionStart, StepStart, StopReason, TurnStart,
    },
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_testkit::{RESUME_MESSAGE, RunOptions, Scenario, ScenarioPlace};
use toolrail_tools_core::{ApprovalRequest, ApprovalService, CancellationToken};

/// The JSONL session `scenario` in a folder, as a place that holds it already: the run
/// reopens and recovers it, as a worker taking it over would.
fn reopened(dir: &Path) -> ScenarioPlace {
    ScenarioPlace::Store {
        store: Store::jsonl(dir).unwrap(),
        id: SessionId::new("scenario"),
    }
}

fn read(dir: &Path) -> Vec<Event> {
    JsonlStore::new(dir, Durability::Strict)
        .unwrap()
        .read(&SessionId::new("scenario"))
        .unwrap()
        .events
}

/// Where an event goes: its turn and step, if any.
type Place = Option<(u32, Option<u32>)>;

/// A log as a worker that died left it: `data` after `session/start`.
async fn died_with(dir: &Path, data: Vec<(Place, EventData)>) {
    let data = data.into_iter().map(|(place, data)| (place, None, data));
    died_with_calls(dir, data.collect()).await;
}

/// [`died_with`], each event naming its call, if any.
async fn died_with_calls(dir: &Path, data: Vec<(Place, Option<&str>, EventData)>) {
    let store = JsonlStore::new(dir, Durability::Strict).unwrap();
    let log = store
        .create(SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("scenario"),
            tools: Vec::new(),
            meta: None,
        })
        .unwrap();
    for (place, call, data) in data {
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn: place.map(|(turn, _)| TurnId(turn)),
            step: place.and_then(|(_, step)| step.map(StepId)),
            call_id: call.map(CallId::new),
            data,
        };
        log.append(draft, AppendUrgency::Durable).await.unwrap();
    }
    drop(log);
}

fn scenario() -> Scenario {
    Scenario::from_json(
        r#"{
          "config": {
            "tools": {"enabled": ["probe"]},
            "permissions": {"preset": "full-auto", "plan_mode": true}
          },
          "workspace": {"files": {"seed.txt": "seeded"}},
          "turns": [
            {
              "user": "one",
              "model": [
                {
                  "tool_calls": [{"id": "c1", "name": "probe", "arguments": "{}"}],
                  "stop_reason": "tool_use"
                },
                {
                  "tool_calls": [{"id": "c2", "name": "probe", "arguments": "{}"}],
                  "stop_reason": "tool_use"
                },
                {"text": "done", "stop_reason": "end_turn"}
              ]
            }
          ],
          "expect": {"results": {"c2": "GUARD_DENIED"}}
        }"#,
    )
    .unwrap()
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|event| event.data.kind()).collect()
}

#[tokio::test]
async fn a_resumed_session_keeps_plan_mode_and_goes_on_from_its_next_step() {
    let dir = tempfile::tempdir().unwrap();
    died_with(
        dir.path(),
        vec![
            (None, EventData::PlanMode(PlanMode { active: true })),
            (
                Some((1, None)),
                EventData::TurnStart(TurnStart {
                    user: vec![ContentBlock::text("one")],
                    trace: None,
                    caller: None,
                    client: false,
                }),
            ),
            (
                Some((1, Some(1))),
                EventData::StepStart(StepStart::default()),
            ),
            (
                Some((1, Some(1))),
                EventData::AssistantMessage(AssistantMessage {
                    blocks: vec![AssistantBlock::ToolCall {
                        call_id: CallId::new("c1"),
                        name: "probe".to_owned(),
                        arguments_raw: "{}".to_owned(),
                    }],
                    stop_reason: StopReason::ToolCalls,
                }),
            ),
        ],
    )
    .await;
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    let report = scenario()
        .run_with(
            dir.path(),
            RunOptions {
                place: reopened(dir.path()),
                ..RunOptions::default()
            },
        )
        .await
        .unwrap();
    // The probe call is refused by plan mode's guard: the mode came back from the log.
    assert_eq!(report.mismatches, Vec::<String>::new());
    let events = read(dir.path());
    assert_eq!(report.earlier_events, 8);
    let plan_events = events
        .iter()
        .filter(|event| matches!(event.data, EventData::PlanMode(_)))
        .count();
    assert_eq!(plan_events, 1, "plan mode is not entered a second time");
    let resumed = events.iter().position(|event| match &event.data {
        EventData::TurnStart(start) => start.user[0].as_text() == Some(RESUME_MESSAGE),
        _ => false,
    });
    let resumed = resumed.expect("a resumed turn");
    assert_eq!(
        kinds(&events[5..resumed]),
        ["tool/result", "recovery/repaired", "turn/end"]
    );
    // The workspace is the agent's: a resumed session writes no seed files over it.
    assert!(!dir.path().join("workspace/seed.txt").exists());
}

#[tokio::test]
async fn a_session_whose_worker_died_before_its_first_turn_is_seeded_and_run_whole() {
    let dir = tempfile::tempdir().unwrap();
    died_with(
        dir.path(),
        vec![(None, EventData::PlanMode(PlanMode { active: true }))],
    )
    .await;
    let report = scenario()
        .run_with(
            dir.path(),
            RunOptions {
                place: reopened(dir.path()),
                ..RunOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(report.mismatches, Vec::<String>::new());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("workspace/seed.txt")).unwrap(),
        "seeded"
    );
    let events = read(dir.path());
    let users: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::TurnStart(start) => start.user[0].as_text(),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["one"], "the first turn runs from its first step");
}

/// The log of a worker that died while c2 waited for its approval, after its approver
/// answered c1 `allowed_once` (both probes of turn 1's first step).
async fn died_asking(dir: &Path) {
    let call = |id: &str| AssistantBlock::ToolCall {
        call_id: CallId::new(id),
        name: "probe".to_owned(),
        arguments_raw: "{}".to_owned(),
    };
    let asked = || {
        EventData::ApprovalAsked(ApprovalAsked {
            reason: "the preset asks".to_owned(),
            arguments: serde_json::json!({}).into(),
            session_key: None,
            expires_at: None,
        })
    };
    let at = Some((1, Some(1)));
    died_with_calls(
        dir,
        vec![
            (
                Some((1, None)),
                None,
                EventData::TurnStart(TurnStart {
                    user: vec![ContentBlock::text("one")],
                    trace: None,
                    caller: None,
                    client: false,
                }),
            ),
            (at, None, EventData::StepStart(StepStart::default())),
            (
                at,
                None,
                EventData::AssistantMessage(AssistantMessage {
                    blocks: vec![call("c1"), call("c2")],
                    stop_reason: StopReason::ToolCalls,
                }),
            ),
            (at, Some("c1"), asked()),
            (
                at,
                Some("c1"),
                EventData::ApprovalDecided(ApprovalDecided {
                    answer: ApprovalAnswer::AllowedOnce,
                    waited_us: 10,
                    by: DecidedBy::Approver,
                }),
            ),
            (at, Some("c2"), asked()),
        ],
    )
    .await;
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
}

/// A scenario whose two probes ask, its approver scripted to allow c1 and reject c2.
fn asking_scenario() -> Scenario {
    Scenario::from_json(
        r#"{
          "config": {
            "tools": {"enabled": ["probe"]},
            "permissions": {"preset": "untrusted"}
          },
          "approvals": ["allowed_once", "rejected"],
          "turns": [
            {
              "user": "one",
              "model": [
                {
                  "tool_calls": [
                    {"id": "c1", "name": "probe", "arguments": "{}"},
                    {"id": "c2", "name": "probe", "arguments": "{}"}
                  ],
                  "stop_reason": "tool_use"
                },
                {"text": "done", "stop_reason": "end_turn"}
              ]
            }
          ],
          "expect": {"results": {"c1": "TOOL_NOT_STARTED", "c2": "APPROVAL_REJECTED"}}
        }"#,
    )
    .unwrap()
}

/// The scenario's approver answered c1 `allowed_once` and the worker died while c2 waited
/// for its answer, scripted `rejected`: the resumed run asks c2 again with that answer, not
/// with the first one again, so c2 never runs.
#[tokio::test]
async fn a_call_asked_again_on_resume_gets_its_own_scripted_answer() {
    let dir = tempfile::tempdir().unwrap();
    died_asking(dir.path()).await;
    let report = asking_scenario()
        .run_with(
            dir.path(),
            RunOptions {
                place: reopened(dir.path()),
                ..RunOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(report.mismatches, Vec::<String>::new());
    let events = read(dir.path());
    let c2: Vec<&str> = events
        .iter()
        .filter(|event| event.call_id == Some(CallId::new("c2")))
        .map(|event| event.data.kind())
        .collect();
    assert_eq!(
        c2,
        [
            "approval/asked",
            "approval/asked",
            "approval/decided",
            "tool/result"
        ],
        "c2 is asked again and refused, never started"
    );
}

/// An approver that stops the run when asked and never answers: the lease lost, or a
/// client's cancel, while a resumed session asks a pending call again.
struct CancelsWhenAsked(CancellationToken);

impl ApprovalService for CancelsWhenAsked {
    fn request<'a>(
        &'a self,
        _request: &'a ApprovalRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        self.0.cancel();
        Box::pin(std::future::pending())
    }
}

/// c2's question, asked again on resume with no deadline, stops waiting when the run is
/// cancelled: c2 is refused `APPROVAL_CANCELLED` and never started.
#[tokio::test]
async fn a_call_asked_again_on_resume_stops_waiting_when_the_run_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    died_asking(dir.path()).await;
    let cancel = CancellationToken::new();
    let scenario = asking_scenario();
    let running = scenario.run_with(
        dir.path(),
        RunOptions {
            place: reopened(dir.path()),
            approvals: Some(Arc::new(CancelsWhenAsked(cancel.clone()))),
            cancel: Some(cancel),
            ..RunOptions::default()
        },
    );
    // A guard against a hang, not a timing: the cancel is given when c2 is asked.
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("asking c2 again stops when the run is cancelled")
        .unwrap();
    let events = read(dir.path());
    let c2: Vec<&Event> = events
        .iter()
        .filter(|event| event.call_id == Some(CallId::new("c2")))
        .collect();
    let kinds: Vec<&str> = c2.iter().map(|event| event.data.kind()).collect();
    assert_eq!(
        kinds,
        [
            "approval/asked",
            "approval/asked",
            "approval/decided",
            "tool/result"
        ]
    );
    match &c2[3].data {
        EventData::ToolResult(record) => assert_eq!(
            record.error_code().map(|code| code.as_str()),
            Some("APPROVAL_CANCELLED")
        ),
        other => panic!("c2's last event is {other:?}"),
    }
}
