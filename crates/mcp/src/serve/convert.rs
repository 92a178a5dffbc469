//! toolrail's specs and records in MCP's shapes: a spec becomes a listed tool (schemas and
//! annotations from its kind and declarations), a committed record a `tools/call` result
//! (its content as the model reads it, `isError` for every failure and refusal, its value
//! as structured content, and its code and call id in `_meta`).

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};
use toolrail_session_log::{ContentBlock, ToolResultRecord};
use toolrail_tools_core::{ToolKind, ToolSpec};

/// A spec as `tools/list` shows it.
pub(crate) fn tool_of(spec: &ToolSpec) -> Tool {
    let kind = spec.kind();
    let annotations = ToolAnnotations::new()
        .read_only(spec.is_read_only())
        .idempotent(spec.is_idempotent())
        .destructive(!spec.is_read_only() && is_destructive(kind))
        .open_world(matches!(kind, ToolKind::Fetch | ToolKind::Execute));
    let tool = Tool::new(
        spec.name().to_owned(),
        spec.description().to_owned(),
        Arc::new(object_of(spec.input_schema())),
    )
    .with_annotations(annotations);
    match spec.output_schema() {
        Some(schema) => tool.with_raw_output_schema(Arc::new(object_of(schema))),
        None => tool,
    }
}

fn is_destructive(kind: ToolKind) -> bool {
    match kind {
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move | ToolKind::Execute => true,
        ToolKind::Read | ToolKind::Search | ToolKind::Fetch | ToolKind::Think | ToolKind::Other => {
            false
        }
    }
}

/// A schema as an object; anything else (a spec's schema always is one) as the empty one.
fn object_of(schema: &Value) -> JsonObject {
    if let Value::Object(map) = schema {
        map.clone()
    } else {
        JsonObject::default()
    }
}

/// A committed record as the `tools/call` result the client reads.
pub(crate) fn result_of(record: &ToolResultRecord, call_id: &str) -> CallToolResult {
    let content = record
        .content
        .iter()
        .map(|block| {
            // Every shape `content_of` writes is the protocol's; should one not read back,
            // its text still does.
            serde_json::from_value(content_of(block))
                .unwrap_or_else(|_| rmcp::model::ContentBlock::text(record.text()))
        })
        .collect();
    let mut meta = serde_json::Map::new();
    meta.insert(
        "toolrail/call_id".to_owned(),
        Value::String(call_id.to_owned()),
    );
    let mut result = match &record.error {
        Some(error) => {
            meta.insert(
                "toolrail/error_code".to_owned(),
                Value::String(error.code.as_str().to_owned()),
            );
            CallToolResult::error(content)
        }
        None => CallToolResult::success(content),
    };
    if !record.is_error()
        && let Some(value @ Value::Object(_)) = &record.value
    {
        result.structured_content = Some(value.clone());
    }
    result.meta = serde_json::from_value(Value::Object(meta)).ok();
    result
}

fn content_of(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text { text } => json!({ "type": "text", "text": text }),
        ContentBlock::Image { media_type, data } => {
            json!({ "type": "image", "data": data, "mimeType": media_type })
        }
        ContentBlock::Json { value } => json!({ "type": "text", "text": value.to_string() }),
    }
}
