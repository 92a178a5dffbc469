//! Stages 6–7 through the public API: start, layers, the body, enforced deadlines,
//! cancellation and abandonment, internal failures.
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
use toolrail_tools_core::ToolCode;

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
        assert_eq!(result.record().error.as_ref().unwrap().message, message);
        assert_eq!(
            text(result.record()),
            format!("Error: {message}|[finalized]")
        );
        assert_eq!(result.record().effects.len(), effects);
        assert_eq!(h.kinds(), ["tool/call", "tool/start", "tool/result"]);
    }
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
    let spec = ToolSpec::builder("slow", "p", object_schema()).timeout(Duration::from_secs(10));
    let probe = Probe::with_spec(
        spec.build(),
        Behaviour::SleepCooperative(Duration::from_secs(3600)),
    );
    let h = Harness::new(vec![probe]);
    let result = h.run(&h.pipeline().build(), "slow", "{}").await;
    assert_eq!(code(&result), Some("TOOL_TIMEOUT"));
    let message = &result.record().error.as_ref().unwrap().message;
    assert!(
        message.contains("within 10.0 s") && message.contains("stopped on cancel"),
        "{message}"
    );
    assert!(!result.record().synthetic);
}

#[tokio::test(start_paused = true)]
async fn an_uncooperative_body_is_abandoned_as_outcome_unknown_with_its_effects() {
    let spec = ToolSpec::builder("stuck", "p", object_schema()).timeout(Duration::from_secs(1));
    let probe = Probe::with_spec(spec.build(), Behaviour::EffectThenHang);
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
    assert!(result.record().synthetic);
    assert_eq!(result.record().effects, vec![written("/w/b.txt")]);
    assert!(text(result.record()).contains("verify before retrying"));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_millis(3100),
        "deadline plus grace, no more: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_request_timeout_overrides_the_tool_default() {
    let spec = ToolSpec::builder("slow", "p", object_schema()).timeout(Duration::from_secs(3600));
    let probe = Probe::with_spec(
        spec.build(),
        Behaviour::SleepStubborn(Duration::from_secs(60)),
    );
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
    assert!(!result.record().is_error(), "{:?}", result.record().error);
    assert_eq!(text(result.record()), "slept stubbornly|[finalized]");
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
        result.record().error.clone().unwrap().code,
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
    assert!(result.record().synthetic);
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
            ToolSpec::for_args::<GreetArgs>("greet", "Greets someone")
                .read_only()
                .build()
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
    assert_eq!(text(ok.record()), "hello adahello ada");
    let bad = h.run(&pipeline, "greet", r#"{"times":300}"#).await;
    assert_eq!(code(&bad), Some("INVALID_ARGS"));
    let message = bad.record().error.clone().unwrap().message;
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
        _args: &'a CallArgs,
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
    let tool = Arc::new(PanicsEagerly(
        ToolSpec::builder("eager", "e", object_schema()).build(),
    ));
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![tool, probe.clone()]);
    let result = h.run(&h.pipeline().build(), "eager", "{}").await;
    assert_eq!(code(&result), Some("TOOL_FAILED"));
    assert!(text(result.record()).contains("execute panicked before returning its future"));

    let pipeline = h.pipeline().pre_hook(Arc::new(EagerPanicHook)).build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert_eq!(code(&result), Some("HOOK_FAILED"));
    assert_eq!(probe.runs(), 0);
}

/// Blocks its thread (no await) until released or for at most `block`.
struct Blocking {
    spec: ToolSpec,
    block: Duration,
    release: parking_lot::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    finished: std::sync::atomic::AtomicBool,
}

impl Blocking {
    fn new(
        timeout: Duration,
        block: Duration,
        release: Option<std::sync::mpsc::Receiver<()>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec::builder("blocking", "b", object_schema())
                .timeout(timeout)
                .build(),
            block,
            release: parking_lot::Mutex::new(release),
            finished: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

impl Tool for Blocking {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn execute<'a>(
        &'a self,
        _ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a CallArgs,
    ) -> toolrail_session_log::BoxFuture<'a, toolrail_tools_core::ToolResult> {
        Box::pin(async move {
            let receiver = self.release.lock().take();
            match receiver {
                Some(receiver) => drop(receiver.recv_timeout(self.block)),
                None => std::thread::sleep(self.block),
            }
            self.finished
                .store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(toolrail_tools_core::ToolOutput::text("done blocking"))
        })
    }
}

