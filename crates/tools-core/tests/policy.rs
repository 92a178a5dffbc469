//! Stages 1–5 through the public API: record, parse, pre-execute hooks, approval, guards.
//! Every refusal happens before `tool/start` and never reaches the body.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use support::prelude::*;
use support::*;
use toolrail_tools_core::CallArgs;
use toolrail_tools_core::{ToolContext, ToolOutput, ToolResult};

#[tokio::test]
async fn an_allowed_call_logs_call_start_result_in_order() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h.pipeline().build();
    let result = h.run(&pipeline, "probe", r#"{"path":"a"}"#).await;
    assert_eq!(h.kinds(), ["tool/call", "tool/start", "tool/result"]);
    assert!(!result.record().is_error());
    assert_eq!(probe.runs(), 1);
    let events = h.sink.events();
    let EventData::ToolCall(call) = &events[0].data else {
        panic!("first event is not tool/call")
    };
    assert_eq!(
        call.arguments_raw, r#"{"path":"a"}"#,
        "the raw text is logged exactly"
    );
    assert_eq!(
        call.source.as_ref().map(ToString::to_string).as_deref(),
        Some("extension(test)")
    );
    assert_eq!(call.version.as_deref(), Some("1"));
    let EventData::ToolResult(logged) = &events[2].data else {
        panic!("last event is not tool/result")
    };
    assert_eq!(
        logged,
        result.record(),
        "the log and the caller see one and the same result"
    );
    assert_eq!(result.seq(), 3);
    assert!(
        events
            .iter()
            .all(|event| event.call_id.as_ref().map(|id| id.as_str()) == Some("c1"))
    );
}

#[tokio::test]
async fn empty_arguments_mean_an_empty_object() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let result = h.run(&h.pipeline().build(), "probe", "").await;
    assert!(!result.record().is_error());
    assert_eq!(probe.seen_args.lock().clone(), vec![json!({})]);
}

#[tokio::test]
async fn bad_json_and_schema_violations_are_refused_before_start() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h.pipeline().build();
    let syntax = h.run(&pipeline, "probe", "{\"path\": ").await;
    assert_eq!(code(&syntax), Some("SYNTAX_ERROR"));
    assert!(
        text(syntax.record()).starts_with(
            "Error: the arguments for `probe` are not valid JSON (line 1, column 9, byte 8)"
        ),
        "{}",
        text(syntax.record())
    );
    let invalid = h
        .run(&pipeline, "probe", r#"{"path": 3, "n": "x", "extra": 1}"#)
        .await;
    assert_eq!(code(&invalid), Some("INVALID_ARGS"));
    let message = &invalid.record().error.as_ref().unwrap().message;
    assert!(
        message.contains("/path: 3 is not of type \"string\""),
        "{message}"
    );
    assert!(
        message.contains("/n: \"x\" is not of type \"integer\""),
        "{message}"
    );
    assert!(message.contains("extra"), "{message}");
    assert_eq!(probe.runs(), 0);
    assert_eq!(
        h.kinds(),
        ["tool/call", "tool/result", "tool/call", "tool/result"]
    );
}

#[tokio::test]
async fn a_name_outside_the_snapshot_is_unknown_even_if_registered_later() {
    let h = Harness::new(vec![Probe::new("probe", Behaviour::Succeed)]);
    let before = h.registry.snapshot();
    let late = Probe::new("late", Behaviour::Succeed);
    h.registry
        .register_external(
            toolrail_session_log::ToolSource::Mcp("srv".into()),
            late.clone(),
        )
        .unwrap();
    let pipeline = h.pipeline().build();
    let request = CallRequest::new("c1", 0, "late", "{}");
    let result = pipeline
        .execute_one(&before, request, &BatchControl::default())
        .await
        .unwrap();
    assert_eq!(code(&result), Some("UNKNOWN_TOOL"));
    assert!(
        text(result.record()).contains("Available tools: probe"),
        "{}",
        text(result.record())
    );
    assert_eq!(late.runs(), 0);
    // The next snapshot has it.
    let request = CallRequest::new("c2", 0, "late", "{}");
    let result = pipeline
        .execute_one(&h.registry.snapshot(), request, &BatchControl::default())
        .await
        .unwrap();
    assert!(!result.record().is_error());
    assert_eq!(late.runs(), 1);
}

