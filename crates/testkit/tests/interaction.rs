//! Interaction and policy together, through the pipeline and the scheduler: plan mode with
//! its guard and exit tool, and approvals asked in model order within one batch.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use toolrail_tools_core::CallArgs;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{Scheduler, SchedulerConfig};
use toolrail_interaction::{ChannelApprovals, PlanMode, ScriptedApprovals};
use toolrail_policy_guards::PlanModeGuard;
use toolrail_session_log::{ErrorCode, EventData, MemorySink, ToolSource};
use toolrail_tools_core::{
    ApprovalAnswer, CallRequest, CallView, CommittedResult, HookError, Pipeline, PlanModeSwitch,
    PreExecuteDecision, PreExecuteHook, PreNext, RegistryBuilder, Tool, ToolSet,
    pipeline::BatchControl,
};

struct Setup {
    sink: Arc<MemorySink>,
    tools: ToolSet,
}

fn setup(tools: Vec<Arc<dyn Tool>>) -> Setup {
    let mut builder = RegistryBuilder::new();
    for tool in tools {
        builder = builder.external(ToolSource::Builtin, tool);
    }
    let (registry, _) = builder.build().unwrap();
    Setup {
        sink: Arc::new(MemorySink::new()),
        tools: registry.snapshot(),
    }
}

impl Setup {
    fn pipeline(&self) -> toolrail_tools_core::PipelineBuilder {
        Pipeline::builder(self.sink.clone())
    }

    async fn run(
        &self,
        pipeline: &Pipeline,
        id: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> CommittedResult {
        pipeline
            .execute_one(
                &self.tools,
                CallRequest::new(id, 0, tool, args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    }

    fn kinds(&self) -> Vec<String> {
        self.sink.kinds()
    }
}

fn text(result: &CommittedResult) -> String {
    result.record().text()
}

/// A tool that changes the workspace, for plan mode to stop.
struct Write(toolrail_tools_core::ToolSpec);

impl Tool for Write {
    fn spec(&self) -> &toolrail_tools_core::ToolSpec {
        &self.0
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a CallArgs,
    ) -> toolrail_tools_core::log::BoxFuture<'a, toolrail_tools_core::ToolResult> {
        Box::pin(async { Ok(toolrail_tools_core::ToolOutput::text("written")) })
    }
}

#[tokio::test]
async fn plan_mode_stays_on_after_a_rejected_plan_and_ends_on_an_approved_one() {
    let switch = PlanModeSwitch::new();
    let plan = PlanMode::new(switch.clone());
    let write = Write(
        toolrail_tools_core::ToolSpec::builder("write", "writes", json!({"type": "object"}))
            .build(),
    );
    let read_only = Write(
        toolrail_tools_core::ToolSpec::builder("read", "reads", json!({"type": "object"}))
            .read_only()
            .build(),
    );
    let s = setup(vec![
        Arc::new(plan.exit_tool()),
        Arc::new(write),
        Arc::new(read_only),
    ]);
    plan.enter(s.sink.as_ref()).await.unwrap();
    assert!(plan.is_active());
    let approvals = Arc::new(ScriptedApprovals::new([
        ApprovalAnswer::Rejected {
            reason: Some("too risky".to_owned()),
        },
        ApprovalAnswer::AllowedOnce,
    ]));
    let pipeline = s
        .pipeline()
        .guard(Arc::new(PlanModeGuard::new(switch.clone())))
        .approval(approvals.clone())
        .build();

    let denied = s.run(&pipeline, "c1", "write", json!({})).await;
    assert_eq!(denied.record().error_code(), Some(&ErrorCode::GuardDenied));
    assert!(text(&denied).contains("exit_plan_mode"));
    let read = s.run(&pipeline, "c2", "read", json!({})).await;
    assert!(!read.record().is_error());

    let rejected = s
        .run(
            &pipeline,
            "c3",
            "exit_plan_mode",
            json!({"plan": "1. edit 2. test"}),
        )
        .await;
    assert_eq!(
        rejected.record().error_code(),
        Some(&ErrorCode::ApprovalRejected)
    );
    assert!(switch.is_active(), "a rejected plan keeps plan mode on");
    assert_eq!(
        s.run(&pipeline, "c4", "write", json!({}))
            .await
            .record()
            .error_code(),
        Some(&ErrorCode::GuardDenied)
    );

    let approved = s
        .run(
            &pipeline,
            "c5",
            "exit_plan_mode",
            json!({"plan": "1. edit 2. test"}),
        )
        .await;
    assert!(!approved.record().is_error(), "{:?}", approved.record());
    assert!(!switch.is_active());
    assert!(
        !s.run(&pipeline, "c6", "write", json!({}))
            .await
            .record()
            .is_error()
    );

    // The approver saw the plan; both decisions and both mode changes are in the log.
    let asked = approvals.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(*asked[0].arguments, json!({"plan": "1. edit 2. test"}));
    assert!(asked[0].reason.contains("leaving plan mode"));
    let modes: Vec<bool> = s
        .sink
        .events()
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::PlanMode(mode) => Some(mode.active),
            _ => None,
        })
        .collect();
    assert_eq!(modes, [true, false]);
    assert_eq!(
        s.kinds()
            .iter()
            .filter(|kind| *kind == "approval/decided")
            .count(),
        2
    );
    // A resumed session comes back out of plan mode.
    let resumed = PlanModeSwitch::new();
    resumed.set(true);
    PlanMode::from_events(resumed.clone(), &s.sink.events());
    assert!(!resumed.is_active());
}

