//! Every event kind survives a trip through JSON unchanged, and the envelope has the exact
//! shape of DESIGN §6.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{Value, json};
use toolrail_session_log::details::Details;
use toolrail_session_log::elided::ElidedBlock;
use toolrail_session_log::event::*;
use toolrail_session_log::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 _/.-]{0,12}",
        "\\PC{0,8}",
        Just("line\nbreak \"quoted\" \\ tab\t".to_owned())
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1.0e9f64..1.0e9).prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        text().prop_map(|text| ContentBlock::Text { text }),
        (text(), "[A-Za-z0-9+/]{0,16}")
            .prop_map(|(media_type, data)| ContentBlock::Image { media_type, data }),
        json_value().prop_map(|value| ContentBlock::Json { value }),
    ]
}

fn blocks() -> impl Strategy<Value = Vec<ContentBlock>> {
    proptest::collection::vec(block(), 0..3)
}

fn code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        proptest::sample::select(ErrorCode::BUILT_IN.to_vec()),
        "[A-Z][A-Z0-9_]{0,10}".prop_filter_map("built-in", |code| ErrorCode::custom(code).ok()),
    ]
}

fn effect() -> impl Strategy<Value = Effect> {
    prop_oneof![
        (text(), proptest::option::of(text()), text()).prop_map(|(path, before, after)| {
            Effect::FileWritten {
                path,
                before,
                after,
            }
        }),
        (text(), text()).prop_map(|(path, before)| Effect::FileDeleted { path, before }),
        (text(), text()).prop_map(|(from, to)| Effect::FileMoved { from, to }),
        (any::<u32>(), text()).prop_map(|(pid, command)| Effect::ProcessSpawned { pid, command }),
        (text(), json_value()).prop_map(|(name, data)| Effect::Other { name, data }),
    ]
}

fn result_record() -> impl Strategy<Value = ToolResultRecord> {
    (
        blocks(),
        proptest::option::of(json_value()),
        proptest::option::of(json_value()),
        proptest::collection::vec(effect(), 0..3),
        proptest::option::of((code(), text(), proptest::option::of(text()))),
        any::<[u32; 5]>(),
        any::<bool>(),
        proptest::collection::vec((0usize..4, block()), 0..2),
    )
        .prop_map(
            |(content, value, details, effects, error, t, synthetic, elided)| ToolResultRecord {
                content,
                value,
                details: details.map(Details::from_value),
                effects,
                error: error.map(|(code, message, by)| ToolErrorInfo { code, message, by }),
                timing: Timing {
                    queued_us: t[0].into(),
                    policy_us: t[1].into(),
                    approval_us: t[2].into(),
                    run_us: t[3].into(),
                    total_us: t[4].into(),
                },
                synthetic,
                concludes_turn: t[4] % 2 == 0,
                elided: elided
                    .into_iter()
                    .map(|(index, whole)| ElidedBlock::new(index, whole))
                    .collect(),
            },
        )
}

fn trace_ref() -> impl Strategy<Value = TraceRef> {
    (any::<[u8; 16]>(), any::<[u8; 8]>())
        .prop_map(|(trace_id, span_id)| TraceRef { trace_id, span_id })
}

fn source() -> impl Strategy<Value = ToolSource> {
    prop_oneof![
        Just(ToolSource::Builtin),
        Just(ToolSource::Runtime),
        "[a-z-]{1,8}".prop_map(|name| ToolSource::Extension(name.into())),
        "[a-z-]{1,8}".prop_map(|server| ToolSource::Mcp(server.into())),
    ]
}

fn call_id() -> impl Strategy<Value = CallId> {
    "[a-z0-9:_-]{1,12}".prop_map(CallId::from)
}

fn answer() -> impl Strategy<Value = ApprovalAnswer> {
    prop_oneof![
        Just(ApprovalAnswer::AllowedOnce),
        text().prop_map(|key| ApprovalAnswer::AllowedForSession { key }),
        proptest::option::of(text()).prop_map(|reason| ApprovalAnswer::Rejected { reason }),
        Just(ApprovalAnswer::Cancelled),
        Just(ApprovalAnswer::Expired),
        Just(ApprovalAnswer::Unavailable),
    ]
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        Just(StopReason::EndTurn),
        Just(StopReason::ToolCalls),
        Just(StopReason::Length),
        Just(StopReason::ContentFilter),
        Just(StopReason::Refusal),
        text().prop_map(StopReason::Other),
    ]
}

