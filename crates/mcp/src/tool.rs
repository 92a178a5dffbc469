//! One MCP tool as a registry tool: its spec from the server's listing (annotations become
//! read-only, idempotent and the kind the presets judge by), its calls sent to the server
//! through the pipeline like any other tool's, and the server's answer made a result.

use std::sync::Arc;
use toolrail_tools_core::CallArgs;

use serde_json::Value;
use toolrail_session_log::{BoxFuture, ContentBlock};
use toolrail_tools_core::{
    Concurrency, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
};

use crate::config::Parallel;

/// Where an MCP tool's calls go: its server's connection (`server/`), as a seam so the
/// tool knows nothing of how servers are run.
pub(crate) trait Remote: Send + Sync {
    /// Sends `tools/call` for `tool` with `args`; the server's answer, or why there is none.
    /// `spec` says what a lost answer may hide (a read-only tool changed nothing).
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: &'a Value,
        ctx: &'a ToolContext,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>>;
}

/// What a server said of one of its tools.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The tool's name on the server; the session calls it `mcp__<server>__<tool>`.
    pub name: String,
    /// The server's description of it, as the model reads it (empty when it gave none).
    pub description: String,
    /// Its `inputSchema` (`{"type": "object"}` when the server gave none).
    pub input_schema: Value,
    /// Its `outputSchema`, when it declares one: every result that is not an error must
    /// then carry `structuredContent` that satisfies it (else `INVALID_TOOL_OUTPUT`).
    pub output_schema: Option<Value>,
    /// `readOnlyHint`; counts only for a server whose annotations are trusted.
    pub read_only: bool,
    /// `destructiveHint`, true when unset for a tool not marked read-only (MCP's default);
    /// a destructive tool is of a kind the presets ask about.
    pub destructive: bool,
    /// `idempotentHint`; counts only for a server whose annotations are trusted.
    pub idempotent: bool,
}

impl Listed {
    /// From the server's `tools/list` entry (as JSON).
    pub fn from_wire(tool: &Value) -> Option<Self> {
        let hint = |key: &str| {
            tool.pointer(&format!("/annotations/{key}"))
                .and_then(Value::as_bool)
        };
        let read_only = hint("readOnlyHint").unwrap_or(false);
        Some(Self {
            name: tool.get("name")?.as_str()?.to_owned(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            input_schema: tool
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"})),
            output_schema: tool
                .get("outputSchema")
                .filter(|schema| !schema.is_null())
                .cloned(),
            read_only,
            // The spec's default for a tool that is not read-only is "destructive".
            destructive: !read_only && hint("destructiveHint").unwrap_or(true),
            idempotent: hint("idempotentHint").unwrap_or(false),
        })
    }
}

/// An MCP tool in the registry.
pub struct McpTool {
    spec: ToolSpec,
    remote: String,
    parallel: bool,
    server: Arc<dyn Remote>,
}

impl McpTool {
    pub(crate) fn new(
        name: String,
        listed: &Listed,
        server: Arc<dyn Remote>,
        version: &str,
        parallel: Parallel,
        trusted: bool,
    ) -> Self {
        // Hints that relax policy count only for a trusted server; one that asks for more
        // care always counts.
        let read_only = trusted && listed.read_only;
        let idempotent = trusted && listed.idempotent;
        // Destructive tools are of a kind the presets ask about; read-only ones are reads.
        let kind = if read_only {
            ToolKind::Read
        } else if listed.destructive {
            ToolKind::Delete
        } else {
            ToolKind::Other
        };
        let mut spec = ToolSpec::builder(
            name,
            listed.description.clone(),
            listed.input_schema.clone(),
        )
        .kind(kind)
        .version(version);
        if let Some(schema) = &listed.output_schema {
            spec = spec.output_schema(schema.clone());
        }
        if read_only {
            spec = spec.read_only();
        }
        if idempotent {
            spec = spec.idempotent();
        }
        let parallel = match parallel {
            Parallel::Auto => read_only,
            Parallel::Never => false,
            Parallel::Always => true,
        };
        spec = spec.concurrency_note(if parallel {
            "shared: the server's calls may overlap"
        } else {
            "exclusive"
        });
        Self {
            spec: spec.build(),
            remote: listed.name.clone(),
            parallel,
            server,
        }
    }
}

impl toolrail_tools_core::Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        if self.parallel {
            Concurrency::shared()
        } else {
            Concurrency::Exclusive
        }
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let answer = self
                .server
                .call(&self.remote, args, ctx, &self.spec)
                .await?;
            output_of(&answer)
        })
    }
}

/// A `tools/call` result as a tool result: `structuredContent` the value (checked against the
/// tool's `outputSchema` by the pipeline), `content` what the model reads, `isError` a
/// failure with the server's text (the counterpart said it failed: `TOOL_FAILED`, and its
/// `structuredContent` is not checked).
pub(crate) fn output_of(answer: &Value) -> ToolResult {
    let content: Vec<ContentBlock> = answer
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| blocks.iter().map(block_of).collect())
        .unwrap_or_default();
    if answer.get("isError").and_then(Value::as_bool) == Some(true) {
        let text: Vec<String> = content
            .iter()
            .filter_map(|block| block.as_text().map(str::to_owned))
            .collect();
        let text = if text.is_empty() {
            "the server reported an error without a message".to_owned()
        } else {
            text.join("\n")
        };
        return Err(ToolFailure::new(text));
    }
    let value = answer
        .get("structuredContent")
        .filter(|value| !value.is_null())
        .cloned();
    Ok(ToolOutput {
        content,
        value,
        details: None,
        concludes_turn: false,
    })
}

fn block_of(block: &Value) -> ContentBlock {
    let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
    match block.get("type").and_then(Value::as_str) {
        Some("text") => ContentBlock::text(text("text")),
        Some("image") => ContentBlock::Image {
            media_type: text("mimeType").to_owned(),
            data: text("data").to_owned(),
        },
        Some("resource") => match block.pointer("/resource/text").and_then(Value::as_str) {
            Some(body) => ContentBlock::text(body),
            None => ContentBlock::Json {
                value: block.get("resource").cloned().unwrap_or(Value::Null),
            },
        },
        Some("resource_link") => {
            ContentBlock::text(format!("[resource {}: {}]", text("name"), text("uri")))
        }
        _ => ContentBlock::Json {
            value: block.clone(),
        },
    }
}
