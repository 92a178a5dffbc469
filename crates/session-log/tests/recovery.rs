//! Recovery: every call the crash left open gets an honest synthetic result, in call order,
//! then the turn is closed; a repaired log is left alone.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use toolrail_session_log::event::*;
use toolrail_session_log::recovery::*;
use toolrail_session_log::*;

/// Builds a session in memory, event by event.
struct Session {
    sink: MemorySink,
}

impl Session {
    fn new(idempotent: &[&str]) -> Self {
        let session = Self {
            sink: MemorySink::new(),
        };
        let tools = ["write", "read", "fetch"]
            .into_iter()
            .map(|name| ToolManifestEntry {
                name: name.to_owned(),
                source: ToolSource::Builtin,
                version: "1".to_owned(),
                read_only: false,
                idempotent: idempotent.contains(&name),
            })
            .collect();
        session.add(
            None,
            None,
            EventData::SessionStart(SessionStart {
                format_version: FORMAT_VERSION,
                session_id: SessionId::new("s"),
                tools,
                meta: None,
            }),
        );
        session
    }

    fn add(&self, turn: Option<u32>, call: Option<&str>, data: EventData) {
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn: turn.map(TurnId),
            step: turn.map(|_| StepId(1)),
            call_id: call.map(CallId::from),
            data,
        };
        futures_lite_block_on(self.sink.append(draft, AppendUrgency::Buffered)).unwrap();
    }

    fn turn(&self, turn: u32, calls: &[(&str, &str)]) {
        self.add(
            Some(turn),
            None,
            EventData::TurnStart(TurnStart {
                user: vec![ContentBlock::text("go")],
                trace: None,
                caller: None,
                client: false,
            }),
        );
        let blocks = calls
            .iter()
            .map(|(id, name)| AssistantBlock::ToolCall {
                call_id: CallId::from(*id),
                name: (*name).to_owned(),
                arguments_raw: "{}".to_owned(),
            })
            .collect();
        self.add(
            Some(turn),
            None,
            EventData::AssistantMessage(AssistantMessage {
                blocks,
                stop_reason: StopReason::ToolCalls,
            }),
        );
    }

    fn call(&self, turn: u32, id: &str, name: &str, started: bool) {
        self.add(
            Some(turn),
            Some(id),
            EventData::ToolCall(ToolCall {
                index: 0,
                name: name.to_owned(),
                arguments_raw: "{}".to_owned(),
                source: None,
                version: None,
                trace: None,
            }),
        );
        if started {
            self.add(
                Some(turn),
                Some(id),
                EventData::ToolStart(ToolStart::default()),
            );
        }
    }

    fn result(&self, turn: u32, id: &str) {
        self.add(
            Some(turn),
            Some(id),
            EventData::ToolResult(Arc::new(ToolResultRecord::success(vec![
                ContentBlock::text("ok"),
            ]))),
        );
    }

    fn end(&self, turn: u32) {
        self.add(
            Some(turn),
            None,
            EventData::TurnEnd(TurnEnd {
                kind: TurnEndKind::Completed,
                message: None,
            }),
        );
    }

    async fn recover(&self, probes: &[Arc<dyn EffectProbe>]) -> (RecoveryReport, Vec<Event>) {
        let before = self.sink.len();
        let report = recover(&self.sink.events(), 0, probes, &self.sink)
            .await
            .unwrap();
        (report, self.sink.events()[before..].to_vec())
    }
}

/// The memory sink answers at once; no runtime is needed to take its answer.
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the memory sink never waits"),
    }
}