#[tokio::test]
async fn an_inline_body_that_blocks_past_its_deadline_is_a_timeout_not_a_success() {
    let tool = Blocking::new(Duration::from_millis(20), Duration::from_millis(200), None);
    let h = Harness::new(vec![tool]);
    let result = h.run(&h.pipeline().build(), "blocking", "{}").await;
    assert_eq!(code(&result), Some("TOOL_TIMEOUT"));
    assert!(
        text(result.record()).contains("finished only after the deadline"),
        "{}",
        text(result.record())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_body_that_blocks_its_thread_is_abandoned_on_time() {
    let (release, blocked) = std::sync::mpsc::channel();
    let tool = Blocking::new(
        Duration::from_millis(50),
        Duration::from_secs(30),
        Some(blocked),
    );
    let h = Harness::new(vec![tool.clone()]);
    let config = PipelineConfig {
        execution: toolrail_tools_core::pipeline::BodyExecution::Task,
        cancel_grace: Duration::from_millis(50),
        ..PipelineConfig::default()
    };
    let result = h
        .run(&h.pipeline().config(config).build(), "blocking", "{}")
        .await;
    assert_eq!(code(&result), Some("TOOL_OUTCOME_UNKNOWN"));
    assert!(
        !tool.finished.load(std::sync::atomic::Ordering::SeqCst),
        "the outcome was committed while the body was still blocked"
    );
    release.send(()).unwrap();
}

#[tokio::test]
async fn a_task_body_runs_and_keeps_its_result_and_effects() {
    let probe = Probe::new("probe", Behaviour::EffectThenFail);
    let h = Harness::new(vec![probe.clone()]);
    let config = PipelineConfig {
        execution: toolrail_tools_core::pipeline::BodyExecution::Task,
        ..PipelineConfig::default()
    };
    let result = h
        .run(&h.pipeline().config(config).build(), "probe", "{}")
        .await;
    assert_eq!(code(&result), Some("TOOL_FAILED"));
    assert_eq!(result.record().effects, vec![written("/w/a.txt")]);
    assert_eq!(probe.runs(), 1);
}

/// Fails with the code it is given.
struct Failing(ToolSpec, ToolCode);

impl Tool for Failing {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn execute<'a>(
        &'a self,
        _ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a CallArgs,
    ) -> toolrail_session_log::BoxFuture<'a, toolrail_tools_core::ToolResult> {
        let code = self.1.clone();
        Box::pin(async move {
            Err(toolrail_tools_core::ToolFailure::with_code(
                code,
                "nothing to see",
            ))
        })
    }
}

#[tokio::test]
async fn a_tool_s_code_is_recorded_as_it_gave_it() {
    const QUOTA: ToolCode = toolrail_tools_core::tool_code!("WEB_QUOTA_EXCEEDED");
    for (given, recorded) in [
        (ToolCode::FAILED, "TOOL_FAILED"),
        (ToolCode::STALE_STATE, "STALE_STATE"),
        (ToolCode::TIMEOUT, "TOOL_TIMEOUT"),
        (ToolCode::OUTCOME_UNKNOWN, "TOOL_OUTCOME_UNKNOWN"),
        (QUOTA, "WEB_QUOTA_EXCEEDED"),
        (
            ToolCode::parse("FS_STALE_VERSION").unwrap(),
            "FS_STALE_VERSION",
        ),
    ] {
        let tool = Arc::new(Failing(
            ToolSpec::builder("failing", "f", object_schema()).build(),
            given,
        ));
        let h = Harness::new(vec![tool]);
        let result = h.run(&h.pipeline().build(), "failing", "{}").await;
        assert_eq!(code(&result), Some(recorded));
    }
}

/// A pipeline code cannot become a tool's code, at run time either (at compile time,
/// `tool_code!` refuses it: see its rustdoc).
#[test]
fn no_pipeline_code_parses_as_a_tool_code() {
    for code in ErrorCode::BUILT_IN {
        assert!(ToolCode::parse(code.as_str()).is_err(), "{code}");
    }
    assert!(ToolCode::parse("web-quota").is_err());
}

#[tokio::test]
async fn a_deadline_too_far_to_represent_is_no_deadline() {
    let probe = Probe::new("probe", Behaviour::Succeed);
    let h = Harness::new(vec![probe.clone()]);
    let request = CallRequest::new("c1", 0, "probe", "{}").with_timeout(Duration::MAX);
    let result = h
        .pipeline()
        .build()
        .execute_one(&h.registry.snapshot(), request, &BatchControl::default())
        .await
        .unwrap();
    assert!(!result.record().is_error(), "{:?}", result.record().error);
    assert_eq!(probe.runs(), 1);
}