#[tokio::test]
async fn a_deny_refuses_with_policy_denied_and_no_start() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new(
            "rules",
            HookBehaviour::Decide(deny("writes to /etc are not allowed")),
        ))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("POLICY_DENIED"));
    assert_eq!(
        text(result.record()),
        "Error: writes to /etc are not allowed (denied by `rules`)|[finalized]"
    );
    assert_eq!(h.kinds(), ["tool/call", "tool/result"]);
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn an_outer_hook_cannot_launder_an_inner_deny_or_error() {
    for inner in [
        HookBehaviour::Decide(deny("no")),
        HookBehaviour::Error,
        HookBehaviour::Panic,
    ] {
        let probe = Probe::new("probe", Behaviour::Succeed);
        let h = Harness::new(vec![probe.clone()]);
        let pipeline = h
            .pipeline()
            .pre_hook(FixedHook::new("outer", HookBehaviour::Launder))
            .pre_hook(FixedHook::new("inner", inner.clone()))
            .build();
        let result = h.run(&pipeline, "probe", "{}").await;
        let expected = match inner {
            HookBehaviour::Decide(_) => "POLICY_DENIED",
            _ => "HOOK_FAILED",
        };
        assert_eq!(code(&result), Some(expected), "inner {inner:?}");
        assert_eq!(probe.runs(), 0, "inner {inner:?}");
        assert!(!h.kinds().contains(&"tool/start".to_owned()));
    }
}

#[tokio::test]
async fn a_failing_or_panicking_hook_fails_the_call_closed() {
    for (behaviour, needle) in [
        (HookBehaviour::Error, "policy store unreachable"),
        (HookBehaviour::Panic, "panicked: hook panicked on purpose"),
    ] {
        let probe = Probe::new("probe", Behaviour::Succeed);
        let h = Harness::new(vec![probe.clone()]);
        let pipeline = h
            .pipeline()
            .pre_hook(FixedHook::new("flaky", behaviour))
            .build();
        let result = h.run(&pipeline, "probe", "{}").await;
        assert_eq!(code(&result), Some("HOOK_FAILED"));
        let message = &result.record().error.as_ref().unwrap().message;
        assert!(
            message.contains("`flaky`") && message.contains(needle),
            "{message}"
        );
        assert_eq!(probe.runs(), 0);
    }
}

#[tokio::test]
async fn every_approval_answer_has_its_outcome_and_both_events() {
    let cases = [
        (ApprovalAnswer::AllowedOnce, None),
        (
            ApprovalAnswer::AllowedForSession {
                key: "probe:*".into(),
            },
            None,
        ),
        (
            ApprovalAnswer::Rejected {
                reason: Some("not now".into()),
            },
            Some("APPROVAL_REJECTED"),
        ),
        (ApprovalAnswer::Cancelled, Some("APPROVAL_CANCELLED")),
        (ApprovalAnswer::Expired, Some("APPROVAL_EXPIRED")),
        (ApprovalAnswer::Unavailable, Some("APPROVAL_UNAVAILABLE")),
    ];
    for (answer, expected) in cases {
        let probe = Probe::new("probe", Behaviour::Succeed);
        let h = Harness::new(vec![probe.clone()]);
        let approver = FixedApprover::new(Some(answer.clone()));
        let pipeline = h
            .pipeline()
            .pre_hook(FixedHook::new(
                "rules",
                HookBehaviour::Decide(ask("writes need approval")),
            ))
            .approval(approver.clone())
            .build();
        let result = h.run(&pipeline, "probe", r#"{"path":"x"}"#).await;
        assert_eq!(code(&result), expected, "answer {answer:?}");
        let mut kinds = vec!["tool/call", "approval/asked", "approval/decided"];
        if expected.is_none() {
            kinds.push("tool/start");
            assert_eq!(probe.runs(), 1);
        } else {
            assert_eq!(probe.runs(), 0, "answer {answer:?} must not run the body");
        }
        kinds.push("tool/result");
        assert_eq!(h.kinds(), kinds, "answer {answer:?}");
        let requests = approver.requests.lock();
        assert_eq!(requests.len(), 1);
        assert_eq!(*requests[0].arguments, json!({"path": "x"}));
        assert_eq!(requests[0].reason, "writes need approval");
        assert_eq!(requests[0].session_key.as_deref(), Some("probe:*"));
    }
}

#[tokio::test]
async fn no_approval_service_is_never_an_approval() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("rules", HookBehaviour::Decide(ask("?"))))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("APPROVAL_UNAVAILABLE"));
    assert_eq!(probe.runs(), 0);
    let decided = h
        .sink
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::ApprovalDecided(decided) => Some(decided.answer),
            _ => None,
        });
    assert_eq!(decided, Some(ApprovalAnswer::Unavailable));
}

