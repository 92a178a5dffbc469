//! A session served to MCP clients: [`AgentHost`] is the agent as the MCP server's
//! [`ToolHost`], so each `tools/call` is a turn of the session's own (see
//! [`Agent::stream_call`]), with the session's rules, approvals, sandbox and log.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use toolrail_mcp::serve::{HostedCall, ToolHost};
use toolrail_session_log::{BoxFuture, ToolResultRecord};
use toolrail_tools_core::CancellationToken;
use toolrail_tools_core::ToolSet;

use crate::{Agent, AgentEvent, ClientCall};

/// An [`Agent`] serving its tools to MCP clients.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use toolrail_mcp::serve::{ElicitedApprovals, McpServe};
/// use toolrail_runtime::{Agent, serve::AgentHost};
/// let approvals = ElicitedApprovals::shared();
/// let agent = Agent::builder()
///     .workspace(["."])
///     .approvals(approvals.clone())
///     .build()
///     .await?;
/// McpServe::new(Arc::new(AgentHost::new(agent)))
///     .asking_through(approvals)
///     .serve_stdio()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AgentHost {
    agent: Arc<Agent>,
}

impl AgentHost {
    /// The agent's session, served.
    pub fn new(agent: Agent) -> Self {
        Self {
            agent: Arc::new(agent),
        }
    }

    /// The session behind the server.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }
}

impl ToolHost for AgentHost {
    fn tools(&self) -> ToolSet {
        self.agent.tools().snapshot()
    }

    fn call(
        &self,
        call: HostedCall,
        progress: mpsc::UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Arc<ToolResultRecord>, String>> {
        let agent = Arc::clone(&self.agent);
        Box::pin(async move {
            let request = ClientCall::new(call.client, call.tool, &call.arguments)
                .with_id(call.id)
                .with_caller(call.caller);
            let mut events = agent.stream_call(request);
            let mut cancelled = false;
            loop {
                let event = tokio::select! {
                    biased;
                    () = cancel.cancelled(), if !cancelled => {
                        // The turn still gives the call its honest outcome; keep reading.
                        cancelled = true;
                        agent.cancel();
                        continue;
                    }
                    event = events.next() => event,
                };
                match event {
                    // Where the call stands, then whatever the tool reports as it runs.
                    Some(Ok(AgentEvent::ApprovalAsked { reason, .. })) => {
                        let _ = progress.send(format!("waiting for approval: {reason}"));
                    }
                    Some(Ok(AgentEvent::CallStarted { .. })) => {
                        let _ = progress.send("running".to_owned());
                    }
                    Some(Ok(AgentEvent::CallProgress { data, .. })) => {
                        let _ = progress.send(progress_text(&data));
                    }
                    Some(Ok(AgentEvent::TurnEnded(answer))) => {
                        return answer.results.first().cloned().ok_or_else(|| {
                            "the call's turn ended without a committed result".to_owned()
                        });
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error.to_string()),
                    None => return Err("the call's turn ended without an outcome".to_owned()),
                }
            }
        })
    }
}

/// A progress report as one line of text: a tool's own words where it gave some.
fn progress_text(data: &Value) -> String {
    match data {
        Value::String(text) => text.clone(),
        Value::Object(map) => ["message", "text", "line"]
            .iter()
            .find_map(|key| map.get(*key).and_then(Value::as_str))
            .map_or_else(|| data.to_string(), str::to_owned),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => data.to_string(),
    }
}

/// The model of a session that only serves calls (`toolrail mcp serve`): asked anything,
/// it fails, saying so. [`Agent::stream_call`] never asks it.
///
/// ```
/// use std::sync::Arc;
/// let builder = toolrail_runtime::Agent::builder()
///     .model_client(Arc::new(toolrail_runtime::serve::NoModel));
/// # let _ = builder;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoModel;

impl toolrail_agent_loop::ModelClient for NoModel {
    fn complete<'a>(
        &'a self,
        _request: &'a toolrail_agent_loop::ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<toolrail_agent_loop::ModelResponse, toolrail_agent_loop::ModelError>>
    {
        Box::pin(std::future::ready(Err(
            toolrail_agent_loop::ModelError::failed(
                "this session serves tool calls to MCP clients and has no model; give it one in [model] to prompt it",
            ),
        )))
    }
}
