//! An agent put together by the builder keeps every guarantee the pipeline gives when wired
//! by hand: a deny rule holds against a hook that allows, asking without an approval
//! service is never an approval, `bash` runs sandboxed with nothing set up in `main`, a cut
//! message runs nothing, a cancelled turn gives every call an honest outcome, and calls the
//! spec declares parallel-safe really overlap. Each turn is scripted; the tools are real.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use std::time::Duration;

use toolrail_runtime::scenario::ScriptedModel;
use toolrail_runtime::{Agent, AgentBuilder, AgentEvent, PresetName, Store};
use toolrail_session_log::{
    BoxFuture, CallId, ErrorCode, EventData,
    event::{AssistantBlock, AssistantMessage, StopReason, TurnEndKind},
};
use toolrail_tools_core::{
    CallView, HookError, PreExecuteDecision, PreExecuteHook, PreNext, ToolContext, ToolOutput,
    ToolResult, ToolSpec, Typed, TypedTool,
};

/// An assistant message with these calls `(id, tool, arguments)`.
fn calls(calls: &[(&str, &str, &str)], stop_reason: StopReason) -> AssistantMessage {
    AssistantMessage {
        blocks: calls
            .iter()
            .map(|(id, name, arguments)| AssistantBlock::ToolCall {
                call_id: CallId::from(*id),
                name: (*name).to_owned(),
                arguments_raw: (*arguments).to_owned(),
            })
            .collect(),
        stop_reason,
    }
}

fn bash(command: &str) -> String {
    serde_json::json!({"command": command, "description": "test"}).to_string()
}

/// A builder for a session in a fresh folder, answered by `script`.
fn session(
    folder: &tempfile::TempDir,
    script: Vec<AssistantMessage>,
) -> (AgentBuilder, Arc<ScriptedModel>) {
    let workspace = folder.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let model = Arc::new(ScriptedModel::new(script));
    let builder = Agent::builder()
        .workspace([workspace])
        .store(Store::jsonl(folder.path().join("sessions")).unwrap())
        .session_id("s1")
        .model_client(model.clone());
    (builder, model)
}

/// Each call's error code (`None` for a success), and whether its body started.
fn outcomes(agent: &Agent) -> Vec<(String, Option<ErrorCode>, bool)> {
    let events = agent.store().read(agent.session_id()).unwrap();
    let started = |id: &CallId| {
        events.iter().any(|event| {
            matches!(event.data, EventData::ToolStart(_)) && event.call_id.as_ref() == Some(id)
        })
    };
    events
        .iter()
        .filter_map(|event| match (&event.data, &event.call_id) {
            (EventData::ToolResult(record), Some(id)) => {
                Some((id.to_string(), record.error_code().cloned(), started(id)))
            }
            _ => None,
        })
        .collect()
}

/// A hook that allows every call without asking anything further.
struct AllowEverything;

impl PreExecuteHook for AllowEverything {
    fn name(&self) -> &str {
        "allow-everything"
    }

    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async { Ok(PreExecuteDecision::Allow) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_holds_against_a_hook_that_allows() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![
            calls(
                &[
                    ("c1", "bash", &bash("curl -s http://127.0.0.1:9/")),
                    ("c2", "bash", &bash("echo allowed")),
                ],
                StopReason::ToolCalls,
            ),
            ScriptedModel::text("done"),
        ],
    );
    let agent = builder
        .tools(["bash"])
        .preset(PresetName::FullAuto)
        .deny("bash(curl *)")
        .pre_hook(Arc::new(AllowEverything))
        .build()
        .await
        .unwrap();
    let answer = agent.prompt("fetch it").await.unwrap();
    assert_eq!(answer.end, TurnEndKind::Completed);
    let outcomes = outcomes(&agent);
    assert_eq!(outcomes[0].0, "c1");
    assert!(
        matches!(
            outcomes[0].1,
            Some(ErrorCode::PolicyDenied | ErrorCode::GuardDenied)
        ),
        "{outcomes:?}"
    );
    assert!(!outcomes[0].2, "a denied call never starts");
    assert_eq!(
        outcomes[1],
        ("c2".to_owned(), None, true),
        "the hook's allow stands where no rule denies"
    );
}

/// A hook that turns any command into a `curl` and allows it: what it runs is not what the
/// rules judged.
struct RewriteToCurl;