#[tokio::test(start_paused = true)]
async fn an_approval_that_never_comes_expires_or_is_cancelled() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let config = PipelineConfig {
        approval_timeout: Some(Duration::from_secs(30)),
        ..PipelineConfig::default()
    };
    let pipeline = h
        .pipeline()
        .config(config)
        .pre_hook(FixedHook::new("rules", HookBehaviour::Decide(ask("?"))))
        .approval(FixedApprover::new(None))
        .build();
    let expired = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&expired), Some("APPROVAL_EXPIRED"));

    let cancelled = h
        .run_cancelled_after(&pipeline, "probe", Duration::from_secs(1))
        .await;
    assert_eq!(code(&cancelled), Some("APPROVAL_CANCELLED"));
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn a_rewrite_is_validated_and_logged_before_the_body_runs() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let rewrite = PreExecuteDecision::Rewrite {
        arguments: json!({"path": "/safe/a"}),
        reason: "confined to /safe".into(),
    };
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("sandbox", HookBehaviour::Decide(rewrite)))
        .build();
    let result = h.run(&pipeline, "probe", r#"{"path":"/etc/a"}"#).await;
    assert!(!result.record().is_error());
    assert_eq!(
        h.kinds(),
        [
            "tool/call",
            "tool/args-rewritten",
            "tool/start",
            "tool/result"
        ]
    );
    let EventData::ArgsRewritten(rewritten) = &h.sink.events()[1].data else {
        panic!()
    };
    assert_eq!(rewritten.original, json!({"path": "/etc/a"}));
    assert_eq!(rewritten.effective, json!({"path": "/safe/a"}));
    assert_eq!(rewritten.by, "sandbox");
    assert_eq!(rewritten.reason, "confined to /safe");
    assert_eq!(
        probe.seen_args.lock().clone(),
        vec![json!({"path": "/safe/a"})],
        "the body got the effective arguments"
    );
}

#[tokio::test]
async fn an_invalid_rewrite_is_refused_and_never_logged_as_effective() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let rewrite = PreExecuteDecision::Rewrite {
        arguments: json!({"path": 7}),
        reason: "oops".into(),
    };
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("buggy", HookBehaviour::Decide(rewrite)))
        .build();
    let result = h.run(&pipeline, "probe", r#"{"path":"a"}"#).await;
    assert_eq!(code(&result), Some("INVALID_ARGS"));
    assert!(
        result
            .record()
            .error
            .clone()
            .unwrap()
            .message
            .contains("`buggy` rewrote the arguments")
    );
    assert_eq!(h.kinds(), ["tool/call", "tool/result"]);
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn an_inner_rewrite_passed_through_keeps_its_author() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let rewrite = PreExecuteDecision::Rewrite {
        arguments: json!({"path": "b"}),
        reason: "normalized".into(),
    };
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("outer", HookBehaviour::PassThrough))
        .pre_hook(FixedHook::new("inner", HookBehaviour::Decide(rewrite)))
        .build();
    h.run(&pipeline, "probe", r#"{"path":"a"}"#).await;
    let by = h
        .sink
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::ArgsRewritten(rewritten) => Some(rewritten.by),
            _ => None,
        });
    assert_eq!(by.as_deref(), Some("inner"));
}

