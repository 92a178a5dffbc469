//! An execute layer that runs each body inside an `execute_tool` span carrying the
//! OpenTelemetry GenAI attribute names, so any `tracing` subscriber (or an OpenTelemetry
//! bridge) sees one span per tool call with its name, call id and outcome.

use serde_json::Value;
use toolrail_session_log::BoxFuture;
use tracing::Instrument;

use crate::context::ToolContext;
use crate::layer::{ExecNext, ExecuteLayer};
use crate::tool::ToolResult;

/// Wraps every body in a `tracing` span named `execute_tool`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingLayer;

impl ExecuteLayer for TracingLayer {
    fn name(&self) -> &str {
        "tracing"
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        _args: &'a Value,
        next: ExecNext<'a>,
    ) -> BoxFuture<'a, ToolResult> {
        let identity = ctx.identity();
        let span = tracing::info_span!(
            "execute_tool",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %identity.name,
            gen_ai.tool.call.id = %identity.call_id,
            error.type = tracing::field::Empty,
        );
        let recorder = span.clone();
        Box::pin(
            async move {
                let result = next.run().await;
                if let Err(failure) = &result {
                    recorder.record("error.type", failure.code().as_str());
                }
                result
            }
            .instrument(span),
        )
    }
}
