//! One tool, three policy stages with different powers: a hook that rewrites arguments (and
//! the log shows what really ran), an approval service that says yes once, and a guard that
//! can only refuse.
//!
//! Run: `cargo run -p toolrail-examples --example policy_stages`

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolrail_session_log::{BoxFuture, MemorySink};
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CallRequest, CallView, CancellationToken,
    Guard, GuardVerdict, HookError, Pipeline, PreExecuteDecision, PreExecuteHook, PreNext,
    RegistryBuilder, ToolContext, ToolOutput, ToolResult, ToolSpec, Typed, TypedTool,
    pipeline::BatchControl,
};

/// Arguments of `deploy`.
#[derive(Deserialize, JsonSchema)]
struct DeployArgs {
    /// Target environment.
    env: String,
    /// Whether to only show what would happen.
    dry_run: Option<bool>,
}

struct Deploy;

impl TypedTool for Deploy {
    type Args = DeployArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<DeployArgs>("deploy", "Deploys the service.").build()
    }

    async fn run(&self, _ctx: &ToolContext, args: DeployArgs) -> ToolResult {
        let mode = if args.dry_run.unwrap_or(false) {
            "dry run"
        } else {
            "for real"
        };
        Ok(ToolOutput::text(format!(
            "deployed to {} ({mode})",
            args.env
        )))
    }
}

/// Turns production deploys into dry runs (no approval needed for those) and asks before
/// any other deploy.
struct DeployPolicy;

impl PreExecuteHook for DeployPolicy {
    fn name(&self) -> &str {
        "deploy-policy"
    }

    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            if call.arguments.get("env").and_then(Value::as_str) == Some("production")
                && call.arguments.get("dry_run") != Some(&json!(true))
            {
                let mut safer = call.arguments.clone();
                safer["dry_run"] = json!(true);
                return Ok(PreExecuteDecision::Rewrite {
                    arguments: safer,
                    reason: "production deploys are dry runs from agents".into(),
                });
            }
            Ok(PreExecuteDecision::Ask {
                reason: "deploys change shared systems".into(),
                session_key: Some("deploy:*".into()),
            })
        })
    }
}

/// Approves every request once and says so.
struct Operator;

impl ApprovalService for Operator {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            println!(
                "  operator approves {} {}",
                request.identity.name, request.arguments
            );
            ApprovalAnswer::AllowedOnce
        })
    }
}

/// Nobody deploys to the moon.
struct NoMoon;

impl Guard for NoMoon {
    fn name(&self) -> &str {
        "no-moon"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        if call.arguments.get("env").and_then(Value::as_str) == Some("moon") {
            GuardVerdict::Deny {
                reason: "there is no datacenter on the moon".into(),
            }
        } else {
            GuardVerdict::Abstain
        }
    }
}

fn main() -> anyhow::Result<()> {
    let (registry, _) = RegistryBuilder::new().builtin(Typed::new(Deploy)).build()?;
    let log = Arc::new(MemorySink::new());
    let pipeline = Pipeline::builder(log.clone())
        .pre_hook(Arc::new(DeployPolicy))
        .approval(Arc::new(Operator))
        .guard(Arc::new(NoMoon))
        .build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let tools = registry.snapshot();
    let control = BatchControl::default();
    for (id, args) in [
        ("c1", r#"{"env":"staging"}"#),
        ("c2", r#"{"env":"production"}"#),
        ("c3", r#"{"env":"moon"}"#),
    ] {
        println!("{id} deploy {args}");
        let committed = runtime.block_on(pipeline.execute_one(
            &tools,
            CallRequest::new(id, 0, "deploy", args),
            &control,
        ))?;
        let text: Vec<_> = committed
            .record()
            .content
            .iter()
            .filter_map(|block| block.as_text())
            .collect();
        println!("  -> {}", text.join(" "));
    }
    println!("\nsession log:");
    for event in log.events() {
        println!("  {}", serde_json::to_string(&event)?);
    }
    Ok(())
}