fn codes(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|event| {
            let what = match &event.data {
                EventData::ToolResult(record) => record
                    .error_code()
                    .map_or_else(|| "completed".to_owned(), |code| code.to_string()),
                EventData::TurnEnd(end) => format!("{:?}", end.kind),
                other => other.kind().to_owned(),
            };
            (
                event
                    .call_id
                    .as_ref()
                    .map_or(String::new(), |id| id.to_string()),
                what,
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test]
async fn unanswered_calls_get_not_started_or_unknown_in_call_order() {
    let session = Session::new(&[]);
    session.turn(
        1,
        &[
            ("c1", "write"),
            ("c2", "write"),
            ("c3", "write"),
            ("c4", "write"),
        ],
    );
    session.call(1, "c1", "write", true);
    session.result(1, "c1");
    session.call(1, "c2", "write", true); // started, no result
    session.call(1, "c3", "write", false); // recorded, never started
    // c4 was never even recorded.
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(
        codes(&appended),
        pairs(&[
            ("c2", "TOOL_OUTCOME_UNKNOWN"),
            ("c3", "TOOL_NOT_STARTED"),
            ("c4", "TOOL_NOT_STARTED"),
            ("", "recovery/repaired"),
            ("", "Interrupted"),
        ])
    );
    assert_eq!(report.closed_turn, Some(TurnId(1)));
    let EventData::ToolResult(unknown) = &appended[0].data else {
        panic!()
    };
    assert!(unknown.synthetic);
    assert!(
        unknown.content[0]
            .as_text()
            .unwrap()
            .contains("verify before retrying")
    );
    let EventData::RecoveryRepaired(repaired) = &appended[3].data else {
        panic!()
    };
    assert_eq!(repaired.calls, ["c2", "c3", "c4"].map(CallId::from));
}

#[tokio::test]
async fn an_idempotent_tool_is_safe_to_retry() {
    let session = Session::new(&["fetch"]);
    session.turn(1, &[("c1", "fetch")]);
    session.call(1, "c1", "fetch", true);
    let (_, appended) = session.recover(&[]).await;
    let EventData::ToolResult(record) = &appended[0].data else {
        panic!()
    };
    assert_eq!(record.error_code(), Some(&ErrorCode::ToolOutcomeUnknown));
    assert!(
        record.content[0]
            .as_text()
            .unwrap()
            .contains("idempotent: safe to retry")
    );
}

#[tokio::test]
async fn closed_turns_are_untouched_and_a_repaired_log_is_left_alone() {
    let session = Session::new(&[]);
    session.turn(1, &[("a1", "write")]);
    session.call(1, "a1", "write", true);
    session.end(1); // closed, even though a1 has no result: not recovery's business
    session.turn(2, &[("b1", "read")]);
    session.call(2, "b1", "read", true);
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(
        report
            .repaired
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["b1"]
    );
    assert!(appended.iter().all(|event| event.turn == Some(TurnId(2))));

    let (again, more) = session.recover(&[]).await;
    assert!(again.is_empty(), "{again:?}");
    assert!(more.is_empty());
}

#[tokio::test]
async fn a_turn_without_a_message_is_closed_and_a_closed_session_is_not() {
    let session = Session::new(&[]);
    session.add(
        Some(1),
        None,
        EventData::TurnStart(TurnStart {
            user: vec![],
            trace: None,
            caller: None,
            client: false,
        }),
    );
    let (report, appended) = session.recover(&[]).await;
    assert!(report.repaired.is_empty());
    assert_eq!(
        codes(&appended),
        pairs(&[("", "recovery/repaired"), ("", "Interrupted")])
    );

    let quiet = Session::new(&[]);
    quiet.turn(1, &[]);
    quiet.end(1);
    let (report, appended) = quiet.recover(&[]).await;
    assert!(report.is_empty() && appended.is_empty());
}

/// Decides from the call's name, like a probe that checks a file digest.
struct NameProbe;

impl EffectProbe for NameProbe {
    fn probe(&self, call: &InterruptedCall<'_>) -> Result<Option<ProbeVerdict>, String> {
        match call.call_id.as_str() {
            "done" => Ok(Some(ProbeVerdict::Completed {
                evidence: "digest equals the intent's after".into(),
            })),
            "undone" => Ok(Some(ProbeVerdict::DidNotHappen {
                evidence: "digest equals the intent's before".into(),
            })),
            "broken" => Err("permission denied reading /w/a".into()),
            _ => Ok(None),
        }
    }
}

#[tokio::test]
async fn probes_turn_unknown_into_known_and_a_failing_probe_leaves_it_unknown() {
    let session = Session::new(&[]);
    session.turn(
        1,
        &[
            ("done", "write"),
            ("undone", "write"),
            ("broken", "write"),
            ("other", "write"),
        ],
    );
    for id in ["done", "undone", "broken", "other"] {
        session.call(1, id, "write", true);
    }
    let probes: Vec<Arc<dyn EffectProbe>> = vec![Arc::new(NameProbe)];
    let (_, appended) = session.recover(&probes).await;
    assert_eq!(
        codes(&appended)[..4],
        pairs(&[
            ("done", "completed"),
            ("undone", "TOOL_FAILED"),
            ("broken", "TOOL_OUTCOME_UNKNOWN"),
            ("other", "TOOL_OUTCOME_UNKNOWN")
        ])
    );
    let text = |at: usize| match &appended[at].data {
        EventData::ToolResult(record) => record.content[0].as_text().unwrap().to_owned(),
        _ => panic!(),
    };
    assert!(text(0).contains("it completed (digest equals the intent's after)"));
    assert!(text(1).contains("did not happen") && text(1).contains("Safe to retry"));
    assert!(text(2).contains("checking failed: permission denied"));
}

#[tokio::test]
async fn only_events_after_the_last_message_count_when_call_ids_repeat() {
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write")]);
    session.call(1, "c1", "write", true);
    session.result(1, "c1");
    // The model reuses the id in its next message; this time the call never started.
    let blocks = vec![AssistantBlock::ToolCall {
        call_id: CallId::from("c1"),
        name: "write".into(),
        arguments_raw: "{}".into(),
    }];
    session.add(
        Some(1),
        None,
        EventData::AssistantMessage(AssistantMessage {
            blocks,
            stop_reason: StopReason::ToolCalls,
        }),
    );
    session.call(1, "c1", "write", false);
    let (report, _) = session.recover(&[]).await;
    assert_eq!(
        report.repaired,
        vec![(CallId::from("c1"), Some(ErrorCode::ToolNotStarted))]
    );
}

/// Completed when the call (or one of its code-mode sub-calls) logged a write intent.
struct IntentProbe;

impl EffectProbe for IntentProbe {
    fn probe(&self, call: &InterruptedCall<'_>) -> Result<Option<ProbeVerdict>, String> {
        let intents = call
            .own_events
            .iter()
            .filter(|event| event.data.kind() == "fs/write-intent")
            .count();
        Ok((intents > 0).then(|| ProbeVerdict::Completed {
            evidence: format!("{intents} intent(s)"),
        }))
    }
}

#[tokio::test]
async fn probes_see_the_events_of_code_mode_sub_calls() {
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "run_code")]);
    session.call(1, "c1", "run_code", true);
    let intent = FsWriteIntent {
        path: "/w/a".into(),
        before: None,
        after: "d".into(),
    };
    session.add(Some(1), Some("c1:code:1"), EventData::FsWriteIntent(intent));
    let probes: Vec<Arc<dyn EffectProbe>> = vec![Arc::new(IntentProbe)];
    let (report, _) = session.recover(&probes).await;
    assert_eq!(
        report.repaired,
        vec![(CallId::from("c1"), None)],
        "the sub-call's intent decided it"
    );
}

