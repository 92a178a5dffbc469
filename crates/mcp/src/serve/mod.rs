//! The other way round from the client: toolrail's tools served to any MCP client, each
//! `tools/call` a call of a toolrail session — recorded, judged by the rules and guards,
//! asked where a rule says ask, confined, logged — answered with the committed record.
//!
//! This crate speaks the protocol; the session is a [`ToolHost`] (the runtime's agent, or
//! anything that commits calls). Calls are handed to the host one at a time, in the order
//! the server took them up: each is one batch of its own, so results commit in arrival
//! order, and a slow call holds the ones behind it (a cancelled one gives its place up).

mod approvals;
mod convert;
mod http;

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{BoxFuture, ToolResultRecord};
use toolrail_tools_core::ToolSet;

pub use approvals::ElicitedApprovals;
pub use http::{HttpServeError, serve_http};

/// What [`McpServe`] serves: a session that lists its tools and commits calls.
///
/// Implementors run each call through their whole pipeline and return its committed
/// record — refusals included, as error records — or an error when the call could not be
/// run or recorded at all. A call whose `cancel` fires must still end with an honest
/// outcome (the record of an aborted call), never a made-up success.
pub trait ToolHost: Send + Sync + 'static {
    /// The tools to offer, as they are now.
    fn tools(&self) -> ToolSet;

    /// Runs one call to its committed result, reporting progress text to `progress`.
    fn call(
        &self,
        call: HostedCall,
        progress: mpsc::UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Arc<ToolResultRecord>, String>>;
}

/// One `tools/call`, as the host receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostedCall {
    /// Who called: the client's name and version from its `initialize`.
    pub client: String,
    /// An id for the log, from the request's id (`mcp-<id>`).
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Its arguments (`{}` when the client sent none).
    pub arguments: Value,
}

/// An MCP server over a [`ToolHost`]: `tools/list` from its tools, `tools/call` through
/// it, with progress notifications and cancellation.
///
/// ```no_run
/// # async fn demo(host: std::sync::Arc<dyn toolrail_mcp::serve::ToolHost>) -> Result<(), Box<dyn std::error::Error>> {
/// use toolrail_mcp::serve::McpServe;
/// let server = McpServe::new(host);
/// server.serve_stdio().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpServe {
    host: Arc<dyn ToolHost>,
    /// Calls take their turn here, in the order they were taken up (tokio's mutex is fair).
    order: Arc<tokio::sync::Mutex<()>>,
    approvals: Option<Arc<ElicitedApprovals>>,
}

impl std::fmt::Debug for McpServe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServe").finish_non_exhaustive()
    }
}

/// Why serving over stdio ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client's `initialize` failed or the connection broke before it.
    #[error("the MCP client did not complete its initialize: {0}")]
    Initialize(String),
    /// The connection ended abnormally.
    #[error("the MCP connection failed: {0}")]
    Connection(String),
}

impl McpServe {
    /// A server over `host`.
    pub fn new(host: Arc<dyn ToolHost>) -> Self {
        Self {
            host,
            order: Arc::default(),
            approvals: None,
        }
    }

    /// Asks approvals through the client (MCP elicitation) on whatever connection calls:
    /// `approvals` must be the service the host's session asks (see
    /// [`ElicitedApprovals`]).
    #[must_use]
    pub fn asking_through(mut self, approvals: Arc<ElicitedApprovals>) -> Self {
        self.approvals = Some(approvals);
        self
    }

    /// Serves one client on stdin and stdout until it closes them.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        let running = rmcp::serve_server(self, rmcp::transport::io::stdio())
            .await
            .map_err(|error| ServeError::Initialize(error.to_string()))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|error| ServeError::Connection(error.to_string()))
    }

    async fn run_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let client = context
            .peer
            .peer_info()
            .map(|info| {
                let client = &info.client_info;
                format!("MCP client {} {}", client.name, client.version)
            })
            .unwrap_or_else(|| "an MCP client".to_owned());
        let call = HostedCall {
            client,
            id: format!("mcp-{}", request_id_text(&context.id)),
            tool: request.name.to_string(),
            arguments: request
                .arguments
                .map_or_else(|| Value::Object(Default::default()), Value::Object),
        };
        let call_id = call.id.clone();
        let cancel = context.ct.clone();
        // Waiting for its turn ends when the client cancels: nothing was recorded yet.
        let turn = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(ErrorData::internal_error("the call was cancelled before it started", None)),
            turn = self.order.lock() => turn,
        };
        if let Some(approvals) = &self.approvals {
            approvals.asking(context.peer.clone());
        }
        let (progress, mut reports) = mpsc::unbounded_channel::<String>();
        let forward = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                let mut count = 0_u32;
                while let Some(message) = reports.recv().await {
                    count += 1;
                    let note = ProgressNotificationParam::new(token.clone(), f64::from(count))
                        .with_message(message);
                    if peer.notify_progress(note).await.is_err() {
                        break;
                    }
                }
            })
        });
        let outcome = self.host.call(call, progress, cancel).await;
        drop(turn);
        if let Some(forward) = forward {
            // The sender is gone with the call: the forwarder ends after the last report.
            let _ = forward.await;
        }
        match outcome {
            Ok(record) => Ok(convert::result_of(&record, &call_id).into()),
            Err(why) => Err(ErrorData::internal_error(
                format!("toolrail could not run or record the call: {why}"),
                None,
            )),
        }
    }
}

fn request_id_text(id: &rmcp::model::RequestId) -> String {
    match serde_json::to_value(id) {
        Ok(Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

impl ServerHandler for McpServe {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolrail", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toolrail's tools. Every call is recorded in a session log, judged by the \
                 workspace's rules and run confined; a refused call comes back as an error \
                 result saying why.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.host.tools();
        Ok(ListToolsResult::with_all_items(
            tools
                .offered()
                .map(|entry| convert::tool_of(entry.spec()))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.run_call(request, context).await
    }
}