fn assistant_block() -> impl Strategy<Value = AssistantBlock> {
    prop_oneof![
        text().prop_map(|text| AssistantBlock::Text { text }),
        text().prop_map(|text| AssistantBlock::Thinking { text }),
        (call_id(), text(), text()).prop_map(|(call_id, name, arguments_raw)| {
            AssistantBlock::ToolCall {
                call_id,
                name,
                arguments_raw,
            }
        }),
    ]
}

fn todo_item() -> impl Strategy<Value = TodoItem> {
    (
        text(),
        prop_oneof![
            Just(TodoStatus::Pending),
            Just(TodoStatus::InProgress),
            Just(TodoStatus::Completed)
        ],
    )
        .prop_map(|(content, status)| TodoItem { content, status })
}

fn turn_end_kind() -> impl Strategy<Value = TurnEndKind> {
    proptest::sample::select(vec![
        TurnEndKind::Completed,
        TurnEndKind::Aborted,
        TurnEndKind::Error,
        TurnEndKind::Interrupted,
        TurnEndKind::MaxSteps,
        TurnEndKind::Truncated,
    ])
}

/// One strategy per kind; the test below checks that this list covers every known kind.
fn event_data() -> impl Strategy<Value = EventData> {
    let manifest = (text(), source(), text(), any::<bool>(), any::<bool>()).prop_map(
        |(name, source, version, read_only, idempotent)| ToolManifestEntry {
            name,
            source,
            version,
            read_only,
            idempotent,
        },
    );
    prop_oneof![
        (
            text(),
            proptest::collection::vec(manifest, 0..3),
            proptest::option::of(json_value())
        )
            .prop_map(|(id, tools, meta)| {
                EventData::SessionStart(SessionStart {
                    format_version: FORMAT_VERSION,
                    session_id: SessionId::new(id),
                    tools,
                    meta,
                })
            }),
        (
            blocks(),
            proptest::option::of(trace_ref()),
            proptest::option::of(trace_ref()),
            any::<bool>()
        )
            .prop_map(
                |(user, trace, caller, client)| EventData::TurnStart(TurnStart {
                    user,
                    trace,
                    caller,
                    client,
                })
            ),
        proptest::option::of(text()).prop_map(|model| EventData::StepStart(StepStart { model })),
        (
            proptest::collection::vec(assistant_block(), 0..3),
            stop_reason()
        )
            .prop_map(|(blocks, stop_reason)| EventData::AssistantMessage(
                AssistantMessage {
                    blocks,
                    stop_reason
                }
            )),
        (
            any::<u32>(),
            text(),
            text(),
            proptest::option::of(source()),
            proptest::option::of(text()),
            proptest::option::of(trace_ref())
        )
            .prop_map(|(index, name, arguments_raw, source, version, trace)| {
                EventData::ToolCall(ToolCall {
                    index,
                    name,
                    arguments_raw,
                    source,
                    version: version.map(Into::into),
                    trace,
                })
            }),
        (json_value(), json_value(), text(), text()).prop_map(
            |(original, effective, by, reason)| EventData::ArgsRewritten(ArgsRewritten {
                original,
                effective,
                by,
                reason
            })
        ),
        (
            text(),
            json_value(),
            proptest::option::of(text()),
            proptest::option::of(0u64..=Timestamp::MAX.as_millis())
        )
            .prop_map(|(reason, arguments, session_key, expires_at)| {
                EventData::ApprovalAsked(ApprovalAsked {
                    reason,
                    arguments: arguments.into(),
                    session_key,
                    expires_at: expires_at.map(Timestamp::from_millis),
                })
            }),
        (answer(), any::<u64>(), any::<bool>()).prop_map(|(answer, waited_us, unanswered)| {
            let by = if unanswered {
                DecidedBy::Toolrail
            } else {
                DecidedBy::Approver
            };
            EventData::ApprovalDecided(ApprovalDecided {
                answer,
                waited_us,
                by,
            })
        }),
        proptest::option::of(any::<u64>())
            .prop_map(|timeout_ms| EventData::ToolStart(ToolStart { timeout_ms })),
        (call_id(), text(), json_value()).prop_map(|(parent_call_id, name, arguments)| {
            EventData::CodeDispatchStart(CodeDispatchStart {
                parent_call_id,
                name,
                arguments,
            })
        }),
        (call_id(), text(), result_record()).prop_map(|(parent_call_id, name, result)| {
            EventData::CodeDispatch(Box::new(CodeDispatch {
                parent_call_id,
                name,
                result,
            }))
        }),
        result_record().prop_map(|record| EventData::ToolResult(record.into())),
        (text(), blocks()).prop_map(|(source, content)| EventData::ContextMessage(
            ContextMessage { source, content }
        )),
        proptest::collection::vec(todo_item(), 0..4)
            .prop_map(|items| EventData::TodoWrite(TodoWrite { items })),
        (
            text(),
            text(),
            proptest::collection::vec(text(), 0..3),
            any::<bool>(),
            proptest::option::of(text())
        )
            .prop_map(
                |(question_id, question, options, multi_select, workspace_digest)| {
                    EventData::QuestionAsked(QuestionAsked {
                        question_id,
                        question,
                        options,
                        multi_select,
                        workspace_digest,
                    })
                }
            ),
        (
            text(),
            proptest::sample::select(vec![
                QuestionState::Answered,
                QuestionState::Cancelled,
                QuestionState::Expired
            ]),
            proptest::option::of(text())
        )
            .prop_map(|(question_id, state, answer)| EventData::QuestionAnswered(
                QuestionAnswered {
                    question_id,
                    state,
                    answer
                }
            )),
        (text(), text())
            .prop_map(|(path, digest)| EventData::FsObserved(FsObserved { path, digest })),
        (text(), proptest::option::of(text()), text()).prop_map(|(path, before, after)| {
            EventData::FsWriteIntent(FsWriteIntent {
                path,
                before,
                after,
            })
        }),
        any::<bool>().prop_map(|active| EventData::PlanMode(PlanMode { active })),
        proptest::collection::vec(text(), 0..3)
            .prop_map(|names| EventData::ToolsLoaded(ToolsLoaded { names })),
        (
            text(),
            text(),
            any::<bool>(),
            proptest::option::of(text()),
            text()
        )
            .prop_map(
                |(id, command, tty, pid_namespace, output)| EventData::ShellStarted(ShellStarted {
                    id,
                    command,
                    mode: "read-only".to_owned(),
                    tty,
                    pid_namespace,
                    output,
                })
            ),
        (
            text(),
            prop::sample::select(vec![
                ShellEnd::Exited,
                ShellEnd::Killed,
                ShellEnd::LifetimeEnded,
                ShellEnd::EndedWithRuntime,
                ShellEnd::NeverRan
            ]),
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<i64>()),
            text(),
            any::<u64>()
        )
            .prop_map(|(id, end, exit_code, signal, output, output_bytes)| {
                EventData::ShellExited(ShellExited {
                    id,
                    end,
                    exit_code,
                    signal,
                    output,
                    output_bytes,
                })
            }),
        (
            text(),
            text(),
            "[0-9]{1,4}",
            proptest::option::of(trace_ref())
        )
            .prop_map(|(server, tool, request_id, trace)| {
                EventData::McpRequest(McpRequest {
                    server,
                    method: "tools/call".to_owned(),
                    tool,
                    request_id,
                    protocol: "2026-07-28".to_owned(),
                    trace,
                })
            }),
        (
            proptest::option::of(json_value()),
            proptest::option::of(text()),
            proptest::option::of(text())
        )
            .prop_map(|(usage, response_id, response_model)| {
                EventData::StepEnd(StepEnd {
                    usage,
                    response_id,
                    response_model,
                })
            }),
        (turn_end_kind(), proptest::option::of(text()))
            .prop_map(|(kind, message)| EventData::TurnEnd(TurnEnd { kind, message })),
        (
            proptest::collection::vec(call_id(), 0..3),
            any::<u64>(),
            text()
        )
            .prop_map(
                |(calls, torn_bytes_dropped, note)| EventData::RecoveryRepaired(RecoveryRepaired {
                    calls,
                    torn_bytes_dropped,
                    note
                })
            ),
        ("x-[a-z]{1,6}/[a-z]{1,6}", json_value())
            .prop_map(|(kind, data)| EventData::from_parts(&kind, data).unwrap()),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    (
        1u64..u64::MAX,
        0u64..=Timestamp::MAX.as_millis(),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(call_id()),
        event_data(),
    )
        .prop_map(|(seq, millis, turn, step, call_id, data)| Event {
            seq,
            ts: Timestamp::from_millis(millis),
            turn: turn.map(TurnId),
            step: step.map(StepId),
            call_id,
            data,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn every_event_round_trips_through_a_json_line(event in event()) {
        let line = serde_json::to_string(&event).unwrap();
        prop_assert!(!line.contains('\n'), "one event, one line");
        let back: Event = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(back, event);
    }
}

#[test]
fn the_strategy_covers_every_known_kind() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4000 {
        let data = event_data().new_tree(&mut runner).unwrap().current();
        if let Some(kind) = data.known_kind() {
            seen.insert(kind);
        }
    }
    let known: std::collections::BTreeSet<&str> = EventData::KNOWN_KINDS.iter().copied().collect();
    assert_eq!(seen, known);
}

#[test]
fn the_envelope_has_the_documented_shape() {
    let event = Event {
        seq: 7,
        ts: Timestamp::parse("2026-11-30T17:48:29.123Z").unwrap(),
        turn: Some(TurnId(1)),
        step: Some(StepId(2)),
        call_id: Some(CallId::from("c1")),
        data: EventData::ToolStart(ToolStart {
            timeout_ms: Some(500),
        }),
    };
    assert_eq!(
        serde_json::to_string(&event).unwrap(),
        r#"{"seq":7,"ts":"2026-11-30T17:48:29.123Z","kind":"tool/start","turn":1,"step":2,"call_id":"c1","data":{"timeout_ms":500}}"#
    );
}

/// The span ids a traced session writes (issue 28): beside the data, absent when the
/// session is not traced, so a log written before them reads as it did.
#[test]
fn trace_refs_are_written_only_when_traced_and_older_lines_read() {
    let traced = r#"{"seq":3,"ts":"2026-11-30T17:48:29.123Z","kind":"tool/call","turn":1,"step":1,"call_id":"c1","data":{"index":0,"name":"read","arguments_raw":"{}","trace":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}}}"#;
    let event: Event = serde_json::from_str(traced).unwrap();
    let EventData::ToolCall(call) = &event.data else {
        panic!("{event:?}")
    };
    assert_eq!(
        call.trace.map(|trace| trace.to_string()).as_deref(),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), traced);
    let older = r#"{"seq":2,"ts":"2026-11-30T17:48:29.123Z","kind":"turn/start","turn":1,"data":{"user":[]}}"#;
    let event: Event = serde_json::from_str(older).unwrap();
    assert_eq!(
        event.data,
        EventData::TurnStart(TurnStart {
            user: Vec::new(),
            trace: None,
            caller: None,
            client: false,
        })
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), older);
}

