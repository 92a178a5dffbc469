//! `ClientCall`: a tool call a client sends directly — an MCP client, an editor — rather
//! than a model. It runs as a turn of its own, logged like any other, through the same
//! pipeline: recorded, judged by the rules and guards, asked, confined, committed.

use serde_json::Value;
use toolrail_session_log::{
    CallId, ContentBlock, TraceRef,
    event::{AssistantBlock, AssistantMessage, StopReason},
};

/// One tool call from a client, with who sent it.
///
/// ```
/// use toolrail_runtime::ClientCall;
/// let call = ClientCall::new("inspector 1.0", "read", &serde_json::json!({"path": "README.md"}))
///     .with_id("mcp-7");
/// assert_eq!(call.tool(), "read");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ClientCall {
    client: String,
    call_id: String,
    tool: String,
    arguments_raw: String,
    caller: Option<TraceRef>,
}

impl ClientCall {
    /// A call of `tool` with `arguments`, sent by `client` (a name people recognise: the
    /// client's name and version). Its id is `client-call` until [`ClientCall::with_id`].
    pub fn new(client: impl Into<String>, tool: impl Into<String>, arguments: &Value) -> Self {
        Self {
            client: client.into(),
            call_id: "client-call".to_owned(),
            tool: tool.into(),
            arguments_raw: arguments.to_string(),
            caller: None,
        }
    }

    /// The client's span, from its request's W3C trace context (an MCP request's
    /// `_meta.traceparent`, read with [`TraceRef::from_traceparent`]): the turn is recorded
    /// with it, and a traced session's spans continue the client's trace under it. One
    /// with an all-zero id names no span and is ignored.
    #[must_use]
    pub fn with_caller(mut self, caller: Option<TraceRef>) -> Self {
        self.caller = caller.filter(TraceRef::is_valid);
        self
    }

    /// The client's span the call came under, if its request named one.
    pub fn caller(&self) -> Option<TraceRef> {
        self.caller
    }

    /// The id the call is logged under (a client's request id, say).
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = id.into();
        self
    }

    /// The tool called.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The turn's user message: who called what.
    pub(crate) fn user(&self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!(
            "{} called `{}`",
            self.client, self.tool
        ))]
    }

    /// The message that holds the call, as the log records it.
    pub(crate) fn message(&self) -> AssistantMessage {
        AssistantMessage {
            blocks: vec![AssistantBlock::ToolCall {
                call_id: CallId::from(self.call_id.as_str()),
                name: self.tool.clone(),
                arguments_raw: self.arguments_raw.clone(),
            }],
            stop_reason: StopReason::ToolCalls,
        }
    }
}
