//! The pipeline's stages through the public API: what each stage may do, what it logs, and
//! that a refusal never reaches the body.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::*;
use toolrail_session_log::{
    ApprovalAnswerRecord, ContentBlock, ErrorCode, EventData, MemorySink, ToolResultRecord,
};
use toolrail_tools_core::{
    ApprovalAnswer, BatchControl, CallRequest, CommittedResult, GuardVerdict, Pipeline,
    PipelineBuilder, PipelineConfig, PostExecuteAction, PostExecuteDecision, PreExecuteDecision,
    Registry, RegistryBuilder, Tool, ToolSpec,
};

struct Harness {
    sink: Arc<MemorySink>,
    registry: Registry,
}

impl Harness {
    fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut builder = RegistryBuilder::new();
        for tool in tools {
            builder = builder.external(
                toolrail_session_log::ToolSource::Extension("test".into()),
                tool,
            );
        }
        let (registry, warnings) = builder.build().unwrap();
        assert!(warnings.is_empty());
        Self {
            sink: sink(),
            registry,
        }
    }

    fn pipeline(&self) -> PipelineBuilder {
        Pipeline::builder(self.sink.clone())
    }

    async fn run(&self, pipeline: &Pipeline, name: &str, args: &str) -> CommittedResult {
        let request = CallRequest::new("c1", 0, name, args);
        pipeline
            .execute_one(&self.registry.snapshot(), request, &BatchControl::default())
            .await
            .unwrap()
    }

    fn kinds(&self) -> Vec<String> {
        self.sink.kinds()
    }

    /// Runs one call and cancels its batch `after` (tokio time) it started.
    async fn run_cancelled_after(
        &self,
        pipeline: &Pipeline,
        name: &str,
        after: Duration,
    ) -> CommittedResult {
        let control = BatchControl::default();
        let cancel = control.cancel.clone();
        let snapshot = self.registry.snapshot();
        let (result, ()) = tokio::join!(
            pipeline.execute_one(&snapshot, CallRequest::new("c1", 0, name, "{}"), &control),
            async {
                tokio::time::sleep(after).await;
                cancel.cancel();
            }
        );
        result.unwrap()
    }
}

fn code(result: &CommittedResult) -> Option<&str> {
    result
        .record
        .error
        .as_ref()
        .map(|error| error.code.as_str())
}

fn text(record: &ToolResultRecord) -> String {
    record
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join("|")
}

#[tokio::test]
async fn an_allowed_call_logs_call_start_result_in_order() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h.pipeline().build();
    let result = h.run(&pipeline, "probe", r#"{"path":"a"}"#).await;
    assert_eq!(h.kinds(), ["tool/call", "tool/start", "tool/result"]);
    assert!(!result.record.is_error);
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
        logged, &result.record,
        "the log and the caller see one and the same result"
    );
    assert_eq!(result.seq, 3);
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
    assert!(!result.record.is_error);
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
        text(&syntax.record).starts_with(
            "Error: the arguments for `probe` are not valid JSON (line 1, column 9, byte 8)"
        ),
        "{}",
        text(&syntax.record)
    );
    let invalid = h
        .run(&pipeline, "probe", r#"{"path": 3, "n": "x", "extra": 1}"#)
        .await;
    assert_eq!(code(&invalid), Some("INVALID_ARGS"));
    let message = &invalid.record.error.as_ref().unwrap().message;
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
        text(&result.record).contains("Available tools: probe"),
        "{}",
        text(&result.record)
    );
    assert_eq!(late.runs(), 0);
    // The next snapshot has it.
    let request = CallRequest::new("c2", 0, "late", "{}");
    let result = pipeline
        .execute_one(&h.registry.snapshot(), request, &BatchControl::default())
        .await
        .unwrap();
    assert!(!result.record.is_error);
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
        text(&result.record),
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
        let message = &result.record.error.as_ref().unwrap().message;
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
        assert_eq!(requests[0].arguments, json!({"path": "x"}));
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
    assert_eq!(decided, Some(ApprovalAnswerRecord::Unavailable));
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
    assert!(!result.record.is_error);
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
            .record
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
    assert!(text(&result.record).contains("outside the workspace (denied by guard `paths`)"));
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
    assert!(text(&result.record).contains("guard `buggy` panicked"));
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn a_failing_or_panicking_body_is_tool_failed_with_its_effects() {
    let cases = [
        (Behaviour::Fail("boom".into()), "boom", 0),
        (
            Behaviour::Panic,
            "the tool panicked: probe body panicked on purpose",
            0,
        ),
        (
            Behaviour::EffectThenFail,
            "disk full after the first write",
            1,
        ),
    ];
    for (behaviour, message, effects) in cases {
        let probe = Probe::new("probe", behaviour);
        let h = Harness::new(vec![probe.clone()]);
        let result = h.run(&h.pipeline().build(), "probe", "{}").await;
        assert_eq!(code(&result), Some("TOOL_FAILED"));
        assert_eq!(result.record.error.as_ref().unwrap().message, message);
        assert_eq!(
            text(&result.record),
            format!("Error: {message}|[finalized]")
        );
        assert_eq!(result.record.effects.len(), effects);
        assert_eq!(h.kinds(), ["tool/call", "tool/start", "tool/result"]);
    }
}