#[test]
fn kind_strings_are_exactly_those_of_the_design() {
    assert_eq!(
        EventData::KNOWN_KINDS,
        [
            "session/start",
            "turn/start",
            "step/start",
            "assistant/message",
            "tool/call",
            "tool/args-rewritten",
            "approval/asked",
            "approval/decided",
            "tool/start",
            "tool/code-dispatch-start",
            "tool/code-dispatch",
            "tool/result",
            "context/message",
            "todo/write",
            "question/asked",
            "question/answered",
            "fs/observed",
            "fs/write-intent",
            "plan/mode",
            "tools/loaded",
            "shell/started",
            "shell/exited",
            "mcp/request",
            "step/end",
            "turn/end",
            "recovery/repaired",
        ]
    );
}

#[test]
fn unknown_kinds_are_kept_and_known_kinds_with_bad_data_are_errors() {
    let line =
        r#"{"seq":1,"ts":"2026-11-30T17:48:29.123Z","kind":"x-future/thing","data":{"a":[1,2]}}"#;
    let event: Event = serde_json::from_str(line).unwrap();
    let EventData::Unknown(unknown) = &event.data else {
        panic!("expected an unknown kind, got {:?}", event.data)
    };
    assert_eq!(
        (unknown.kind(), unknown.data()),
        ("x-future/thing", &json!({"a": [1, 2]}))
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), line);

    let bad =
        r#"{"seq":1,"ts":"2026-11-30T17:48:29.123Z","kind":"tool/call","data":{"index":"zero"}}"#;
    let error = serde_json::from_str::<Event>(bad).unwrap_err().to_string();
    assert!(
        error.contains("event kind `tool/call` has malformed data"),
        "{error}"
    );
}