#[tokio::test]
async fn calls_of_a_cut_off_message_are_truncated_not_merely_unstarted() {
    let session = Session::new(&[]);
    session.add(
        Some(1),
        None,
        EventData::TurnStart(TurnStart {
            user: vec![],
            trace: None,
            caller: None,
            client: false,
        }),
    );
    let blocks = vec![AssistantBlock::ToolCall {
        call_id: CallId::from("c1"),
        name: "write".into(),
        arguments_raw: "{\"pa".into(),
    }];
    session.add(
        Some(1),
        None,
        EventData::AssistantMessage(AssistantMessage {
            blocks,
            stop_reason: StopReason::Length,
        }),
    );
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(
        report.repaired,
        vec![(CallId::from("c1"), Some(ErrorCode::TruncatedCall))]
    );
    // In the words the pipeline uses when the cut-off message arrives.
    let message = appended.iter().find_map(|event| match &event.data {
        EventData::ToolResult(record) => record.error.as_ref().map(|error| error.message.clone()),
        _ => None,
    });
    assert_eq!(
        message.as_deref(),
        Some(toolrail_session_log::outcome::TRUNCATED_CALL)
    );
}

#[tokio::test]
async fn a_turn_ended_by_an_internal_failure_gets_its_open_calls_answered_once() {
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write"), ("c2", "write")]);
    session.call(1, "c1", "write", true);
    session.result(1, "c1");
    session.call(1, "c2", "write", true);
    session.add(
        Some(1),
        None,
        EventData::TurnEnd(TurnEnd {
            kind: TurnEndKind::Error,
            message: Some("log refused".into()),
        }),
    );
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(
        report.repaired,
        vec![(CallId::from("c2"), Some(ErrorCode::ToolOutcomeUnknown))]
    );
    assert_eq!(report.closed_turn, None, "the turn had ended already");
    assert_eq!(
        codes(&appended),
        pairs(&[("c2", "TOOL_OUTCOME_UNKNOWN"), ("", "recovery/repaired")])
    );
    let (again, more) = session.recover(&[]).await;
    assert!(again.is_empty() && more.is_empty());
    // Every call of the conversation is answered now.
    let answered = conversation(&session.sink.events())
        .iter()
        .filter(|item| matches!(item, ConversationItem::ToolResult { .. }))
        .count();
    assert_eq!(answered, 2);
}

