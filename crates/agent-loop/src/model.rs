//! The model seam: what the loop sends a model and what it gets back. Provider clients
//! (OpenAI-compatible, Anthropic) and scripted test models implement [`ModelClient`].

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{AssistantMessage, BoxFuture, ConversationItem};

/// A tool as the model is told about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// One model request: the conversation so far and the tools of this request's snapshot, in
/// a stable order (by name), so identical sessions send identical requests.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    pub system: Option<String>,
    pub messages: Vec<ConversationItem>,
    pub tools: Vec<ToolDefinition>,
}

/// The model's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    pub message: AssistantMessage,
    pub usage: Option<Value>,
}

/// Why a model request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("the model request was cancelled")]
    Cancelled,
    #[error("the model failed: {0}")]
    Failed(String),
}

/// A model the loop can ask.
///
/// Implementors guarantee: `complete` answers `Cancelled` promptly when `cancel` fires, and
/// returns the whole assistant message (tool calls with their raw argument text exactly as
/// the model produced it).
pub trait ModelClient: Send + Sync {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;
}