#[test]
fn an_approval_asked_before_deadlines_were_recorded_reads_and_writes_back_the_same() {
    // A log written before `expires_at` existed: the question has no deadline.
    let old = r#"{"seq":4,"ts":"2026-11-30T17:48:29.123Z","kind":"approval/asked","turn":1,"step":1,"call_id":"c1","data":{"reason":"bash asks","arguments":{"command":"ls"}}}"#;
    let event: Event = serde_json::from_str(old).unwrap();
    let EventData::ApprovalAsked(asked) = &event.data else {
        panic!("expected approval/asked, got {:?}", event.data)
    };
    assert_eq!(asked.expires_at, None);
    assert_eq!(serde_json::to_string(&event).unwrap(), old);

    let with_deadline = old.replace(
        r#""arguments":{"command":"ls"}"#,
        r#""arguments":{"command":"ls"},"expires_at":"2026-11-30T17:49:29.123Z""#,
    );
    let event: Event = serde_json::from_str(&with_deadline).unwrap();
    let EventData::ApprovalAsked(asked) = &event.data else {
        panic!("expected approval/asked, got {:?}", event.data)
    };
    assert_eq!(
        asked.expires_at,
        Some(Timestamp::parse("2026-11-30T17:49:29.123Z").unwrap())
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), with_deadline);
}

