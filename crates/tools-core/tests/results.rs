//! Stages 8–10 through the public API: post-execute hooks, normalization, finalize,
//! observers and the committed record.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use support::prelude::*;
use support::*;

#[tokio::test]
async fn a_value_that_breaks_the_output_schema_is_invalid_tool_output() {
    let spec = ToolSpec::builder("probe", "p", object_schema())
        .output_schema(json!({"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}}));
    let probe = Probe::with_spec(spec.build(), Behaviour::Value(json!({"count": "three"})));
    let h = Harness::new(vec![probe.clone()]);
    let result = h.run(&h.pipeline().build(), "probe", "{}").await;
    assert_eq!(code(&result), Some("INVALID_TOOL_OUTPUT"));
    assert!(
        text(result.record()).contains("/count: \"three\" is not of type \"integer\""),
        "{}",
        text(result.record())
    );
    assert_eq!(
        result.record().value,
        None,
        "an invalid value never reaches the model or programs"
    );
}

#[tokio::test]
async fn a_value_over_the_byte_cap_is_invalid_tool_output() {
    let spec = ToolSpec::builder("probe", "p", object_schema()).max_value_bytes(64);
    let probe = Probe::with_spec(
        spec.build(),
        Behaviour::Value(json!({"blob": "x".repeat(100)})),
    );
    let h = Harness::new(vec![probe]);
    let result = h.run(&h.pipeline().build(), "probe", "{}").await;
    assert_eq!(code(&result), Some("INVALID_TOOL_OUTPUT"));
    assert!(
        text(result.record()).contains("is 111 bytes, over the cap of 64 bytes"),
        "{}",
        text(result.record())
    );
}

#[tokio::test]
async fn finalize_runs_once_on_every_outcome() {
    // success, refusal at parse, policy deny, body failure, invalid output.
    let spec =
        ToolSpec::builder("strict", "p", object_schema()).output_schema(json!({"type": "string"}));
    let ok = Probe::new("ok", Behaviour::Succeed);
    let failing = Probe::new("failing", Behaviour::Fail("x".into()));
    let strict = Probe::with_spec(spec.build(), Behaviour::Value(json!(1)));
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
            text(result.record()).ends_with("[finalized]"),
            "{name} {args}: {}",
            text(result.record())
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
        result.record().effects,
        vec![written("/w/a.txt")],
        "effects survive a block"
    );
    assert_eq!(result.context().len(), 1);
    assert_eq!(result.context()[0].source, "review");
    assert_eq!(
        h.kinds(),
        ["tool/call", "tool/start", "tool/result", "context/message"]
    );
}

#[tokio::test]
async fn post_hooks_replace_content_and_value_with_revalidation() {
    let spec =
        ToolSpec::builder("probe", "p", object_schema()).output_schema(json!({"type": "object"}));
    let probe = Probe::with_spec(spec.build(), Behaviour::Succeed);
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
    assert_eq!(text(result.record()), "[redacted]|[finalized]");
    assert_eq!(result.record().value, Some(json!({"ok": true})));

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
    assert!(text(result.record()).contains("the tool did run"));
    assert_eq!(result.record().effects, vec![written("/w/a.txt")]);
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
        !result.record().is_error(),
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
async fn a_declared_output_schema_requires_a_value() {
    let spec =
        ToolSpec::builder("probe", "p", object_schema()).output_schema(json!({"type": "object"}));
    let h = Harness::new(vec![Probe::with_spec(spec.build(), Behaviour::TextOnly)]);
    let result = h.run(&h.pipeline().build(), "probe", "{}").await;
    assert_eq!(code(&result), Some("INVALID_TOOL_OUTPUT"));
    assert!(text(result.record()).contains("declares an output schema but returned no value"));
}

#[tokio::test]
async fn post_hooks_cannot_rewrite_an_error_result() {
    let h = Harness::new(vec![Probe::new("probe", Behaviour::Fail("boom".into()))]);
    let pipeline = h
        .pipeline()
        .post_hook(PostHook::new(
            "prettify",
            Some(PostExecuteDecision::action(
                PostExecuteAction::ReplaceContent(vec![ContentBlock::text("all good")]),
            )),
        ))
        .post_hook(PostHook::new(
            "valuer",
            Some(PostExecuteDecision::action(
                PostExecuteAction::ReplaceValue(json!(1)),
            )),
        ))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("TOOL_FAILED"));
    assert_eq!(text(result.record()), "Error: boom|[finalized]");
    assert_eq!(result.record().value, None);
}

/// A post-execute hook that never answers.
struct HangingPostHook;

impl toolrail_tools_core::PostExecuteHook for HangingPostHook {
    fn name(&self) -> &str {
        "hanging-redactor"
    }

    fn after<'a>(
        &'a self,
        _call: &'a toolrail_tools_core::CallView<'a>,
        _result: &'a toolrail_tools_core::ResultView<'a>,
    ) -> toolrail_session_log::BoxFuture<
        'a,
        Result<PostExecuteDecision, toolrail_tools_core::HookError>,
    > {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_hook_still_running_at_cancel_fails_the_result_closed() {
    let probe = Probe::new("probe", Behaviour::EffectThenFail);
    let h = Harness::new(vec![probe]);
    let pipeline = h.pipeline().post_hook(Arc::new(HangingPostHook)).build();
    let result = h
        .run_cancelled_after(&pipeline, "probe", Duration::from_secs(1))
        .await;
    assert_eq!(code(&result), Some("HOOK_FAILED"));
    assert!(text(result.record()).contains("did not finish before the batch was cancelled"));
    assert_eq!(result.record().effects, vec![written("/w/a.txt")]);
}

/// Records the urgency of every append, then stores it in memory.
#[derive(Default)]
struct UrgencySink {
    inner: MemorySink,
    urgencies: parking_lot::Mutex<Vec<(String, toolrail_session_log::AppendUrgency)>>,
}

impl toolrail_session_log::EventSink for UrgencySink {
    fn append(
        &self,
        draft: toolrail_session_log::EventDraft,
        urgency: toolrail_session_log::AppendUrgency,
    ) -> toolrail_session_log::AppendFuture<'_> {
        self.urgencies
            .lock()
            .push((draft.data.kind().to_owned(), urgency));
        self.inner.append(draft, urgency)
    }
}

#[tokio::test]
async fn starts_of_calls_that_may_act_and_every_commit_are_durable() {
    use toolrail_session_log::AppendUrgency::{Buffered, Durable};
    let writer = Probe::new("writer", Behaviour::Succeed);
    let reader = Probe::with_spec(
        ToolSpec::builder("reader", "r", object_schema())
            .read_only()
            .build(),
        Behaviour::Succeed,
    );
    let h = Harness::new(vec![writer, reader]);
    let sink = Arc::new(UrgencySink::default());
    let pipeline = Pipeline::builder(sink.clone()).build();
    for name in ["writer", "reader"] {
        pipeline
            .execute_one(
                &h.registry.snapshot(),
                CallRequest::new("c1", 0, name, "{}"),
                &BatchControl::default(),
            )
            .await
            .unwrap();
    }
    let urgencies = sink.urgencies.lock().clone();
    let seen: Vec<(&str, toolrail_session_log::AppendUrgency)> = urgencies
        .iter()
        .map(|(kind, urgency)| (kind.as_str(), *urgency))
        .collect();
    assert_eq!(
        seen,
        [
            ("tool/call", Buffered),
            ("tool/start", Durable),
            ("tool/result", Durable),
            ("tool/call", Buffered),
            ("tool/start", Buffered),
            ("tool/result", Durable),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn finalize_also_runs_on_refusals_and_interrupted_calls() {
    let timed = Probe::with_spec(
        ToolSpec::builder("timed", "t", object_schema())
            .timeout(Duration::from_secs(1))
            .build(),
        Behaviour::SleepCooperative(Duration::from_secs(60)),
    );
    let stuck = Probe::with_spec(
        ToolSpec::builder("stuck", "s", object_schema())
            .timeout(Duration::from_secs(1))
            .build(),
        Behaviour::EffectThenHang,
    );
    let asked = Probe::new("asked", Behaviour::Succeed);
    let guarded = Probe::new("guarded", Behaviour::Succeed);
    let h = Harness::new(vec![
        timed.clone(),
        stuck.clone(),
        asked.clone(),
        guarded.clone(),
    ]);
    struct DenyGuarded;
    impl toolrail_tools_core::Guard for DenyGuarded {
        fn name(&self) -> &str {
            "deny-guarded"
        }
        fn check(&self, call: &toolrail_tools_core::CallView<'_>) -> GuardVerdict {
            if call.spec.name() == "guarded" {
                GuardVerdict::Deny {
                    reason: "no".into(),
                }
            } else {
                GuardVerdict::Abstain
            }
        }
    }
    struct AskAsked;
    impl toolrail_tools_core::PreExecuteHook for AskAsked {
        fn name(&self) -> &str {
            "ask-asked"
        }
        fn decide<'a>(
            &'a self,
            call: &'a toolrail_tools_core::CallView<'a>,
            next: toolrail_tools_core::PreNext<'a>,
        ) -> toolrail_session_log::BoxFuture<
            'a,
            Result<PreExecuteDecision, toolrail_tools_core::HookError>,
        > {
            Box::pin(async move {
                if call.spec.name() == "asked" {
                    Ok(ask("?"))
                } else {
                    next.run().await
                }
            })
        }
    }
    let pipeline = h
        .pipeline()
        .config(PipelineConfig {
            cancel_grace: Duration::from_secs(1),
            ..PipelineConfig::default()
        })
        .pre_hook(Arc::new(AskAsked))
        .guard(Arc::new(DenyGuarded))
        .build();
    let mut codes = Vec::new();
    for name in ["timed", "stuck", "asked", "guarded"] {
        let result = h.run(&pipeline, name, "{}").await;
        assert!(
            text(result.record()).ends_with("[finalized]"),
            "{name}: {}",
            text(result.record())
        );
        codes.push(code(&result).map(str::to_owned));
    }
    let control = BatchControl::default();
    control.cancel.cancel();
    let cancelled = pipeline
        .execute_one(
            &h.registry.snapshot(),
            CallRequest::new("c9", 0, "asked", "{}"),
            &control,
        )
        .await
        .unwrap();
    assert!(text(cancelled.record()).ends_with("[finalized]"));
    let truncated = pipeline
        .record_truncated(
            &h.registry.snapshot(),
            CallRequest::new("c10", 0, "guarded", "{"),
        )
        .await
        .unwrap();
    let truncated = pipeline.finish(truncated).await.unwrap();
    assert!(text(truncated.record()).ends_with("[finalized]"));
    assert_eq!(
        codes,
        [
            "TOOL_TIMEOUT",
            "TOOL_OUTCOME_UNKNOWN",
            "APPROVAL_UNAVAILABLE",
            "GUARD_DENIED"
        ]
        .map(|c| Some(c.to_owned()))
    );
    assert_eq!(
        (
            timed.finalized(),
            stuck.finalized(),
            asked.finalized(),
            guarded.finalized()
        ),
        (1, 1, 2, 2),
        "once per call, whatever its outcome"
    );
}
