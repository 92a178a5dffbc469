//! Anthropic Messages: the request body, and a streamed answer assembled from its events.
//! Tool calls are `tool_use` blocks whose input arrives as `input_json_delta` pieces; results
//! go back as `tool_result` blocks (with `is_error`) in the next user message.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use toolrail_agent_loop::{ModelDelta, ModelRequest, ModelResponse};
use toolrail_session_log::{
    ContentBlock, ConversationItem,
    event::{AssistantBlock, StopReason},
};

use crate::config::{ProviderConfig, ToolChoice};
use crate::draft::{Draft, StreamError};
use crate::sse::SseEvent;

/// The API version every request names.
pub(crate) const VERSION: &str = "2023-06-01";

/// The length limit of an answer when the configuration sets none: the API requires one.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The body of `POST /v1/messages`, streamed.
pub(crate) fn request_body(request: &ModelRequest, options: &ProviderConfig) -> Value {
    let model = &options.model;
    let max_tokens = options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    // Messages alternate user and assistant: tool results and context messages that follow
    // an assistant message share one user message.
    let mut messages: Vec<Value> = Vec::new();
    let mut user: Vec<Value> = Vec::new();
    let flush = |user: &mut Vec<Value>, messages: &mut Vec<Value>| {
        if !user.is_empty() {
            messages.push(json!({"role": "user", "content": std::mem::take(user)}));
        }
    };
    for item in request.messages.iter() {
        match item {
            ConversationItem::User(blocks)
            | ConversationItem::Context {
                content: blocks, ..
            } => {
                user.extend(blocks.iter().filter_map(content_block));
            }
            ConversationItem::ToolResult { call_id, record } => {
                let mut content: Vec<Value> =
                    record.content.iter().filter_map(content_block).collect();
                if content.is_empty() {
                    // Empty text blocks are refused; a result with nothing says so.
                    content.push(json!({"type": "text", "text": "(no output)"}));
                }
                let mut result = json!({
                    "type": "tool_result", "tool_use_id": call_id.as_str(), "content": content,
                });
                if record.is_error() {
                    result["is_error"] = Value::Bool(true);
                }
                user.push(result);
            }
            ConversationItem::Assistant(message) => {
                // The calls under their distinct ids, the ones their results answer to.
                let mut calls = message.tool_calls().into_iter();
                let content: Vec<Value> = message
                    .blocks
                    .iter()
                    .filter_map(|block| match block {
                        AssistantBlock::Text { text } if !text.is_empty() => {
                            Some(json!({"type": "text", "text": text}))
                        }
                        // Thinking goes back only with the signature it came with, which is
                        // not kept: it is left out.
                        AssistantBlock::Text { .. } | AssistantBlock::Thinking { .. } => None,
                        AssistantBlock::ToolCall { .. } => calls.next().map(|call| {
                            json!({
                                "type": "tool_use", "id": call.call_id.as_str(), "name": call.name,
                                "input": input_of(call.arguments_raw),
                            })
                        }),
                    })
                    .collect();
                // An empty answer is left out; what follows it joins the user message before.
                if !content.is_empty() {
                    flush(&mut user, &mut messages);
                    messages.push(json!({"role": "assistant", "content": content}));
                }
            }
        }
    }
    flush(&mut user, &mut messages);
    let mut body =
        json!({"model": model, "max_tokens": max_tokens, "messages": messages, "stream": true});
    if let Some(system) = &request.system {
        body["system"] = Value::String(system.clone());
    }
    if !request.tools.is_empty() {
        body["tools"] = Value::Array(
            request
                .tools
                .iter()
                .map(|tool| {
                    json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
                })
                .collect(),
        );
        let choice = match &options.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!({"type": "none"})),
            ToolChoice::Required => Some(json!({"type": "any"})),
            ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
        };
        if let Some(choice) = choice {
            body["tool_choice"] = choice;
        }
    }
    options.finish_body(&mut body);
    body
}

/// A call's input as the API wants it, an object: arguments that were not one (the call was
/// refused for it) are sent as an empty object; the result says what was wrong.
fn input_of(arguments_raw: &str) -> Value {
    match serde_json::from_str::<Value>(arguments_raw) {
        Ok(Value::Object(input)) => Value::Object(input),
        Ok(_) | Err(_) => json!({}),
    }
}

/// A block as the API takes it; an empty text block (which it refuses) is left out.
fn content_block(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } if text.is_empty() => return None,
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::Json { value } => json!({"type": "text", "text": value.to_string()}),
        ContentBlock::Image { media_type, data } => json!({
            "type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}
        }),
    })
}

/// What the stream's block at an index is.
#[derive(Debug)]
enum Open {
    Text,
    Thinking,
    ToolUse(usize),
    Other,
}

/// A streamed answer, event by event.
#[derive(Debug, Default)]
pub struct AnthropicStream {
    draft: Draft,
    blocks: BTreeMap<u64, Open>,
    usage: serde_json::Map<String, Value>,
    stopped: bool,
}

impl AnthropicStream {
    /// An answer of which nothing has arrived yet; give it each event, then
    /// [`AnthropicStream::finish`] it.
    pub fn new() -> Self {
        Self::default()
    }