#[tokio::test]
async fn guards_run_after_an_allow_and_the_first_deny_wins() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let first = FixedGuard::new(
        "paths",
        Some(GuardVerdict::Deny {
            reason: "outside the workspace".into(),
        }),
    );
    let second = FixedGuard::new("later", Some(GuardVerdict::Abstain));
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new(
            "allow-all",
            HookBehaviour::Decide(PreExecuteDecision::Allow),
        ))
        .guard(FixedGuard::new("abstains", Some(GuardVerdict::Abstain)))
        .guard(first.clone())
        .guard(second.clone())
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("GUARD_DENIED"));
    assert!(text(result.record()).contains("outside the workspace (denied by guard `paths`)"));
    assert_eq!(probe.runs(), 0);
    assert_eq!(
        second.checks.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing after a deny runs"
    );
}

#[tokio::test]
async fn a_guard_also_checks_calls_that_were_approved() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("rules", HookBehaviour::Decide(ask("?"))))
        .approval(FixedApprover::new(Some(ApprovalAnswer::AllowedOnce)))
        .guard(FixedGuard::new(
            "deny-list",
            Some(GuardVerdict::Deny {
                reason: "rm -rf is never allowed".into(),
            }),
        ))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("GUARD_DENIED"));
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn a_panicking_guard_fails_closed() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h.pipeline().guard(FixedGuard::new("buggy", None)).build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("HOOK_FAILED"));
    assert!(text(result.record()).contains("guard `buggy` panicked"));
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn a_call_from_a_truncated_message_is_recorded_and_never_parsed_or_run() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new(
            "rules",
            HookBehaviour::Decide(PreExecuteDecision::Allow),
        ))
        .build();
    let settled = pipeline
        .record_truncated(
            &h.registry.snapshot(),
            CallRequest::new("c1", 0, "probe", r#"{"path": "a"#),
        )
        .await
        .unwrap();
    assert!(!settled.started());
    let result = pipeline.finish(settled).await.unwrap();
    assert_eq!(code(&result), Some("TRUNCATED_CALL"));
    // In the words recovery uses for the same outcome.
    assert_eq!(
        result
            .record()
            .error
            .as_ref()
            .map(|error| error.message.as_str()),
        Some(toolrail_session_log::outcome::TRUNCATED_CALL)
    );
    assert!(result.record().synthetic);
    assert_eq!(probe.runs(), 0);
    assert_eq!(h.kinds(), ["tool/call", "tool/result"]);
    let EventData::ToolCall(call) = &h.sink.events()[0].data else {
        panic!()
    };
    assert_eq!(
        call.arguments_raw, r#"{"path": "a"#,
        "the cut-off text is kept as sent"
    );
}

#[tokio::test]
async fn two_different_rewrites_fail_closed() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let to = |path: &str| PreExecuteDecision::Rewrite {
        arguments: json!({ "path": path }),
        reason: "mine".into(),
    };
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("outer", HookBehaviour::After(to("/outer"))))
        .pre_hook(FixedHook::new("inner", HookBehaviour::Decide(to("/inner"))))
        .build();
    let result = h.run(&pipeline, "probe", r#"{"path":"a"}"#).await;
    assert_eq!(code(&result), Some("HOOK_FAILED"));
    assert!(
        text(result.record()).contains("conflicting rewrites fail closed"),
        "{}",
        text(result.record())
    );
    assert_eq!(probe.runs(), 0);
    assert_eq!(h.kinds(), ["tool/call", "tool/result"]);
}

#[tokio::test]
async fn a_rewrite_then_an_ask_shows_the_approver_the_effective_arguments() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let approver = FixedApprover::new(Some(ApprovalAnswer::AllowedOnce));
    let rewrite = PreExecuteDecision::Rewrite {
        arguments: json!({"path": "/safe"}),
        reason: "confine".into(),
    };
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new(
            "asker",
            HookBehaviour::After(ask("writes need approval")),
        ))
        .pre_hook(FixedHook::new("confiner", HookBehaviour::Decide(rewrite)))
        .approval(approver.clone())
        .build();
    let result = h.run(&pipeline, "probe", r#"{"path":"/etc"}"#).await;
    assert!(!result.record().is_error(), "{:?}", result.record().error);
    assert_eq!(
        h.kinds(),
        [
            "tool/call",
            "tool/args-rewritten",
            "approval/asked",
            "approval/decided",
            "tool/start",
            "tool/result"
        ]
    );
    assert_eq!(
        *approver.requests.lock()[0].arguments,
        json!({"path": "/safe"})
    );
    assert_eq!(
        probe.seen_args.lock().clone(),
        vec![json!({"path": "/safe"})]
    );
}