/// A crash before a repeat of an id was refused: recovery answers it as the live run would,
/// `INVALID_ARGS` under the id the message gives it, not "not started, safe to retry".
#[tokio::test]
async fn a_repeated_call_id_left_open_is_refused_as_the_live_run_would() {
    let session = Session::new(&[]);
    session.turn(1, &[("a", "write"), ("a", "write"), ("b", "write")]);
    session.call(1, "a", "write", true);
    session.result(1, "a");
    let (_, appended) = session.recover(&[]).await;
    assert_eq!(
        codes(&appended),
        pairs(&[
            ("a-dup2", "INVALID_ARGS"),
            ("b", "TOOL_NOT_STARTED"),
            ("", "recovery/repaired"),
            ("", "Interrupted"),
        ])
    );
    let EventData::ToolResult(refused) = &appended[0].data else {
        panic!()
    };
    let text = refused.content[0].as_text().unwrap();
    assert!(
        text.contains("`a` was already used") && text.contains("recorded as `a-dup2`"),
        "{text}"
    );
}

impl Session {
    fn ask(&self, turn: u32, id: &str, expires_at: Option<Timestamp>) {
        self.add(
            Some(turn),
            Some(id),
            EventData::ApprovalAsked(ApprovalAsked {
                reason: "writes ask".to_owned(),
                arguments: Arc::new(serde_json::json!({})),
                session_key: None,
                expires_at,
            }),
        );
    }

    fn decide(&self, turn: u32, id: &str, answer: ApprovalAnswer) {
        self.add(
            Some(turn),
            Some(id),
            EventData::ApprovalDecided(ApprovalDecided {
                answer,
                waited_us: 5,
                by: DecidedBy::Approver,
            }),
        );
    }
}