    /// The pieces of the answer that arrived since the last call (text, reasoning, tool
    /// calls begun and their argument fragments), for showing as they come.
    pub fn take_deltas(&mut self) -> Vec<ModelDelta> {
        self.draft.take_deltas()
    }

    /// Takes one event of the stream.
    pub fn event(&mut self, event: &SseEvent) -> Result<(), StreamError> {
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|error| StreamError::Malformed(format!("an event is not JSON ({error})")))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                self.draft
                    .served(data.pointer("/message/id"), data.pointer("/message/model"));
                self.add_usage(data.pointer("/message/usage"));
            }
            "content_block_start" => {
                let index = index_of(&data)?;
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let open = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        self.draft.text(
                            block
                                .get("text")
                                .and_then(Value::as_str)
                                .unwrap_or_default(),
                        );
                        Open::Text
                    }
                    Some("thinking") => {
                        self.draft.thinking(
                            block
                                .get("thinking")
                                .and_then(Value::as_str)
                                .unwrap_or_default(),
                        );
                        Open::Thinking
                    }
                    Some("tool_use" | "server_tool_use") => {
                        let text =
                            |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
                        let slot = self.draft.start_call(text("id"), text("name"));
                        Open::ToolUse(slot)
                    }
                    _ => Open::Other,
                };
                self.blocks.insert(index, open);
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
                match (
                    self.blocks.get(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(Open::Text), Some("text_delta")) => self.draft.text(text("text")),
                    (Some(Open::Thinking), Some("thinking_delta")) => {
                        self.draft.thinking(text("thinking"));
                    }
                    (Some(Open::ToolUse(slot)), Some("input_json_delta")) => {
                        self.draft.grow_call(*slot, "", "", text("partial_json"));
                    }
                    (None, _) => {
                        return Err(StreamError::Malformed(format!(
                            "a delta for block {index}, which was never started"
                        )));
                    }
                    // Signatures, citations and deltas of blocks kept out of the message.
                    (Some(_), _) => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(&data)?;
                if let Some(Open::ToolUse(slot)) = self.blocks.get(&index) {
                    // A call with no input deltas took no arguments.
                    self.draft.default_arguments(*slot, "{}");
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.draft.stop = Some(stop_reason(reason));
                }
                self.add_usage(data.get("usage"));
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map_or_else(|| data.to_string(), str::to_owned);
                let kind = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let text = format!("{kind}: {message}");
                return Err(if crate::draft::passes(kind) {
                    StreamError::Transient(text)
                } else {
                    StreamError::Server(text)
                });
            }
            // `ping`, and event types added after this was written.
            _ => {}
        }
        Ok(())
    }

    fn add_usage(&mut self, usage: Option<&Value>) {
        if let Some(Value::Object(usage)) = usage {
            for (key, value) in usage {
                self.usage.insert(key.clone(), value.clone());
            }
        }
    }

    /// The message, once the stream has ended. A stream that ended before `message_stop`
    /// did not finish its message, whatever stop reason it had announced.
    pub fn finish(mut self) -> Result<ModelResponse, StreamError> {
        if !self.stopped {
            self.draft.stop = None;
        }
        if !self.usage.is_empty() {
            self.draft.usage = Some(Value::Object(self.usage));
        }
        self.draft.finish()
    }
}

/// A whole (not streamed) message, as some servers answer even a streamed request.
pub(crate) fn whole_response(body: &Value) -> Result<ModelResponse, StreamError> {
    if body.get("type").and_then(Value::as_str) == Some("error") {
        let message = body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .map_or_else(|| body.to_string(), str::to_owned);
        return Err(StreamError::Server(message));
    }
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| StreamError::Malformed("a message without content".to_owned()))?;
    // The message replayed as the events that would have streamed it.
    let mut stream = AnthropicStream::new();
    let mut feed = |data: Value| {
        stream.event(&SseEvent {
            event: None,
            data: data.to_string(),
        })
    };
    feed(json!({"type": "message_start", "message": {
        "id": body.get("id"), "model": body.get("model"), "usage": body.get("usage"),
    }}))?;
    for (index, block) in blocks.iter().enumerate() {
        let mut start = block.clone();
        let input = match block.get("type").and_then(Value::as_str) {
            Some("tool_use" | "server_tool_use") => {
                start["input"] = json!({});
                block.get("input").map(Value::to_string)
            }
            _ => None,
        };
        feed(json!({"type": "content_block_start", "index": index, "content_block": start}))?;
        if let Some(input) = input {
            feed(json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": input}}))?;
        }
        feed(json!({"type": "content_block_stop", "index": index}))?;
    }
    feed(json!({"type": "message_delta", "delta": {"stop_reason": body.get("stop_reason")}}))?;
    feed(json!({"type": "message_stop"}))?;
    stream.finish()
}

fn index_of(data: &Value) -> Result<u64, StreamError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| StreamError::Malformed(format!("a block event without an index: {data}")))
}

/// `stop_reason` as the loop's stop reason.
fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}