/// Records a fact of its own. (Writing its own result does not compile: `ToolContext::record`
/// takes a `ToolEvent`, which has no `tool/result` form; its rustdoc holds that check.)
struct Observer(ToolSpec);

impl Tool for Observer {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a CallArgs,
    ) -> toolrail_session_log::BoxFuture<'a, toolrail_tools_core::ToolResult> {
        Box::pin(async move {
            let observed = toolrail_session_log::event::FsObserved {
                path: "/w/a".into(),
                digest: "d".into(),
            };
            ctx.record(observed, toolrail_session_log::AppendUrgency::Buffered)
                .await
                .unwrap();
            Ok(toolrail_tools_core::ToolOutput::text("seen"))
        })
    }
}

#[tokio::test]
async fn a_tool_records_its_own_facts_between_its_start_and_its_result() {
    let h = Harness::new(vec![Arc::new(Observer(
        ToolSpec::builder("observer", "f", object_schema()).build(),
    ))]);
    let result = h.run(&h.pipeline().build(), "observer", "{}").await;
    assert_eq!(text(result.record()), "seen");
    assert_eq!(
        h.kinds(),
        ["tool/call", "tool/start", "fs/observed", "tool/result"]
    );
}

/// How often `counted` ran: once per decoding of [`CountedArgs`].
static DECODES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn counted<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    DECODES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    serde::Deserialize::deserialize(deserializer)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountedArgs {
    #[serde(deserialize_with = "counted")]
    #[schemars(with = "String")]
    name: String,
}

/// Reads its arguments at every stage that may: concurrency (not declared), the check,
/// `must_ask` and the body.
struct Counted;

impl toolrail_tools_core::TypedTool for Counted {
    type Args = CountedArgs;
    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<CountedArgs>("counted", "Counts its decodings").build()
    }
    fn concurrency(&self, args: &CountedArgs) -> toolrail_tools_core::Concurrency {
        assert!(!args.name.is_empty());
        toolrail_tools_core::Concurrency::shared()
    }
    fn check(&self, args: &CountedArgs) -> Result<(), Vec<String>> {
        assert!(!args.name.is_empty());
        Ok(())
    }
    fn must_ask(&self, args: &CountedArgs) -> Option<String> {
        assert!(!args.name.is_empty());
        None
    }
    async fn run(
        &self,
        _ctx: &toolrail_tools_core::ToolContext,
        args: CountedArgs,
    ) -> toolrail_tools_core::ToolResult {
        Ok(toolrail_tools_core::ToolOutput::text(args.name))
    }
}

/// A typed tool's arguments are decoded once per call, however many stages read them, and
/// again only when a hook rewrote them (the body then sees the rewritten ones).
#[tokio::test]
async fn a_typed_tool_decodes_its_arguments_once_per_call() {
    use std::sync::atomic::Ordering;
    let tool = Arc::new(toolrail_tools_core::Typed::new(Counted));
    let h = Harness::new(vec![tool.clone()]);
    let plain = h.pipeline().build();
    let control = BatchControl::default();
    let prepared = plain
        .prepare(
            &h.registry.snapshot(),
            CallRequest::new("c1", 0, "counted", r#"{"name":"ada"}"#),
            &control,
        )
        .await
        .unwrap();
    let toolrail_tools_core::pipeline::Preparation::Ready(ready) = prepared else {
        panic!("the call was refused");
    };
    // The scheduler asks for the concurrency again right before the start.
    assert_eq!(
        ready.concurrency(),
        toolrail_tools_core::Concurrency::shared()
    );
    let settled = plain.dispatch(ready, &control).await.unwrap();
    let committed = plain.finish(settled).await.unwrap();
    assert_eq!(text(committed.record()), "ada");
    assert_eq!(
        DECODES.load(Ordering::SeqCst),
        1,
        "check, concurrency, must_ask, body"
    );

    DECODES.store(0, Ordering::SeqCst);
    let rewriting = h
        .pipeline()
        .pre_hook(FixedHook::new(
            "rename",
            HookBehaviour::Decide(PreExecuteDecision::Rewrite {
                arguments: json!({"name": "grace"}),
                reason: "renamed".to_owned(),
            }),
        ))
        .build();
    let renamed = h.run(&rewriting, "counted", r#"{"name":"ada"}"#).await;
    assert_eq!(text(renamed.record()), "grace");
    assert_eq!(
        DECODES.load(Ordering::SeqCst),
        2,
        "the original, then the rewrite"
    );
}