fn decided(events: &[Event]) -> Vec<ApprovalAnswer> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ApprovalDecided(decided) => Some(decided.answer.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_pending_approval_is_never_a_yes_with_no_one_to_ask_again() {
    // c1 answered, c2 waiting for a person with no deadline, c3 never recorded.
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write"), ("c2", "write"), ("c3", "write")]);
    session.call(1, "c1", "write", false);
    session.ask(1, "c1", None);
    session.decide(1, "c1", ApprovalAnswer::AllowedOnce);
    session.add(
        Some(1),
        Some("c1"),
        EventData::ToolStart(ToolStart::default()),
    );
    session.result(1, "c1");
    session.call(1, "c2", "write", false);
    session.ask(1, "c2", None);
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(
        codes(&appended),
        pairs(&[
            ("c2", "approval/decided"),
            ("c2", "APPROVAL_UNAVAILABLE"),
            ("c3", "TOOL_NOT_STARTED"),
            ("", "recovery/repaired"),
            ("", "Interrupted"),
        ])
    );
    assert_eq!(decided(&appended), [ApprovalAnswer::Unavailable]);
    assert_eq!(
        report.approvals,
        [ResumedApproval {
            call_id: CallId::from("c2"),
            resumption: ApprovalResumption::NoOneToAsk,
            code: Some(ErrorCode::ApprovalUnavailable),
        }]
    );
    assert_eq!(
        report.repaired,
        [(CallId::from("c3"), Some(ErrorCode::ToolNotStarted))]
    );
    let EventData::ToolResult(record) = &appended[1].data else {
        panic!("expected c2's result")
    };
    assert_eq!(
        record.text(),
        format!("Error: {}", outcome::APPROVAL_UNAVAILABLE)
    );
    // Recovering again changes nothing: the question is closed.
    let (again, more) = session.recover(&[]).await;
    assert!(again.is_empty() && more.is_empty(), "{more:?}");
}

#[tokio::test]
async fn a_pending_approval_past_its_deadline_is_expired_and_one_before_it_unavailable() {
    let past = Timestamp::from_millis(Timestamp::now().as_millis() - 1);
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write")]);
    session.call(1, "c1", "write", false);
    session.ask(1, "c1", Some(past));
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(decided(&appended), [ApprovalAnswer::Expired]);
    assert_eq!(report.approvals[0].resumption, ApprovalResumption::Expired);
    assert_eq!(report.approvals[0].code, Some(ErrorCode::ApprovalExpired));

    let future = Timestamp::from_millis(Timestamp::now().as_millis() + 3_600_000);
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write")]);
    session.call(1, "c1", "write", false);
    session.ask(1, "c1", Some(future));
    let (report, appended) = session.recover(&[]).await;
    assert_eq!(decided(&appended), [ApprovalAnswer::Unavailable]);
    assert_eq!(
        report.approvals[0].resumption,
        ApprovalResumption::NoOneToAsk
    );
}

#[tokio::test]
async fn an_answered_or_started_call_is_no_pending_approval() {
    // Answered (rejected, its result lost to the crash): not started, as before.
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write"), ("c2", "write")]);
    session.call(1, "c1", "write", false);
    session.ask(1, "c1", None);
    session.decide(1, "c1", ApprovalAnswer::Rejected { reason: None });
    // Allowed and started: its outcome is unknown, no question is asked again.
    session.call(1, "c2", "write", false);
    session.ask(1, "c2", None);
    session.decide(1, "c2", ApprovalAnswer::AllowedOnce);
    session.add(
        Some(1),
        Some("c2"),
        EventData::ToolStart(ToolStart::default()),
    );
    let (report, appended) = session.recover(&[]).await;
    assert!(report.approvals.is_empty());
    assert_eq!(
        codes(&appended)[..2],
        pairs(&[("c1", "TOOL_NOT_STARTED"), ("c2", "TOOL_OUTCOME_UNKNOWN")])
    );
}

/// Records the span each pending call it is handed carries, and answers nothing (as no one
/// to ask would).
struct SpanWitness(std::sync::Mutex<Vec<Option<TraceRef>>>);

impl ApprovalResumer for SpanWitness {
    fn resume<'a>(
        &'a self,
        call: &'a PendingApproval<'a>,
    ) -> BoxFuture<'a, Result<(ApprovalResumption, Option<ErrorCode>), SinkError>> {
        self.0.lock().unwrap().push(call.trace);
        Box::pin(async { Ok((ApprovalResumption::NoOneToAsk, None)) })
    }
}

#[tokio::test]
async fn a_call_asked_again_keeps_the_span_its_tool_call_recorded() {
    let session = Session::new(&[]);
    session.turn(1, &[("c1", "write")]);
    let span = TraceRef {
        trace_id: [7; 16],
        span_id: [9; 8],
    };
    session.add(
        Some(1),
        Some("c1"),
        EventData::ToolCall(ToolCall {
            index: 0,
            name: "write".to_owned(),
            arguments_raw: "{}".to_owned(),
            source: None,
            version: None,
            trace: Some(span),
        }),
    );
    session.ask(1, "c1", None);
    let witness = SpanWitness(std::sync::Mutex::new(Vec::new()));
    recover_asking_again(&session.sink.events(), 0, &[], &witness, &session.sink)
        .await
        .unwrap();
    assert_eq!(*witness.0.lock().unwrap(), [Some(span)]);
}