/// An approval service that panics.
struct PanickingApprover;

impl toolrail_tools_core::ApprovalService for PanickingApprover {
    fn request<'a>(
        &'a self,
        _request: &'a toolrail_tools_core::ApprovalRequest,
        _cancel: &'a toolrail_tools_core::CancellationToken,
    ) -> toolrail_session_log::BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async { panic!("approval backend crashed") })
    }
}

#[tokio::test]
async fn a_panicking_approval_service_is_unavailable_never_an_approval() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("rules", HookBehaviour::Decide(ask("?"))))
        .approval(Arc::new(PanickingApprover))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("APPROVAL_UNAVAILABLE"));
    assert_eq!(probe.runs(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelling_while_a_hook_hangs_leaves_the_call_not_executed() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("slow-policy", HookBehaviour::Hang))
        .build();
    let result = h
        .run_cancelled_after(&pipeline, "probe", Duration::from_secs(1))
        .await;
    assert_eq!(code(&result), Some("NOT_EXECUTED"));
    assert!(result.record().synthetic);
    assert_eq!(probe.runs(), 0);
    assert_eq!(h.kinds(), ["tool/call", "tool/result"]);
    assert_eq!(
        result.record().timing.policy_us,
        1_000_000,
        "virtual time spent deciding"
    );
}

#[tokio::test]
async fn a_tool_that_always_asks_asks_even_when_every_hook_allows() {
    for (answer, expected) in [
        (ApprovalAnswer::AllowedOnce, None),
        (
            ApprovalAnswer::Rejected { reason: None },
            Some("APPROVAL_REJECTED"),
        ),
    ] {
        let spec = ToolSpec::builder("leave", "leaves a mode", json!({"type": "object"}))
            .always_ask("leaving the mode is the user's call");
        let probe = Probe::with_spec(spec.build(), Behaviour::Succeed);
        let h = Harness::new(vec![probe.clone()]);
        let approver = FixedApprover::new(Some(answer));
        let pipeline = h
            .pipeline()
            .pre_hook(FixedHook::new(
                "rules",
                HookBehaviour::Decide(PreExecuteDecision::Allow),
            ))
            .approval(approver.clone())
            .build();
        let result = h.run(&pipeline, "leave", "{}").await;
        assert_eq!(code(&result), expected);
        assert_eq!(probe.runs(), usize::from(expected.is_none()));
        let requests = approver.requests.lock();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].reason, "leaving the mode is the user's call");
        assert_eq!(
            requests[0].session_key, None,
            "no session approval covers it"
        );
    }
    // With no one to ask, it does not run.
    let spec =
        ToolSpec::builder("leave", "leaves a mode", json!({"type": "object"})).always_ask("?");
    let probe = Probe::with_spec(spec.build(), Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let result = h.run(&h.pipeline().build(), "leave", "{}").await;
    assert_eq!(code(&result), Some("APPROVAL_UNAVAILABLE"));
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn a_session_answer_where_no_key_was_offered_is_logged_as_once() {
    let spec =
        ToolSpec::builder("leave", "leaves a mode", json!({"type": "object"})).always_ask("?");
    let probe = Probe::with_spec(spec.build(), Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let approver = FixedApprover::new(Some(ApprovalAnswer::AllowedForSession {
        key: "leave".into(),
    }));
    let pipeline = h.pipeline().approval(approver).build();
    let result = h.run(&pipeline, "leave", "{}").await;
    assert_eq!(code(&result), None);
    let decided = h
        .sink
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::ApprovalDecided(decided) => Some(decided.answer),
            _ => None,
        });
    assert_eq!(decided, Some(ApprovalAnswer::AllowedOnce));
}

/// A tool whose calls with `{"wide": true}` must ask, and which records whether its body saw
/// the grant.
struct Widening {
    spec: ToolSpec,
    grants: Arc<parking_lot::Mutex<Vec<bool>>>,
}

impl Tool for Widening {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn must_ask(&self, args: &CallArgs) -> Option<String> {
        assert!(args["panic"] != true, "a tool that cannot say");
        (args["wide"] == true).then(|| "asks for more than its default".to_owned())
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> toolrail_session_log::BoxFuture<'a, ToolResult> {
        self.grants.lock().push(ctx.approval_granted());
        Box::pin(async { Ok(ToolOutput::text("ok")) })
    }
}