/// Asks for every call.
struct AskAll;

impl PreExecuteHook for AskAll {
    fn name(&self) -> &str {
        "ask-all"
    }
    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> toolrail_session_log::BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async {
            Ok(PreExecuteDecision::Ask {
                reason: "asks".to_owned(),
                session_key: None,
            })
        })
    }
}

// One thread: when the test sees the first request, the batch has done all it could, so a
// second request sent alongside the first would already be in the inbox.
#[tokio::test(flavor = "current_thread")]
async fn two_calls_asking_in_one_batch_are_asked_in_model_order_one_at_a_time() {
    let write = |name: &str| -> Arc<dyn Tool> {
        Arc::new(Write(
            toolrail_tools_core::ToolSpec::builder(name, "writes", json!({"type": "object"}))
                .build(),
        ))
    };
    let s = setup(vec![write("first"), write("second")]);
    let (approvals, mut inbox) = ChannelApprovals::new(None);
    let pipeline = s
        .pipeline()
        .pre_hook(Arc::new(AskAll))
        .approval(Arc::new(approvals))
        .build();
    let scheduler = Scheduler::new(Arc::new(pipeline), SchedulerConfig::default());
    let calls = vec![
        CallRequest::new("c1", 0, "first", "{}"),
        CallRequest::new("c2", 1, "second", "{}"),
    ];
    let tools = s.tools.clone();
    let batch = tokio::spawn(async move {
        scheduler
            .run_batch(&tools, calls, CancellationToken::new(), None)
            .await
    });
    let first = inbox.next().await.unwrap();
    assert_eq!(first.request().identity.call_id.as_str(), "c1");
    let first_id = first.id();
    // The second call is not asked while the first waits.
    tokio::task::yield_now().await;
    assert!(inbox.try_next().is_none());
    first.answer(ApprovalAnswer::AllowedOnce).unwrap();
    let second = inbox.next().await.unwrap();
    assert_eq!(second.request().identity.call_id.as_str(), "c2");
    assert!(second.id() > first_id);
    second.answer(ApprovalAnswer::AllowedOnce).unwrap();
    let outcome = batch.await.unwrap().unwrap();
    assert!(
        outcome
            .results
            .iter()
            .all(|result| !result.record().is_error())
    );
}
