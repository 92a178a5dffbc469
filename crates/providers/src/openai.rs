//! OpenAI Chat Completions, as nearly every model server speaks it (OpenAI, DeepSeek, vLLM,
//! llama.cpp's server, Ollama): the request body, and a streamed answer assembled from its
//! chunks. Tool calls arrive as fragments keyed by `index` — the id and name in the first,
//! the arguments as pieces of a string.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use toolrail_agent_loop::{ModelDelta, ModelRequest, ModelResponse};
use toolrail_session_log::{ContentBlock, ConversationItem, event::StopReason};

use crate::config::{ProviderConfig, ToolChoice};
use crate::draft::{Draft, StreamError};
use crate::sse::SseEvent;

/// The body of `POST /chat/completions`, streamed.
pub(crate) fn request_body(request: &ModelRequest, options: &ProviderConfig) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for item in request.messages.iter() {
        messages.push(match item {
            ConversationItem::User(blocks) => json!({"role": "user", "content": user_content(blocks)}),
            ConversationItem::Assistant(message) => {
                let text = message.text();
                let calls: Vec<Value> = message
                    .tool_calls()
                    .into_iter()
                    .map(|call| {
                        json!({"id": call.call_id.as_str(), "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments_raw}})
                    })
                    .collect();
                // `null` content is allowed only beside tool calls: an empty answer is "".
                let content = if text.is_empty() && !calls.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                };
                let mut assistant = json!({"role": "assistant", "content": content});
                if !calls.is_empty() {
                    assistant["tool_calls"] = Value::Array(calls);
                }
                assistant
            }
            ConversationItem::ToolResult { call_id, record } => json!({
                "role": "tool", "tool_call_id": call_id.as_str(), "content": text_of(&record.content),
            }),
            ConversationItem::Context { content, .. } => {
                json!({"role": "user", "content": user_content(content)})
            }
        });
    }
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            // A schema with a free-form object cannot be strict: that function is sent as
            // it is, and the server answers the rest strictly.
            let strict = options
                .strict
                .then(|| strict_schema(&tool.input_schema))
                .filter(closed);
            let parameters = strict.clone().unwrap_or_else(|| tool.input_schema.clone());
            let mut function = json!({"name": tool.name, "description": tool.description, "parameters": parameters});
            if strict.is_some() {
                function["strict"] = Value::Bool(true);
            }
            json!({"type": "function", "function": function})
        })
        .collect();
    let mut body = json!({"model": options.model, "messages": messages, "stream": true});
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
        // A choice without tools is refused by the servers; with none offered it means
        // nothing anyway.
        let choice = match &options.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!("none")),
            ToolChoice::Required => Some(json!("required")),
            ToolChoice::Tool(name) => Some(json!({"type": "function", "function": {"name": name}})),
        };
        if let Some(choice) = choice {
            body["tool_choice"] = choice;
        }
    }
    if let Some(max) = options.max_tokens {
        body["max_tokens"] = json!(max);
    }
    if options.stream_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    options.finish_body(&mut body);
    body
}

/// A user message's content: plain text, or parts when it holds an image.
fn user_content(blocks: &[ContentBlock]) -> Value {
    if blocks
        .iter()
        .all(|block| !matches!(block, ContentBlock::Image { .. }))
    {
        return Value::String(text_of(blocks));
    }
    Value::Array(
        blocks
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => json!({"type": "text", "text": text}),
                ContentBlock::Json { value } => json!({"type": "text", "text": value.to_string()}),
                ContentBlock::Image { media_type, data } => json!({
                    "type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}
                }),
            })
            .collect(),
    )
}

/// Blocks as one text: JSON as JSON text, an image (which a tool message cannot carry) as a
/// note that there was one.
pub(crate) fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::Json { value } => value.to_string(),
            ContentBlock::Image { media_type, .. } => format!("[an image ({media_type})]"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A schema as strict mode wants it: every property required and no others allowed, the
/// optional ones made nullable, all the way down.
pub fn strict_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    tighten(&mut schema);
    schema
}