impl PreExecuteHook for RewriteToCurl {
    fn name(&self) -> &str {
        "rewrite-to-curl"
    }

    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async {
            Ok(PreExecuteDecision::Rewrite {
                arguments: serde_json::json!({"command": "curl -s http://127.0.0.1:9/", "description": "x"}),
                reason: "fetch instead".to_owned(),
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_holds_against_a_hook_that_rewrites_a_call_into_what_it_denies() {
    // The rules judge what the model sent (`echo`, allowed); the deny guard judges what
    // would run: the builder installs it, so the rewritten `curl` never starts.
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![
            calls(
                &[("c1", "bash", &bash("echo harmless"))],
                StopReason::ToolCalls,
            ),
            ScriptedModel::text("done"),
        ],
    );
    let agent = builder
        .tools(["bash"])
        .preset(PresetName::FullAuto)
        .deny("bash(curl *)")
        .pre_hook(Arc::new(RewriteToCurl))
        .build()
        .await
        .unwrap();
    agent.prompt("say it").await.unwrap();
    assert_eq!(
        outcomes(&agent),
        [("c1".to_owned(), Some(ErrorCode::GuardDenied), false)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_without_an_approval_service_is_approval_unavailable() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![
            calls(&[("c1", "bash", &bash("echo hi"))], StopReason::ToolCalls),
            ScriptedModel::text("done"),
        ],
    );
    // The default preset, `untrusted`: a command asks, and nobody is there to answer.
    let agent = builder.tools(["bash"]).build().await.unwrap();
    agent.prompt("say hi").await.unwrap();
    assert_eq!(
        outcomes(&agent),
        [("c1".to_owned(), Some(ErrorCode::ApprovalUnavailable), false)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_runs_sandboxed_with_nothing_set_up() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![
            calls(
                &[(
                    "c1",
                    "bash",
                    &bash(
                        "echo inside > made.txt; echo status $?; grep NoNewPrivs /proc/self/status",
                    ),
                )],
                StopReason::ToolCalls,
            ),
            ScriptedModel::text("done"),
        ],
    );
    let agent = builder
        .tools(["bash"])
        .preset(PresetName::FullAuto)
        .build()
        .await
        .unwrap();
    let answer = agent.prompt("write a file").await.unwrap();
    let text = answer.results[0].text();
    assert!(!answer.results[0].is_error(), "{text}");
    // The default sandbox is read-only: the write is refused by the kernel, and the
    // command runs without the right to gain privileges.
    assert!(text.contains("status 1"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(!folder.path().join("workspace/made.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_cut_by_the_length_limit_runs_none_of_its_calls() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![calls(
            &[("c1", "bash", &bash("echo never"))],
            StopReason::Length,
        )],
    );
    let agent = builder
        .tools(["bash"])
        .preset(PresetName::FullAuto)
        .build()
        .await
        .unwrap();
    let mut events = agent.stream("go");
    let mut committed = Vec::new();
    let mut ended = None;
    while let Some(event) = events.next().await {
        match event.unwrap() {
            AgentEvent::CallCommitted {
                call_id, record, ..
            } => {
                committed.push((call_id.to_string(), record.error_code().cloned()));
            }
            AgentEvent::TurnEnded(answer) => ended = Some(answer.end),
            _ => {}
        }
    }
    assert_eq!(
        committed,
        [("c1".to_owned(), Some(ErrorCode::TruncatedCall))]
    );
    assert_eq!(ended, Some(TurnEndKind::Truncated));
    assert!(!outcomes(&agent)[0].2, "nothing of a cut message starts");
}

/// Says when its body runs, then waits to be cancelled.
struct Hold(Arc<tokio::sync::Notify>);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct HoldArgs {}

impl TypedTool for Hold {
    type Args = HoldArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<HoldArgs>("hold", "Holds until cancelled.").build()
    }

    async fn run(&self, ctx: &ToolContext, _args: HoldArgs) -> ToolResult {
        self.0.notify_one();
        ctx.cancellation().cancelled().await;
        Ok(ToolOutput::text("stopped"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_turn_gives_every_call_an_honest_outcome() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![calls(
            &[("c1", "hold", "{}"), ("c2", "hold", "{}")],
            StopReason::ToolCalls,
        )],
    );
    let running = Arc::new(tokio::sync::Notify::new());
    let agent = builder
        .tools(Vec::<String>::new())
        .tool(Typed::new(Hold(running.clone())))
        .preset(PresetName::FullAuto)
        .build()
        .await
        .unwrap();
    let mut events = agent.stream("wait");
    let canceller = agent.canceller();
    // Cancelled once the first call's body runs (a gate, not a clock).
    tokio::spawn(async move {
        running.notified().await;
        canceller.cancel();
    });
    let mut ended = None;
    while let Some(event) = events.next().await {
        if let AgentEvent::TurnEnded(answer) = event.unwrap() {
            ended = Some(answer.end);
        }
    }
    assert_eq!(ended, Some(TurnEndKind::Aborted));
    // The running call stopped when told and keeps its real outcome; the one that never
    // started is not executed, and says so.
    assert_eq!(
        outcomes(&agent),
        [
            ("c1".to_owned(), None, true),
            ("c2".to_owned(), Some(ErrorCode::NotExecuted), false),
        ]
    );
    // The agent takes the next turn.
    let again = agent.prompt("go on").await.unwrap();
    assert_eq!(again.end, TurnEndKind::Completed);
}

/// Waits at a barrier of two: it returns only if another call of it runs at the same time.
struct Meet(Arc<tokio::sync::Barrier>);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct MeetArgs {}

impl TypedTool for Meet {
    type Args = MeetArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<MeetArgs>("meet", "Meets another call.")
            .read_only()
            .parallel_safe()
            .build()
    }

    async fn run(&self, _ctx: &ToolContext, _args: MeetArgs) -> ToolResult {
        match tokio::time::timeout(Duration::from_secs(10), self.0.wait()).await {
            Ok(_) => Ok(ToolOutput::text("met")),
            Err(_) => Ok(ToolOutput::text("alone")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_the_spec_declares_parallel_safe_run_side_by_side() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(
        &folder,
        vec![
            calls(
                &[("c1", "meet", "{}"), ("c2", "meet", "{}")],
                StopReason::ToolCalls,
            ),
            ScriptedModel::text("done"),
        ],
    );
    let agent = builder
        .tools(Vec::<String>::new())
        .tool(Typed::new(Meet(Arc::new(tokio::sync::Barrier::new(2)))))
        .build()
        .await
        .unwrap();
    let answer = agent.prompt("meet").await.unwrap();
    let texts: Vec<String> = answer.results.iter().map(|record| record.text()).collect();
    assert_eq!(texts, ["met", "met"]);
}

/// Says when its body runs, then waits to be released.
struct Gated {
    running: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GatedArgs {}

impl TypedTool for Gated {
    type Args = GatedArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<GatedArgs>("gated", "Waits for the test.").build()
    }

    async fn run(&self, _ctx: &ToolContext, _args: GatedArgs) -> ToolResult {
        self.running.notify_one();
        self.release.notified().await;
        Ok(ToolOutput::text("released"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_prompt_while_a_turn_runs_is_refused_and_steering_joins_the_turn() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, model) = session(
        &folder,
        vec![
            calls(&[("c1", "gated", "{}")], StopReason::ToolCalls),
            ScriptedModel::text("done"),
        ],
    );
    let (running, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let agent = builder
        .tools(Vec::<String>::new())
        .tool(Typed::new(Gated {
            running: running.clone(),
            release: release.clone(),
        }))
        .preset(PresetName::FullAuto)
        .build()
        .await
        .unwrap();
    let mut events = agent.stream("wait");
    running.notified().await;
    assert!(matches!(
        agent.prompt("another").await,
        Err(toolrail_runtime::AgentError::Busy)
    ));
    assert!(agent.steer("also check the logs"));
    release.notify_one();
    while let Some(event) = events.next().await {
        event.unwrap();
    }
    // The steering message reached the model's next request, after the batch's result.
    let second = &model.requests()[1];
    let last = second.messages.last().unwrap();
    assert!(
        matches!(last, toolrail_session_log::ConversationItem::Context { source, .. } if source == "user"),
        "{last:?}"
    );
}

/// A `read` of the embedder's own.
struct MyRead;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct MyReadArgs {}

impl TypedTool for MyRead {
    type Args = MyReadArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<MyReadArgs>("read", "Mine.").build()
    }

    async fn run(&self, _ctx: &ToolContext, _args: MyReadArgs) -> ToolResult {
        Ok(ToolOutput::text("mine"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_of_the_embedders_never_silently_replaces_a_shipped_one() {
    let folder = tempfile::tempdir().unwrap();
    let (builder, _) = session(&folder, Vec::new());
    let error = builder
        .tools(["read", "grep"])
        .tool(Typed::new(MyRead))
        .build()
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("leave `read` out of `tools.enabled` to use yours"),
        "{error}"
    );
    assert!(
        !folder.path().join("sessions/s1.jsonl").exists(),
        "nothing was written"
    );
    // Left out of the shipped tools, it is the session's `read`.
    let (builder, _) = session(&folder, Vec::new());
    let agent = builder
        .tools(["grep"])
        .tool(Typed::new(MyRead))
        .build()
        .await
        .unwrap();
    let read = agent.tools().snapshot();
    assert_eq!(
        read.resolve("read", toolrail_tools_core::registry::CallOrigin::Host)
            .map(|entry| entry.spec().description().to_owned())
            .as_deref(),
        Some("Mine.")
    );
}
