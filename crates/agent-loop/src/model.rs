//! The model seam: what the loop sends a model and what it gets back, whole or as it
//! arrives. Provider clients (OpenAI-compatible, Anthropic) and scripted test models
//! implement [`ModelClient`].

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{
    BoxFuture, ConversationItem,
    event::{AssistantBlock, AssistantMessage},
};

/// A tool as the model is told about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDefinition {
    /// The name the model calls the tool by.
    pub name: String,
    /// What the model reads about the tool, from its spec.
    pub description: String,
    /// The JSON Schema the tool's arguments must fit.
    pub input_schema: Value,
}

/// One model request: the conversation so far and the tools of this request's snapshot, in
/// a stable order (by name), so identical sessions send identical requests.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// The system prompt, with what the tool presentation adds (code mode's SDK); `None`
    /// when there is none.
    pub system: Option<String>,
    /// The conversation so far, as the log's replay derives it: user turns, assistant
    /// messages, tool results, context messages. Shared with the loop, which adds to it
    /// without copying once the request is gone: a client that keeps the request keeps
    /// this version of it.
    pub messages: Arc<Vec<ConversationItem>>,
    /// The tools offered, by name; shared between the requests of one tool set.
    pub tools: Arc<[ToolDefinition]>,
}

/// The model's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    /// The whole assistant message; its stop reason says whether the output-length limit
    /// cut it off.
    pub message: AssistantMessage,
    /// The token usage as the server reported it, logged in `step/end` as is; `None` when
    /// it sent none.
    pub usage: Option<Value>,
    /// The server's id of the answer, logged in `step/end`; `None` when it sent none (a
    /// client never makes one up).
    pub response_id: Option<String>,
    /// The model that answered, as the server named it, logged in `step/end`; `None` when
    /// it did not say.
    pub response_model: Option<String>,
}

/// A piece of an answer as it arrives. Deltas are for showing; the assembled
/// [`ModelResponse`] is what the loop logs and acts on, after checking it for truncation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelDelta {
    /// More of the answer's text.
    Text(String),
    /// More of the model's reasoning, from providers that send it.
    Reasoning(String),
    /// A tool call began: its place among the message's calls, its id and name as far as
    /// they are known.
    ToolCallStarted {
        /// The call's place among the message's tool calls, from 0.
        index: u32,
        /// The call's id as the model sent it.
        call_id: String,
        /// The tool the model asked for.
        name: String,
    },
    /// More of a tool call's raw argument text.
    ToolCallArguments {
        /// The call it belongs to: the `index` of its [`ModelDelta::ToolCallStarted`].
        index: u32,
        /// The next piece of the argument text, to append as is (not JSON on its own).
        fragment: String,
    },
    /// The request failed after some deltas arrived and is tried again: what arrived so far
    /// is void, and the next deltas start the answer anew.
    Restarted {
        /// The try that starts now, counting from 1 (so at least 2).
        attempt: u32,
        /// What broke the try before it.
        why: String,
    },
}

/// Where deltas go while an answer streams. Called on the task that reads the answer, in
/// arrival order; it must not block.
pub trait DeltaSink: Send + Sync {
    /// Takes the next delta.
    fn delta(&self, delta: ModelDelta);
}

impl<F: Fn(ModelDelta) + Send + Sync> DeltaSink for F {
    fn delta(&self, delta: ModelDelta) {
        self(delta);
    }
}

/// A sink that drops every delta.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoDeltas;

impl DeltaSink for NoDeltas {
    fn delta(&self, _delta: ModelDelta) {}
}

/// Why a model request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The request's cancellation token fired before the answer was whole.
    #[error("the model request was cancelled")]
    Cancelled,
    /// The server, the connection or the client failed; the failure says how.
    #[error("the model failed: {0}")]
    Failed(ModelFailure),
}

impl ModelError {
    /// A failure with only a message (no status, not retryable).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(ModelFailure::new(message))
    }

    /// The failure's facts, unless the request was cancelled.
    pub fn failure(&self) -> Option<&ModelFailure> {
        match self {
            Self::Cancelled => None,
            Self::Failed(failure) => Some(failure),
        }
    }
}

/// What is known about a failed model request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFailure {
    /// The HTTP status the server answered with, when it answered.
    pub status: Option<u16>,
    /// Whether trying the same request later may succeed (rate limits, server errors,
    /// broken connections) — after the client's own retries were spent.
    pub retryable: bool,
    /// The server's id for the request, for its operators.
    pub request_id: Option<String>,
    /// What failed, in words: the endpoint, the server's message, what to do.
    pub message: String,
}

impl ModelFailure {
    /// A failure with a message only.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            status: None,
            retryable: false,
            request_id: None,
            message: message.into(),
        }
    }

    /// The failure with the HTTP status the server answered with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// The failure marked as worth trying again later.
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// The failure with the server's id for the request.
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }
}

impl std::fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A model the loop can ask.
///
/// Implementors guarantee: `complete` answers `Cancelled` promptly when `cancel` fires, and
/// returns the whole assistant message (tool calls with their raw argument text exactly as
/// the model produced it). A client that can stream overrides [`ModelClient::stream`]; the
/// message it returns at the end is the one the deltas built, and the loop checks it for
/// truncation before anything runs.
pub trait ModelClient: Send + Sync {
    /// Asks for the whole answer.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;

    /// Asks for the answer, handing pieces to `deltas` as they arrive. The default asks for
    /// the whole answer and hands it over as one delta per block.
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
        deltas: &'a dyn DeltaSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let response = self.complete(request, cancel).await?;
            deltas_of(&response.message, deltas);
            Ok(response)
        })
    }
}

/// Hands a whole message to `deltas` as one delta per block (a model that cannot stream).
pub fn deltas_of(message: &AssistantMessage, deltas: &dyn DeltaSink) {
    let mut index = 0u32;
    for block in &message.blocks {
        match block {
            AssistantBlock::Text { text } => deltas.delta(ModelDelta::Text(text.clone())),
            AssistantBlock::Thinking { text } => {
                deltas.delta(ModelDelta::Reasoning(text.clone()));
            }
            AssistantBlock::ToolCall {
                call_id,
                name,
                arguments_raw,
            } => {
                deltas.delta(ModelDelta::ToolCallStarted {
                    index,
                    call_id: call_id.to_string(),
                    name: name.clone(),
                });
                if !arguments_raw.is_empty() {
                    deltas.delta(ModelDelta::ToolCallArguments {
                        index,
                        fragment: arguments_raw.clone(),
                    });
                }
                index += 1;
            }
        }
    }
}