#[tokio::test]
async fn a_value_that_breaks_the_output_schema_is_invalid_tool_output() {
    let spec = ToolSpec::new("probe", "p", object_schema())
        .output_schema(json!({"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}}));
    let probe = Probe::with_spec(spec, Behaviour::Value(json!({"count": "three"})));
    let h = Harness::new(vec![probe.clone()]);
    let result = h.run(&h.pipeline().build(), "probe", "{}").await;
    assert_eq!(code(&result), Some("INVALID_TOOL_OUTPUT"));
    assert!(
        text(&result.record).contains("/count: \"three\" is not of type \"integer\""),
        "{}",
        text(&result.record)
    );
    assert_eq!(
        result.record.value, None,
        "an invalid value never reaches the model or programs"
    );
}

#[tokio::test]
async fn a_value_over_the_byte_cap_is_invalid_tool_output() {
    let spec = ToolSpec::new("probe", "p", object_schema()).max_value_bytes(64);
    let probe = Probe::with_spec(spec, Behaviour::Value(json!({"blob": "x".repeat(100)})));
    let h = Harness::new(vec![probe]);
    let result = h.run(&h.pipeline().build(), "probe", "{}").await;
    assert_eq!(code(&result), Some("INVALID_TOOL_OUTPUT"));
    assert!(
        text(&result.record).contains("is 111 bytes, over the cap of 64 bytes"),
        "{}",
        text(&result.record)
    );
}

#[tokio::test]
async fn finalize_runs_once_on_every_outcome() {
    // success, refusal at parse, policy deny, body failure, invalid output.
    let spec =
        ToolSpec::new("strict", "p", object_schema()).output_schema(json!({"type": "string"}));
    let ok = Probe::new("ok", Behaviour::Succeed);
    let failing = Probe::new("failing", Behaviour::Fail("x".into()));
    let strict = Probe::with_spec(spec, Behaviour::Value(json!(1)));
    let denied = Probe::new("denied", Behaviour::Succeed);
    let h = Harness::new(vec![
        ok.clone(),
        failing.clone(),
        strict.clone(),
        denied.clone(),
    ]);
    let pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new(
            "deny-denied",
            HookBehaviour::Decide(PreExecuteDecision::Allow),
        ))
        .build();
    let deny_pipeline = h
        .pipeline()
        .pre_hook(FixedHook::new("rules", HookBehaviour::Decide(deny("no"))))
        .build();
    for (pipeline, name, args) in [
        (&pipeline, "ok", "{}"),
        (&pipeline, "ok", "not json"),
        (&deny_pipeline, "denied", "{}"),
        (&pipeline, "failing", "{}"),
        (&pipeline, "strict", "{}"),
    ] {
        let result = h.run(pipeline, name, args).await;
        assert!(
            text(&result.record).ends_with("[finalized]"),
            "{name} {args}: {}",
            text(&result.record)
        );
    }
    assert_eq!(
        (
            ok.finalized(),
            denied.finalized(),
            failing.finalized(),
            strict.finalized()
        ),
        (2, 1, 1, 1)
    );
}

#[tokio::test]
async fn post_hooks_change_what_the_model_sees_but_never_the_effects() {
    let probe = Probe::new("probe", Behaviour::EffectThenFail);
    let h = Harness::new(vec![probe]);
    let block = PostExecuteDecision::action(PostExecuteAction::Block {
        feedback: "result withheld by review".into(),
    })
    .with_context(ContentBlock::text("reviewer: check /w/a.txt"));
    let pipeline = h
        .pipeline()
        .post_hook(PostHook::new("review", Some(block)))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("RESULT_BLOCKED"));
    assert_eq!(
        result.record.effects,
        vec![written("/w/a.txt")],
        "effects survive a block"
    );
    assert_eq!(result.context.len(), 1);
    assert_eq!(result.context[0].source, "review");
    assert_eq!(
        h.kinds(),
        ["tool/call", "tool/start", "tool/result", "context/message"]
    );
}

#[tokio::test]
async fn post_hooks_replace_content_and_value_with_revalidation() {
    let spec =
        ToolSpec::new("probe", "p", object_schema()).output_schema(json!({"type": "object"}));
    let probe = Probe::with_spec(spec, Behaviour::Succeed);
    let h = Harness::new(vec![probe]);
    let pipeline = h
        .pipeline()
        .post_hook(PostHook::new(
            "redact",
            Some(PostExecuteDecision::action(
                PostExecuteAction::ReplaceContent(vec![ContentBlock::text("[redacted]")]),
            )),
        ))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(text(&result.record), "[redacted]|[finalized]");
    assert_eq!(result.record.value, Some(json!({"ok": true})));

    let pipeline = h
        .pipeline()
        .post_hook(PostHook::new(
            "bad-value",
            Some(PostExecuteDecision::action(
                PostExecuteAction::ReplaceValue(json!("not an object")),
            )),
        ))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("INVALID_TOOL_OUTPUT"));
}