fn tighten(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if object.get("properties").is_some_and(Value::is_object) {
        let required: Vec<String> = match object.get("required") {
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        let Some(Value::Object(properties)) = object.get_mut("properties") else {
            return;
        };
        for (name, property) in properties.iter_mut() {
            tighten(property);
            if !required.contains(name) {
                make_nullable(property);
            }
        }
        let all: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
        object.insert("required".to_owned(), Value::Array(all));
        object.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = object.get_mut(key)
            && inner.is_object()
        {
            tighten(inner);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(schemas)) = object.get_mut(key) {
            schemas.iter_mut().for_each(tighten);
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = object.get_mut(key) {
            defs.values_mut().for_each(tighten);
        }
    }
}

/// Whether every object in `schema` lists its properties (strict mode has no free-form
/// objects).
fn closed(schema: &Value) -> bool {
    let Some(object) = schema.as_object() else {
        return true;
    };
    let is_object = match object.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        _ => false,
    };
    if is_object && !object.get("properties").is_some_and(Value::is_object) {
        return false;
    }
    let nested = |key: &str| match object.get(key) {
        Some(Value::Object(map))
            if key == "properties" || key == "$defs" || key == "definitions" =>
        {
            map.values().all(closed)
        }
        Some(Value::Array(list)) => list.iter().all(closed),
        Some(other @ Value::Object(_)) => closed(other),
        _ => true,
    };
    [
        "properties",
        "items",
        "anyOf",
        "oneOf",
        "allOf",
        "$defs",
        "definitions",
    ]
    .iter()
    .all(|key| nested(key))
}

/// Lets `schema` also be `null`.
fn make_nullable(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    match object.get_mut("type") {
        Some(Value::String(single)) if single != "null" => {
            let single = std::mem::take(single);
            object.insert("type".to_owned(), json!([single, "null"]));
        }
        Some(Value::Array(types)) => {
            if !types.iter().any(|t| t == "null") {
                types.push(json!("null"));
            }
        }
        Some(_) => {}
        None => {
            let inner = Value::Object(std::mem::take(object));
            let mut wrapper = Map::new();
            wrapper.insert("anyOf".to_owned(), json!([inner, {"type": "null"}]));
            *object = wrapper;
        }
    }
    if let Some(Value::Array(options)) = object.get_mut("enum")
        && !options.iter().any(Value::is_null)
    {
        options.push(Value::Null);
    }
}

/// A streamed answer, chunk by chunk.
#[derive(Debug, Default)]
pub struct OpenAiStream {
    draft: Draft,
    /// The draft slot of each tool call, by the index the server gave it.
    slots: BTreeMap<u64, usize>,
    done: bool,
}

impl OpenAiStream {
    /// An answer of which nothing has arrived yet; give it each event, then
    /// [`OpenAiStream::finish`] it.
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
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() || self.done {
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|error| StreamError::Malformed(format!("a chunk is not JSON ({error})")))?;
        if let Some(error) = chunk.get("error") {
            return Err(server_error(error));
        }
        self.draft.served(chunk.get("id"), chunk.get("model"));
        if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
            self.draft.usage = Some(usage.clone());
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        // One completion is asked for; other choices (n > 1) are not this message.
        let Some(choice) = choices
            .iter()
            .find(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return Ok(());
        };
        if let Some(delta) = choice.get("delta") {
            // Servers name reasoning one way or the other; one that sends both sends it once.
            if let Some(text) = ["reasoning_content", "reasoning"]
                .iter()
                .find_map(|key| delta.get(*key).and_then(Value::as_str))
            {
                self.draft.thinking(text);
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.draft.text(text);
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.call_fragment(position, call)?;
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.draft.stop = Some(stop_reason(reason));
        }
        Ok(())
    }

    fn call_fragment(&mut self, position: usize, call: &Value) -> Result<(), StreamError> {
        let indexed = call.get("index").is_some();
        let index = match call.get("index") {
            Some(index) => index.as_u64().ok_or_else(|| {
                StreamError::Malformed(format!("a tool call's index is not a number: {index}"))
            })?,
            // Servers that send each call whole may leave the index out.
            None => u64::try_from(position).unwrap_or(u64::MAX),
        };
        let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
        let function = call.get("function");
        let field = |name: &str| {
            function
                .and_then(|function| function.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (name, arguments) = (field("name"), field("arguments"));
        // A fragment with an id of its own starts another call, even at an index taken
        // before (servers that send each call whole, without an index). So does a named
        // fragment without an index: a whole call, even one repeating an earlier call's id,
        // which the runtime then refuses rather than joining two calls' arguments.
        let whole = !indexed && !name.is_empty();
        let known = self
            .slots
            .get(&index)
            .copied()
            .filter(|_| !whole)
            .filter(|&slot| id.is_empty() || self.draft.call_id(slot) == Some(id));
        match known {
            Some(slot) => {
                // The id and name come once; a server repeating them is not appending.
                self.draft.grow_call(slot, "", "", arguments);
            }
            None => {
                let slot = self.draft.start_call(id, name);
                self.draft.grow_call(slot, "", "", arguments);
                self.slots.insert(index, slot);
            }
        }
        Ok(())
    }

    /// The message, once the stream has ended.
    pub fn finish(self) -> Result<ModelResponse, StreamError> {
        self.draft.finish()
    }
}

/// A whole (not streamed) completion, as some servers answer even a streamed request.
pub(crate) fn whole_response(body: &Value) -> Result<ModelResponse, StreamError> {
    let mut stream = OpenAiStream::new();
    if let Some(error) = body.get("error") {
        return Err(server_error(error));
    }
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| StreamError::Malformed("a completion without choices".to_owned()))?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    // The message read as one chunk whose delta is all of it.
    let chunk = json!({
        "id": body.get("id"),
        "model": body.get("model"),
        "choices": [{"index": 0, "delta": message, "finish_reason": choice.get("finish_reason")}],
        "usage": body.get("usage"),
    });
    stream.event(&SseEvent {
        event: None,
        data: chunk.to_string(),
    })?;
    stream.finish()
}

/// An error object a server sent in place of a chunk or a completion.
fn server_error(error: &Value) -> StreamError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    let kind = error
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if crate::draft::passes(kind) {
        StreamError::Transient(message)
    } else {
        StreamError::Server(message)
    }
}

/// `finish_reason` as the loop's stop reason.
fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "length" => StopReason::Length,
        "tool_calls" | "function_call" => StopReason::ToolCalls,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::strict_schema;

    #[test]
    fn strict_schemas_require_everything_allow_nothing_else_and_make_optional_fields_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer"},
                "mode": {"enum": ["fast", "slow"]},
                "range": {
                    "type": "object",
                    "properties": {"start": {"type": "integer"}, "end": {"type": ["integer", "null"]}},
                    "required": ["start"]
                },
                "tags": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}
            },
            "required": ["path"]
        });
        assert_eq!(
            strict_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "limit": {"type": ["integer", "null"]},
                    "mode": {"anyOf": [{"enum": ["fast", "slow"]}, {"type": "null"}]},
                    "range": {
                        "type": ["object", "null"],
                        "properties": {"start": {"type": "integer"}, "end": {"type": ["integer", "null"]}},
                        "required": ["end", "start"],
                        "additionalProperties": false
                    },
                    "tags": {
                        "type": ["array", "null"],
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": ["string", "null"]}},
                            "required": ["name"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["limit", "mode", "path", "range", "tags"],
                "additionalProperties": false
            })
        );
    }
}

#[cfg(test)]
mod strict_requests {
    use serde_json::json;
    use toolrail_agent_loop::{ModelRequest, ToolDefinition};

    use super::request_body;
    use crate::config::{ProviderConfig, Wire};

    #[test]
    fn a_function_with_a_free_form_object_is_sent_without_strict() {
        let tool = |name: &str, schema: serde_json::Value| ToolDefinition {
            name: name.to_owned(),
            description: String::new(),
            input_schema: schema,
        };
        let request = ModelRequest {
            system: None,
            messages: std::sync::Arc::default(),
            tools: std::sync::Arc::new([
                tool(
                    "closed",
                    json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                ),
                tool(
                    "open",
                    json!({"type": "object", "properties": {"meta": {"type": "object"}}}),
                ),
            ]),
        };
        let mut options = ProviderConfig::new(Wire::OpenAi, "http://127.0.0.1:9/v1", "m");
        options.strict = true;
        let body = request_body(&request, &options);
        assert_eq!(body["tools"][0]["function"]["strict"], json!(true));
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(body["tools"][1]["function"].get("strict"), None);
        assert_eq!(
            body["tools"][1]["function"]["parameters"],
            json!({"type": "object", "properties": {"meta": {"type": "object"}}})
        );
    }
}
