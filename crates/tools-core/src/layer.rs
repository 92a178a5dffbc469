//! Stage 7: execute layers wrap the body (retry, metrics, tracing). The deadline and the
//! cancellation grace are enforced by the pipeline around all layers, so no layer can
//! remove them.

use std::sync::Arc;

use serde_json::Value;
use toolrail_session_log::BoxFuture;

use crate::arguments::CallArgs;
use crate::context::ToolContext;
use crate::tool::{Tool, ToolResult};

/// A wrapper around the body.
///
/// Implementors guarantee: they pass the call's cancellation (in `ctx`) through — a layer
/// that retries stops retrying once it is cancelled — and they report no effects of their
/// own invention.
pub trait ExecuteLayer: Send + Sync {
    /// A stable name identifying the layer (`tracing`).
    fn name(&self) -> &str;

    /// Wraps one run of the body: `next.run()` runs the remaining layers and the body, as
    /// many times as the layer needs (once, or again for a retry).
    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a Value,
        next: ExecNext<'a>,
    ) -> BoxFuture<'a, ToolResult>;
}

/// The rest of the layers and the body. `Copy`, so a retry layer can run it again.
#[derive(Clone, Copy)]
pub struct ExecNext<'a> {
    rest: &'a [Arc<dyn ExecuteLayer>],
    tool: &'a dyn Tool,
    ctx: &'a ToolContext,
    args: &'a CallArgs,
}

impl<'a> ExecNext<'a> {
    pub(crate) fn new(
        layers: &'a [Arc<dyn ExecuteLayer>],
        tool: &'a dyn Tool,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> Self {
        Self {
            rest: layers,
            tool,
            ctx,
            args,
        }
    }

    /// Runs the next layer, or the body when none is left.
    pub fn run(self) -> BoxFuture<'a, ToolResult> {
        match self.rest.split_first() {
            None => self.tool.execute(self.ctx, self.args),
            Some((layer, rest)) => {
                layer.call(self.ctx, self.args.value(), ExecNext { rest, ..self })
            }
        }
    }
}
