//! The MCP client span of a call to an MCP server's tool, after the OpenTelemetry MCP
//! conventions (status: development): `tools/call {tool}`, kind CLIENT, a child of the
//! call's `execute_tool` span, made from the call's `mcp/request` event — whose span id is
//! the one the server was sent in `params._meta.traceparent`, so the server's spans are its
//! children — and ended when the call's run ended.

use std::time::SystemTime;

use opentelemetry::KeyValue;
use toolrail_session_log::event::McpRequest;

use super::genai::{attr as genai_attr, name as genai_name};

/// Attribute names of the MCP conventions.
pub mod attr {
    /// The JSON-RPC method (`tools/call`).
    pub const METHOD_NAME: &str = "mcp.method.name";
    /// The protocol revision the connection negotiated.
    pub const PROTOCOL_VERSION: &str = "mcp.protocol.version";
    /// The request's JSON-RPC id, as text.
    pub const REQUEST_ID: &str = "jsonrpc.request.id";
    /// How the messages travel: `pipe` for a server on stdio.
    pub const NETWORK_TRANSPORT: &str = "network.transport";
    /// toolrail's name for the server (its `mcpServers` key).
    pub const SERVER: &str = "toolrail.mcp.server";
}

/// The name of the client-side duration histogram.
pub const CLIENT_OPERATION_DURATION: &str = "mcp.client.operation.duration";

/// The span's name: the method and the tool (`tools/call read`).
pub fn span_name(request: &McpRequest) -> String {
    format!("{} {}", request.method, request.tool)
}

/// What the span and its duration are labelled with at the start.
pub fn request_attributes(request: &McpRequest) -> Vec<KeyValue> {
    let mut attributes = metric_labels(request);
    attributes.extend([
        KeyValue::new(attr::REQUEST_ID, request.request_id.clone()),
        KeyValue::new(attr::SERVER, request.server.clone()),
    ]);
    attributes
}

/// The labels of `mcp.client.operation.duration` (no request id: it is not low-cardinality).
pub fn metric_labels(request: &McpRequest) -> Vec<KeyValue> {
    let mut labels = vec![
        KeyValue::new(attr::METHOD_NAME, request.method.clone()),
        KeyValue::new(genai_attr::OPERATION_NAME, genai_name::EXECUTE_TOOL),
        KeyValue::new(genai_attr::TOOL_NAME, request.tool.clone()),
        // toolrail's MCP client speaks to servers it started, over their stdio.
        KeyValue::new(attr::NETWORK_TRANSPORT, "pipe"),
    ];
    if !request.protocol.is_empty() {
        labels.push(KeyValue::new(
            attr::PROTOCOL_VERSION,
            request.protocol.clone(),
        ));
    }
    labels
}

/// When the request's span ends: when the call's run ended (`started` plus the run's
/// length, from the record's timing), else at the commit; never before it was sent.
pub fn ended_at(
    sent: SystemTime,
    started: Option<SystemTime>,
    run_us: u64,
    committed: SystemTime,
) -> SystemTime {
    let run_end = started
        .map(|started| started + std::time::Duration::from_micros(run_us))
        .unwrap_or(committed);
    run_end.min(committed).max(sent)
}