#[tokio::test]
async fn a_call_that_must_ask_asks_even_when_rules_allow_and_its_body_sees_the_grant() {
    let grants = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let tool: Arc<dyn Tool> = Arc::new(Widening {
        spec: ToolSpec::builder("widen", "widens", json!({"type": "object"})).build(),
        grants: Arc::clone(&grants),
    });
    let h = Harness::new(vec![tool]);
    let allow_all = || FixedHook::new("rules", HookBehaviour::Decide(PreExecuteDecision::Allow));
    for (answer, expected) in [
        (
            ApprovalAnswer::AllowedForSession {
                key: "widen".into(),
            },
            None,
        ),
        (
            ApprovalAnswer::Rejected { reason: None },
            Some("APPROVAL_REJECTED"),
        ),
    ] {
        let approver = FixedApprover::new(Some(answer));
        let pipeline = h
            .pipeline()
            .pre_hook(allow_all())
            .approval(approver.clone())
            .build();
        let result = h.run(&pipeline, "widen", r#"{"wide": true}"#).await;
        assert_eq!(code(&result), expected);
        let requests = approver.requests.lock();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].reason, "asks for more than its default");
        assert_eq!(
            requests[0].session_key, None,
            "no session approval covers it"
        );
    }
    // The allowed call's body saw the grant; the rejected one never ran.
    assert_eq!(*grants.lock(), [true]);
    // A call that does not ask for more is not asked about, and its body sees no grant.
    let approver = FixedApprover::new(None);
    let pipeline = h
        .pipeline()
        .pre_hook(allow_all())
        .approval(approver.clone())
        .build();
    let result = h.run(&pipeline, "widen", r#"{"wide": false}"#).await;
    assert_eq!(code(&result), None);
    assert!(approver.requests.lock().is_empty());
    assert_eq!(*grants.lock(), [true, false]);
    // With no one to ask it does not run; a deny still wins without asking.
    let result = h
        .run(
            &h.pipeline().pre_hook(allow_all()).build(),
            "widen",
            r#"{"wide": true}"#,
        )
        .await;
    assert_eq!(code(&result), Some("APPROVAL_UNAVAILABLE"));
    let approver = FixedApprover::new(Some(ApprovalAnswer::AllowedOnce));
    let deny = FixedHook::new(
        "rules",
        HookBehaviour::Decide(PreExecuteDecision::Deny {
            reason: "no".into(),
        }),
    );
    let pipeline = h
        .pipeline()
        .pre_hook(deny)
        .approval(approver.clone())
        .build();
    let result = h.run(&pipeline, "widen", r#"{"wide": true}"#).await;
    assert_eq!(code(&result), Some("POLICY_DENIED"));
    assert!(approver.requests.lock().is_empty());
    assert_eq!(grants.lock().len(), 2);
    // Rules that would ask with a session key do not make it coverable by one.
    let approver = FixedApprover::new(Some(ApprovalAnswer::AllowedOnce));
    let asks_for_session = FixedHook::new(
        "rules",
        HookBehaviour::Decide(PreExecuteDecision::Ask {
            reason: "rules ask".into(),
            session_key: Some("widen".into()),
        }),
    );
    let pipeline = h
        .pipeline()
        .pre_hook(asks_for_session)
        .approval(approver.clone())
        .build();
    let result = h.run(&pipeline, "widen", r#"{"wide": true}"#).await;
    assert_eq!(code(&result), None);
    let request = approver.requests.lock()[0].clone();
    assert_eq!(request.session_key, None);
    assert_eq!(request.reason, "asks for more than its default; rules ask");
    // A tool that panics saying whether it must ask, asks.
    let approver = FixedApprover::new(Some(ApprovalAnswer::Rejected { reason: None }));
    let pipeline = h
        .pipeline()
        .pre_hook(allow_all())
        .approval(approver.clone())
        .build();
    let result = h.run(&pipeline, "widen", r#"{"panic": true}"#).await;
    assert_eq!(code(&result), Some("APPROVAL_REJECTED"));
    assert!(
        approver.requests.lock()[0]
            .reason
            .contains("could not say whether this call needs approval"),
    );
}