#[tokio::test]
async fn a_panicking_post_hook_is_hook_failed_and_keeps_effects() {
    let probe = Probe::new("probe", Behaviour::EffectThenFail);
    let h = Harness::new(vec![probe]);
    let pipeline = h.pipeline().post_hook(PostHook::new("buggy", None)).build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("HOOK_FAILED"));
    assert!(text(&result.record).contains("the tool did run"));
    assert_eq!(result.record.effects, vec![written("/w/a.txt")]);
}

#[tokio::test]
async fn observer_errors_and_panics_are_isolated() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe]);
    let failing = CountingObserver::new("failing", Some(false));
    let panicking = CountingObserver::new("panicking", Some(true));
    let healthy = CountingObserver::new("healthy", None);
    let pipeline = h
        .pipeline()
        .observer(failing.clone())
        .observer(panicking.clone())
        .observer(healthy.clone())
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert!(
        !result.record.is_error,
        "observers never change the outcome"
    );
    for observer in [&failing, &panicking, &healthy] {
        assert_eq!(
            observer.seen.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{}",
            observer.name
        );
    }
    assert_eq!(h.kinds(), ["tool/call", "tool/start", "tool/result"]);
}

#[tokio::test]
async fn layers_wrap_the_body() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let layer = Arc::new(CountingLayer {
        calls: Default::default(),
    });
    let pipeline = h
        .pipeline()
        .layer(layer.clone())
        .layer(layer.clone())
        .build();
    h.run(&pipeline, "probe", "{}").await;
    assert_eq!(layer.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(probe.runs(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_cancels_and_commits_tool_timeout_within_the_grace() {
    let spec = ToolSpec::new("slow", "p", object_schema()).timeout(Duration::from_secs(10));
    let probe = Probe::with_spec(spec, Behaviour::SleepCooperative(Duration::from_secs(3600)));
    let h = Harness::new(vec![probe]);
    let result = h.run(&h.pipeline().build(), "slow", "{}").await;
    assert_eq!(code(&result), Some("TOOL_TIMEOUT"));
    let message = &result.record.error.as_ref().unwrap().message;
    assert!(
        message.contains("within 10.0 s") && message.contains("stopped on cancel"),
        "{message}"
    );
    assert!(!result.record.synthetic);
}

#[tokio::test(start_paused = true)]
async fn an_uncooperative_body_is_abandoned_as_outcome_unknown_with_its_effects() {
    let spec = ToolSpec::new("stuck", "p", object_schema()).timeout(Duration::from_secs(1));
    let probe = Probe::with_spec(spec, Behaviour::EffectThenHang);
    let h = Harness::new(vec![probe]);
    let pipeline = h
        .pipeline()
        .config(PipelineConfig {
            cancel_grace: Duration::from_secs(2),
            ..PipelineConfig::default()
        })
        .build();
    let started = tokio::time::Instant::now();
    let result = h.run(&pipeline, "stuck", "{}").await;
    assert_eq!(code(&result), Some("TOOL_OUTCOME_UNKNOWN"));
    assert!(result.record.synthetic);
    assert_eq!(result.record.effects, vec![written("/w/b.txt")]);
    assert!(text(&result.record).contains("verify before retrying"));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_millis(3100),
        "deadline plus grace, no more: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_request_timeout_overrides_the_tool_default() {
    let spec = ToolSpec::new("slow", "p", object_schema()).timeout(Duration::from_secs(3600));
    let probe = Probe::with_spec(spec, Behaviour::SleepStubborn(Duration::from_secs(60)));
    let h = Harness::new(vec![probe]);
    let pipeline = h.pipeline().build();
    let request = CallRequest::new("c1", 0, "slow", "{}").with_timeout(Duration::from_secs(5));
    let result = pipeline
        .execute_one(&h.registry.snapshot(), request, &BatchControl::default())
        .await
        .unwrap();
    assert_eq!(
        code(&result),
        Some("TOOL_OUTCOME_UNKNOWN"),
        "stubborn past 5 s + 5 s grace"
    );
    let EventData::ToolStart(start) = &h.sink.events()[1].data else {
        panic!()
    };
    assert_eq!(start.timeout_ms, Some(5000));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_that_finishes_in_the_grace_keeps_its_true_result() {
    let probe = Probe::new("probe", Behaviour::SleepStubborn(Duration::from_secs(2)));
    let h = Harness::new(vec![probe]);
    let pipeline = h.pipeline().build();
    let result = h
        .run_cancelled_after(&pipeline, "probe", Duration::from_secs(1))
        .await;
    assert!(!result.record.is_error, "{:?}", result.record.error);
    assert_eq!(text(&result.record), "slept stubbornly|[finalized]");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_cooperative_call_is_aborted() {
    let probe = Probe::new(
        "probe",
        Behaviour::SleepCooperative(Duration::from_secs(60)),
    );
    let h = Harness::new(vec![probe]);
    let pipeline = h.pipeline().build();
    let result = h
        .run_cancelled_after(&pipeline, "probe", Duration::from_secs(1))
        .await;
    assert_eq!(
        result.record.error.clone().unwrap().code,
        ErrorCode::Aborted
    );
}

#[tokio::test]
async fn a_call_of_a_cancelled_batch_is_not_executed_and_has_no_start() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let pipeline = h.pipeline().build();
    let control = BatchControl::default();
    control.cancel.cancel();
    let result = pipeline
        .execute_one(
            &h.registry.snapshot(),
            CallRequest::new("c1", 0, "probe", "{}"),
            &control,
        )
        .await
        .unwrap();
    assert_eq!(code(&result), Some("NOT_EXECUTED"));
    assert!(result.record.synthetic);
    assert_eq!(probe.runs(), 0);
    assert_eq!(h.kinds(), ["tool/call", "tool/result"]);
}

#[tokio::test]
async fn a_log_that_refuses_writes_is_an_internal_failure_and_nothing_runs() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    h.sink.refuse_after(1); // tool/call is accepted, tool/start is not.
    let pipeline = h.pipeline().build();
    let error = pipeline
        .execute_one(
            &h.registry.snapshot(),
            CallRequest::new("c1", 0, "probe", "{}"),
            &BatchControl::default(),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("could not record `tool/start`"),
        "{error}"
    );
    assert_eq!(probe.runs(), 0, "a start that is not recorded never runs");
}

#[tokio::test]
async fn typed_tools_receive_their_arguments_deserialized() {
    use schemars::JsonSchema;
    use serde::Deserialize;
    use toolrail_tools_core::{Concurrency, ToolContext, ToolOutput, ToolResult, Typed, TypedTool};

    /// Arguments of `greet`.
    #[derive(Deserialize, JsonSchema)]
    struct GreetArgs {
        /// Who to greet.
        name: String,
        times: Option<u8>,
    }
    struct Greet;
    impl TypedTool for Greet {
        type Args = GreetArgs;
        fn spec(&self) -> ToolSpec {
            ToolSpec::for_args::<GreetArgs>("greet", "Greets someone").read_only()
        }
        fn concurrency(&self, _args: &GreetArgs) -> Concurrency {
            Concurrency::shared()
        }
        async fn run(&self, _ctx: &ToolContext, args: GreetArgs) -> ToolResult {
            Ok(ToolOutput::text(
                format!("hello {}", args.name).repeat(usize::from(args.times.unwrap_or(1))),
            ))
        }
    }
    let tool = Typed::new(Greet);
    assert_eq!(
        tool.spec().input_schema()["properties"]["name"]["description"],
        "Who to greet."
    );
    let h = Harness::new(vec![Arc::new(tool)]);
    let pipeline = h.pipeline().build();
    let ok = h
        .run(&pipeline, "greet", r#"{"name":"ada","times":2}"#)
        .await;
    assert_eq!(text(&ok.record), "hello adahello ada");
    let bad = h.run(&pipeline, "greet", r#"{"times":300}"#).await;
    assert_eq!(code(&bad), Some("INVALID_ARGS"));
    let message = bad.record.error.clone().unwrap().message;
    assert!(
        message.contains("\"name\" is a required property") && message.contains("/times"),
        "{message}"
    );
}

/// Panics while building its future, not inside it.
struct PanicsEagerly(ToolSpec);

impl Tool for PanicsEagerly {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a serde_json::Value,
    ) -> toolrail_session_log::BoxFuture<'a, toolrail_tools_core::ToolResult> {
        panic!("execute panicked before returning its future")
    }
}

struct EagerPanicHook;

impl toolrail_tools_core::PreExecuteHook for EagerPanicHook {
    fn name(&self) -> &str {
        "eager"
    }
    fn decide<'a>(
        &'a self,
        _call: &'a toolrail_tools_core::CallView<'a>,
        _next: toolrail_tools_core::PreNext<'a>,
    ) -> toolrail_session_log::BoxFuture<
        'a,
        Result<PreExecuteDecision, toolrail_tools_core::HookError>,
    > {
        panic!("decide panicked before returning its future")
    }
}

#[tokio::test]
async fn panics_before_a_future_exists_are_caught_too() {
    let tool = Arc::new(PanicsEagerly(ToolSpec::new("eager", "e", object_schema())));
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![tool, probe.clone()]);
    let result = h.run(&h.pipeline().build(), "eager", "{}").await;
    assert_eq!(code(&result), Some("TOOL_FAILED"));
    assert!(text(&result.record).contains("execute panicked before returning its future"));

    let pipeline = h.pipeline().pre_hook(Arc::new(EagerPanicHook)).build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("HOOK_FAILED"));
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
    assert!(result.record.synthetic);
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