#[test]
fn a_step_end_before_response_ids_were_recorded_reads_and_writes_back_the_same() {
    // A log written before the server's id and model were kept: both are absent.
    let old = r#"{"seq":9,"ts":"2026-11-30T17:48:29.123Z","kind":"step/end","turn":1,"step":1,"data":{"usage":{"input_tokens":3,"output_tokens":4}}}"#;
    let event: Event = serde_json::from_str(old).unwrap();
    assert_eq!(
        event.data,
        EventData::StepEnd(StepEnd {
            usage: Some(json!({"input_tokens": 3, "output_tokens": 4})),
            response_id: None,
            response_model: None,
        })
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), old);

    let with_ids = old.replace(
        r#""output_tokens":4}"#,
        r#""output_tokens":4},"response_id":"msg_1","response_model":"claude-x-20260101""#,
    );
    let event: Event = serde_json::from_str(&with_ids).unwrap();
    assert_eq!(
        event.data,
        EventData::StepEnd(StepEnd {
            usage: Some(json!({"input_tokens": 3, "output_tokens": 4})),
            response_id: Some("msg_1".to_owned()),
            response_model: Some("claude-x-20260101".to_owned()),
        })
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), with_ids);
}

#[tokio::test]
async fn the_memory_sink_numbers_events_from_one_and_can_refuse() {
    let sink = MemorySink::new();
    let draft = |data| EventDraft {
        ts: Timestamp::now(),
        turn: None,
        step: None,
        call_id: None,
        data,
    };
    assert_eq!(
        sink.append(
            draft(EventData::StepStart(StepStart::default())),
            AppendUrgency::Buffered
        )
        .await,
        Ok(1)
    );
    assert_eq!(
        sink.append(
            draft(EventData::StepEnd(StepEnd::default())),
            AppendUrgency::Durable
        )
        .await,
        Ok(2)
    );
    sink.refuse_after(0);
    let refused = sink
        .append(
            draft(EventData::StepEnd(StepEnd::default())),
            AppendUrgency::Durable,
        )
        .await;
    assert!(matches!(refused, Err(SinkError::Refused(_))));
    assert_eq!(sink.kinds(), ["step/start", "step/end"]);
    assert!(sink.events()[0].ts.to_string().ends_with('Z'));
}
