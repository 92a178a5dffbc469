//! Model providers (DESIGN §2): [`ProviderClient`] implements the agent loop's
//! `ModelClient` for the two wire formats nearly every model server speaks — OpenAI Chat
//! Completions (OpenAI, DeepSeek, vLLM, llama.cpp's server, Ollama) and Anthropic Messages —
//! with our own types for both, streamed over server-sent events, tool calls assembled from
//! their fragments. A stream cut inside a tool call gives a `length` message, which the loop
//! never executes.
//!
//! Depends on `agent-loop` (the `ModelClient` seam), `tools-core` and `session-log`.
//!
//! # Example
//!
//! The body a client sends for one request to an OpenAI-compatible server (a local
//! llama.cpp server here); making the client sends nothing, so no server is needed.
//!
//! ```
//! use serde_json::json;
//! use toolrail_agent_loop::{ModelRequest, ToolDefinition};
//! use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, Wire};
//! use toolrail_session_log::{ContentBlock, ConversationItem};
//!
//! let mut config = ProviderConfig::new(Wire::OpenAi, "http://127.0.0.1:8080/v1", "qwen3-8b");
//! config.api_key = ApiKey::None;
//! config.max_tokens = Some(1024);
//! assert_eq!(config.endpoint(), "http://127.0.0.1:8080/v1/chat/completions");
//! let client = ProviderClient::new(config)?;
//!
//! let request = ModelRequest {
//!     system: Some("Be brief.".to_owned()),
//!     messages: std::sync::Arc::new(vec![ConversationItem::User(vec![ContentBlock::text(
//!         "What time is it?",
//!     )])]),
//!     tools: std::sync::Arc::new([ToolDefinition {
//!         name: "clock".to_owned(),
//!         description: "The time now.".to_owned(),
//!         input_schema: json!({"type": "object"}),
//!     }]),
//! };
//! assert_eq!(client.body(&request), json!({
//!     "model": "qwen3-8b",
//!     "max_tokens": 1024,
//!     "messages": [
//!         {"role": "system", "content": "Be brief."},
//!         {"role": "user", "content": "What time is it?"},
//!     ],
//!     "tools": [{"type": "function", "function": {
//!         "name": "clock",
//!         "description": "The time now.",
//!         "parameters": {"type": "object"},
//!     }}],
//!     "stream": true,
//!     "stream_options": {"include_usage": true},
//! }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod anthropic;
mod client;
mod config;
mod deadline;
mod draft;
mod openai;
pub mod sse;

pub use anthropic::AnthropicStream;
pub use client::{ProviderClient, ProviderError};
pub use config::{
    ApiKey, DEFAULT_REQUEST_TIMEOUT, DEFAULT_STEP_TIMEOUT, ProviderConfig, RetryPolicy, Secret,
    ToolChoice, Wire,
};
pub use draft::StreamError;
pub use openai::{OpenAiStream, strict_schema};
