//! Code mode (DESIGN §7): in code mode the model sees one tool, `run_code`, and an SDK of
//! the tools it may use; it writes a small program that calls them, and only what the
//! program prints and returns goes back. Every binding call re-enters the full pipeline as a
//! call of its own (`<parent>:code:<n>`), under the scheduler's rules, and is logged with its
//! value so a replay rebuilds the run.
//!
//! Built: presentation modes (`native`, `code`, `both`, given to the agent loop per agent; in
//! code mode a direct call is refused with a pointer to `run_code`), the SDK for
//! JavaScript and Python, the JavaScript runtime (QuickJS) with memory, stack and wall-time
//! limits, the Python runtime (`python3 -I` in the shell tool's sandbox, JSON lines, rlimits),
//! per-binding reply caps, cancellation that settles every binding call.
//!
//! Depends on `agent-loop` (a mode is the loop's presentation of each request's tools),
//! `shell-tool` (the sandbox and kill path Python runs under), `tools-core` and
//! `session-log`.
//!
//! # Example
//!
//! One tool, the SDK a program is written against, and a JavaScript program (the default
//! `javascript` feature) that calls the tool twice through `run_code`: each binding call is
//! a call of its own in the pipeline.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use toolrail_code_mode::{CodeMode, Limits, RUN_CODE, javascript};
//! use toolrail_session_log::MemorySink;
//! use toolrail_tools_core::{
//!     CallRequest, Pipeline, RegistryBuilder, ToolContext, ToolOutput, ToolResult, ToolSpec,
//!     Typed, TypedTool, pipeline::BatchControl,
//! };
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct AddArgs {
//!     numbers: Vec<f64>,
//! }
//!
//! struct Add;
//!
//! impl TypedTool for Add {
//!     type Args = AddArgs;
//!
//!     fn spec(&self) -> ToolSpec {
//!         ToolSpec::for_args::<AddArgs>("add", "Adds numbers.")
//!             .read_only()
//!             .parallel_safe()
//!             .build()
//!     }
//!
//!     async fn run(&self, _ctx: &ToolContext, args: AddArgs) -> ToolResult {
//!         Ok(ToolOutput::value(json!(args.numbers.iter().sum::<f64>())))
//!     }
//! }
//!
//! let code_mode = CodeMode::new(Limits::default());
//! let (registry, _warnings) = RegistryBuilder::new()
//!     .builtin(Typed::new(Add))
//!     .reserve(RUN_CODE)
//!     .runtime_tool(Arc::new(Typed::new(code_mode.tool())))
//!     .build()?;
//! let log = Arc::new(MemorySink::new());
//! let pipeline = Arc::new(Pipeline::builder(log.clone()).build());
//! code_mode.attach(pipeline.clone(), registry.clone(), log.clone());
//!
//! // In code mode the model is offered `run_code` alone, and told of the others as functions.
//! let tools = registry.snapshot().for_code_mode(RUN_CODE);
//! let sdk = javascript(&tools);
//! assert!(sdk.contains(r#"async function add(args) { return __call("add", args); }"#));
//! assert!(!sdk.contains("run_code"), "a program cannot start another program");
//!
//! let program = "const a = await add({numbers: [1, 2]}); return await add({numbers: [a, 3]});";
//! let arguments = json!({"code": program, "description": "add twice"}).to_string();
//! let request = CallRequest::new("c1", 0, RUN_CODE, arguments);
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let result = pipeline.execute_one(&tools, request, &BatchControl::default()).await?;
//! assert_eq!(result.record().text(), "[returned] 6");
//! // Each binding call committed its own result, before the program's.
//! let committed: Vec<String> = log
//!     .events()
//!     .into_iter()
//!     .filter(|event| event.data.kind() == "tool/result")
//!     .filter_map(|event| event.call_id.map(|id| id.to_string()))
//!     .collect();
//! assert_eq!(committed, ["c1:code:1", "c1:code:2", "c1"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bindings;
mod gate;
#[cfg(feature = "javascript")]
mod js;
mod language;
mod mode;
mod python;
mod run;
mod sdk;
mod tool;

pub use bindings::SubCall;
pub use language::Language;
pub use mode::PresentationMode;
pub use python::PythonRuntime;
pub use run::{FailureKind, Limits};
pub use sdk::{RUN_CODE, identifier, javascript, python};
pub use tool::{CodeMode, RunCodeArgs, RunCodeTool};
