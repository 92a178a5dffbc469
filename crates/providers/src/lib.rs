//! Model providers (DESIGN §2): [`ProviderClient`] implements the agent loop's
//! `ModelClient` for the two wire formats nearly every model server speaks — OpenAI Chat
//! Completions (OpenAI, DeepSeek, vLLM, llama.cpp's server, Ollama) and Anthropic Messages —
//! with our own types for both, streamed over server-sent events, tool calls assembled from
//! their fragments. A stream cut inside a tool call gives a `length` message, which the loop
//! never executes.
//!
//! Depends on `agent-loop` (the `ModelClient` seam), `tools-core` and `session-log`.

mod anthropic;
mod client;
mod config;
mod draft;
mod openai;
pub mod sse;

pub use anthropic::AnthropicStream;
pub use client::{ProviderClient, ProviderError};
pub use config::{ApiKey, ProviderConfig, RetryPolicy, Secret, ToolChoice, Wire};
pub use draft::StreamError;
pub use openai::{OpenAiStream, strict_schema};
