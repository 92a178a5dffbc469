//! Tool definitions, the registry, the argument and result contracts, and the single-call
//! pipeline of toolrail (DESIGN §3–§4).
//!
//! Depends only on `toolrail-session-log`. A call goes through ten stages — record, parse,
//! pre-execute hooks, approval, guards, start, execute layers, post-execute hooks,
//! normalize/finalize, commit — each with its own powers; [`stages`] lists them as data.
//! The scheduler in `agent-loop` drives the staged API ([`Pipeline::prepare`],
//! [`Pipeline::dispatch`], [`Pipeline::finish`]); [`Pipeline::execute_one`] runs one call.
//!
//! # Example
//!
//! A typed tool, registered and called through the pipeline, which checks the arguments
//! against the schema derived from their type and logs each stage to a sink.
//!
//! ```
//! use std::sync::Arc;
//!
//! use toolrail_tools_core::log::{ErrorCode, MemorySink};
//! use toolrail_tools_core::{
//!     CallRequest, Pipeline, RegistryBuilder, ToolContext, ToolOutput, ToolResult, ToolSpec,
//!     Typed, TypedTool, pipeline::BatchControl,
//! };
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! struct Greet;
//!
//! impl TypedTool for Greet {
//!     type Args = GreetArgs;
//!
//!     fn spec(&self) -> ToolSpec {
//!         ToolSpec::for_args::<GreetArgs>("greet", "Greets someone by name.")
//!             .read_only()
//!             .build()
//!     }
//!
//!     async fn run(&self, _ctx: &ToolContext, args: GreetArgs) -> ToolResult {
//!         Ok(ToolOutput::text(format!("hello, {}", args.name)))
//!     }
//! }
//!
//! let (registry, _warnings) = RegistryBuilder::new().builtin(Typed::new(Greet)).build()?;
//! let log = Arc::new(MemorySink::new());
//! let pipeline = Pipeline::builder(log.clone()).build();
//! let (tools, control) = (registry.snapshot(), BatchControl::default());
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let ok = CallRequest::new("c1", 0, "greet", r#"{"name":"Ada"}"#);
//! assert_eq!(pipeline.execute_one(&tools, ok, &control).await?.record().text(), "hello, Ada");
//!
//! // Arguments that break the schema never reach the body.
//! let bad = CallRequest::new("c2", 1, "greet", r#"{"name":7}"#);
//! let refused = pipeline.execute_one(&tools, bad, &control).await?;
//! assert_eq!(refused.record().error_code(), Some(&ErrorCode::InvalidArgs));
//! assert_eq!(log.kinds(), ["tool/call", "tool/start", "tool/result", "tool/call", "tool/result"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod approval;
pub mod arguments;
pub mod command_line;
pub mod context;
mod guard;
mod layer;
mod observer;
pub mod pipeline;
mod plan_mode;
mod post_hook;
mod pre_hook;
pub mod protected;
pub mod registry;
pub mod spec;
pub mod stages;
mod tool;
mod tracing_layer;
mod unwind;
mod view;
pub mod workspace;

pub use approval::{ApprovalAnswer, ApprovalRequest, ApprovalService};
pub use arguments::CallArgs;
pub use context::ToolContext;
pub use guard::{Guard, GuardVerdict};
pub use layer::{ExecNext, ExecuteLayer};
pub use observer::{ObserverError, ResultObserver};
pub use pipeline::{
    CallRequest, CommittedResult, Pipeline, PipelineBuilder, PipelineConfig, PipelineError,
};
pub use plan_mode::PlanModeSwitch;
pub use post_hook::{PostExecuteAction, PostExecuteDecision, PostExecuteHook, ResultView};
pub use pre_hook::{PreExecuteDecision, PreExecuteHook, PreNext, PreNextFuture};
pub use protected::ProtectedPaths;
pub use registry::{Registry, RegistryBuilder, ToolSet};
pub use spec::{ClaimMode, Concurrency, Exposure, ResourceClaim, ResourceKey, ToolKind, ToolSpec};
pub use tool::{
    FinalizeView, Tool, ToolCode, ToolFailure, ToolOutput, ToolResult, Typed, TypedTool,
};
pub use tracing_layer::TracingLayer;
pub use view::{CallView, HookError, Subject};
pub use workspace::WorkspaceRoots;

/// The cancellation token of batches and calls (approval services and tools watch it).
pub use tokio_util::sync::CancellationToken;

/// Re-exported so tools and hooks need not depend on the log crate for the common types.
pub use toolrail_session_log as log;
