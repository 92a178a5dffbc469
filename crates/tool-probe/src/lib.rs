//! The `probe` tool: one tool whose behaviour each call chooses through its arguments
//! (sleep, fail, panic, claim resources, report progress or effects, ignore cancellation,
//! write a marker file), so a test of a layer that runs tools can build any batch and prove
//! what ran — without depending on the layers above it.
//!
//! It depends on `tools-core` and `session-log` only: the scheduler's, code mode's and MCP's
//! tests use it, and so does the test kit's scenarios.
//!
//! # Example
//!
//! A call that asks the probe to fail, through the pipeline: the log holds its start and
//! its committed failure.
//!
//! ```
//! use std::sync::Arc;
//!
//! use toolrail_session_log::MemorySink;
//! use toolrail_tool_probe::{Probe, trail};
//! use toolrail_tools_core::pipeline::BatchControl;
//! use toolrail_tools_core::{CallRequest, Pipeline, RegistryBuilder};
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let (registry, _) = RegistryBuilder::new().builtin(Probe::new(None)).build()?;
//! let log = Arc::new(MemorySink::new());
//! let pipeline = Pipeline::builder(log.clone()).build();
//! let call = CallRequest::new("c1", 0, "probe", r#"{"fail": "as asked"}"#);
//! let result = pipeline
//!     .execute_one(&registry.snapshot(), call, &BatchControl::default())
//!     .await?;
//! assert!(result.record().is_error());
//! assert_eq!(trail(&log.events()).last().map(|(kind, _)| kind.as_str()), Some("tool/result"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod probe;

pub use probe::{Probe, ProbeArgs, ProbeClaim};

use toolrail_session_log::BoxFuture;
use toolrail_tools_core::CallArgs;
use toolrail_tools_core::{Concurrency, Tool, ToolContext, ToolOutput, ToolResult, ToolSpec};

/// A tool that does nothing and may overlap with anything: benches measure the runtime's
/// own cost per call with it.
///
/// ```
/// use toolrail_tool_probe::NoopTool;
/// use toolrail_tools_core::{Concurrency, Tool, ToolSpec};
///
/// let tool = NoopTool(ToolSpec::builder("noop", "does nothing", serde_json::json!({"type": "object"})).build());
/// let args = toolrail_tools_core::CallArgs::from(serde_json::json!({}));
/// assert_eq!(tool.concurrency(&args), Concurrency::shared());
/// ```
pub struct NoopTool(pub ToolSpec);

impl Tool for NoopTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        Concurrency::shared()
    }

    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async { Ok(ToolOutput::text("ok")) })
    }
}

/// `(kind, call id)` of every event, in order: the shape most tests compare a log by.
pub fn trail(events: &[toolrail_session_log::Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|event| {
            (
                event.data.kind().to_owned(),
                event
                    .call_id
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            )
        })
        .collect()
}
