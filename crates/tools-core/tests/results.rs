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
