//! The sessions an ACP client opens: `session/new` builds an agent for the client's folder
//! the way `chat` does (the same flags, the folder's `toolrail.toml`, its
//! `.toolrail/sessions`), `session/load` replays a logged session and resumes it,
//! `session/prompt` runs a turn and streams it, `session/cancel` cancels it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use toolrail_runtime::{
    Agent, AgentBuilder, AgentError, AgentEvent, Resumed, SessionConfig, Store,
};
use toolrail_session_log::SessionId;
use toolrail_tools_core::CancellationToken;

use super::permission::ClientApprovals;
use super::updates;
use super::wire::{Peer, RpcError, code};
use crate::flags::AgentFlags;
use crate::places::new_session_id;
use crate::run::build_error;

/// One open session.
struct Session {
    agent: Agent,
    /// The running turn's calls the client was told of (see [`updates::Announced`]).
    announced: updates::Announced,
    /// The workspace (the client's `cwd`).
    root: PathBuf,
    /// Set by `session/cancel` while a prompt runs: its answer is then `cancelled`
    /// whatever else went wrong.
    cancelled: AtomicBool,
}

/// Every session this connection opened, and how to build more.
pub(crate) struct Sessions {
    flags: AgentFlags,
    peer: Peer,
    open: Mutex<HashMap<String, Arc<Session>>>,
    /// Sessions being loaded, kept from the start so `session/cancel` reaches them: the
    /// token stops a pending approval their recovery asks the client again.
    loading: Mutex<HashMap<String, CancellationToken>>,
}

impl Sessions {
    pub(crate) fn new(flags: AgentFlags, peer: Peer) -> Self {
        Self {
            flags,
            peer,
            open: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashMap::new()),
        }
    }

    /// `session/new {cwd, mcpServers}`.
    pub(crate) async fn create(&self, params: &Value) -> Result<Value, RpcError> {
        let (root, config) = self.config(params)?;
        let id = new_session_id();
        let (builder, announced) = self.builder(config, &id, &root);
        let agent = builder
            .session_id(id.clone())
            .build()
            .await
            .map_err(|error| RpcError::from_anyhow(&build_error(error)))?;
        self.keep(&id, agent, root, announced);
        Ok(json!({"sessionId": id}))
    }

    /// `session/load {sessionId, cwd, mcpServers}`: the session resumed (recovery first
    /// answers any call an earlier process left open, asking the client again about a call
    /// left waiting for its approval — `session/cancel` withdraws that question), then the
    /// log replayed as updates.
    pub(crate) async fn load(&self, params: &Value) -> Result<Value, RpcError> {
        let id = required(params, "sessionId")?;
        let stop = CancellationToken::new();
        {
            let mut loading = self.loading.lock();
            if self.open.lock().contains_key(&id) || loading.contains_key(&id) {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("session {id} is open in this connection already"),
                ));
            }
            loading.insert(id.clone(), stop.clone());
        }
        let loaded = self.resume(params, &id, stop).await;
        self.loading.lock().remove(&id);
        let (resumed, root, announced) = loaded?;
        // Read after recovery, so what it repaired is shown as the log now has it; a call
        // asked about again was announced then, and is not announced twice.
        let events = resumed
            .agent
            .store()
            .read(&SessionId::new(id.clone()))
            .map_err(|error| RpcError::new(code::INTERNAL_ERROR, error.to_string()))?;
        for update in updates::replay(&events, &root, resumed.agent.tools(), &announced) {
            self.update(&id, update);
        }
        self.keep(&id, resumed.agent, root, announced);
        Ok(json!({}))
    }

    /// Resumes session `id` for `session/load`, its re-asked approvals stopped by `stop`.
    async fn resume(
        &self,
        params: &Value,
        id: &str,
        stop: CancellationToken,
    ) -> Result<(Resumed, PathBuf, updates::Announced), RpcError> {
        let (root, config) = self.config(params)?;
        let store = Store::open(
            &config.store.url,
            toolrail_session_store::Durability::Strict,
        )
        .map_err(|error| RpcError::new(code::INTERNAL_ERROR, error.to_string()))?;
        let session = SessionId::new(id);
        let known = store.read(&session).is_ok_and(|events| !events.is_empty());
        if !known {
            return Err(RpcError::new(
                code::RESOURCE_NOT_FOUND,
                format!("{} holds no session {id}", store.url()),
            ));
        }
        let mut recorded = SessionConfig::recorded_in(&store, &session)
            .map_err(|error| RpcError::new(code::INVALID_PARAMS, error.to_string()))?;
        // The servers the client names now join those the session was recorded with.
        recorded.mcp_servers.extend(config.mcp_servers);
        let (builder, announced) = self.builder(recorded, id, &root);
        let resumed = builder
            .cancel(stop)
            .resume(&store, &session)
            .await
            .map_err(|error| RpcError::from_anyhow(&build_error(error)))?;
        Ok((resumed, root, announced))
    }

    /// `session/prompt {sessionId, prompt}`: runs the turn, streaming its updates; answers
    /// with why it stopped.
    pub(crate) async fn prompt(&self, params: &Value) -> Result<Value, RpcError> {
        let id = required(params, "sessionId")?;
        let session = self.session(&id)?;
        let text = prompt_text(params.get("prompt").unwrap_or(&Value::Null))?;
        session.cancelled.store(false, Ordering::SeqCst);
        let mut turn = updates::Turn::new(
            &session.root,
            session.agent.tools(),
            Arc::clone(&session.announced),
        );
        let mut events = session.agent.stream(text);
        let stopped = loop {
            match events.next().await {
                Some(Ok(AgentEvent::TurnEnded(answer))) => {
                    break Ok(updates::stop_reason(&answer.end));
                }
                Some(Ok(event)) => {
                    for update in turn.updates(&event) {
                        self.update(&id, update);
                    }
                }
                Some(Err(AgentError::Busy)) => {
                    return Err(RpcError::new(
                        code::INVALID_REQUEST,
                        format!(
                            "session {id} is running a prompt already: wait for its answer, or send session/cancel"
                        ),
                    ));
                }
                Some(Err(error)) => break Err(error.to_string()),
                None => break Err("the turn ended without an answer".to_owned()),
            }
        };
        match stopped {
            _ if session.cancelled.load(Ordering::SeqCst) => Ok(json!({"stopReason": "cancelled"})),
            Ok(reason) => Ok(json!({"stopReason": reason})),
            Err(message) => Err(RpcError::new(
                code::INTERNAL_ERROR,
                format!("{message} (the log keeps what happened; session/load resumes it)"),
            )),
        }
    }

    /// `session/cancel {sessionId}`: the running turn is cancelled; every call it started
    /// gets an honest outcome in the log.
    pub(crate) fn cancel(&self, params: &Value) {
        let Ok(id) = required(params, "sessionId") else {
            return;
        };
        if let Some(loading) = self.loading.lock().get(&id) {
            loading.cancel();
        }
        if let Ok(session) = self.session(&id) {
            session.cancelled.store(true, Ordering::SeqCst);
            session.agent.cancel();
        }
    }

    /// The client left: every running turn is cancelled.
    pub(crate) fn cancel_all(&self) {
        for loading in self.loading.lock().values() {
            loading.cancel();
        }
        let open: Vec<Arc<Session>> = self.open.lock().values().cloned().collect();
        for session in open {
            session.cancelled.store(true, Ordering::SeqCst);
            session.agent.cancel();
        }
    }

    /// Closes every session: their MCP servers stopped the MCP way, their logs released
    /// as their agents drop.
    pub(crate) async fn close_all(&self) {
        let open: Vec<Arc<Session>> = self
            .open
            .lock()
            .drain()
            .map(|(_, session)| session)
            .collect();
        futures_util::future::join_all(open.iter().map(|session| session.agent.shutdown())).await;
    }

    fn session(&self, id: &str) -> Result<Arc<Session>, RpcError> {
        self.open.lock().get(id).cloned().ok_or_else(|| {
            RpcError::new(
                code::RESOURCE_NOT_FOUND,
                format!("no session {id} is open here: session/new or session/load it first"),
            )
        })
    }

    fn keep(&self, id: &str, agent: Agent, root: PathBuf, announced: updates::Announced) {
        let session = Arc::new(Session {
            agent,
            announced,
            root,
            cancelled: AtomicBool::new(false),
        });
        self.open.lock().insert(id.to_owned(), session);
    }

    fn update(&self, id: &str, update: Value) {
        self.peer
            .notify("session/update", json!({"sessionId": id, "update": update}));
    }

    /// The configuration for the client's folder: `toolrail acp`'s flags with `cwd` as the
    /// workspace (its `toolrail.toml`, its sessions folder), and the client's MCP servers.
    fn config(&self, params: &Value) -> Result<(PathBuf, SessionConfig), RpcError> {
        let cwd = PathBuf::from(required(params, "cwd")?);
        if !cwd.is_absolute() {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("cwd {} is not an absolute path", cwd.display()),
            ));
        }
        let flags = AgentFlags {
            workspace: Some(cwd.clone()),
            ..self.flags.clone()
        };
        let mut config = flags
            .config()
            .map_err(|error| RpcError::from_anyhow(&error))?;
        for server in params
            .get("mcpServers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (name, server) = mcp_server(server)?;
            config.mcp_servers.insert(name, server);
        }
        Ok((cwd, config))
    }

    /// A builder whose approvals ask this client, and the announced calls they share with
    /// the session's turns.
    fn builder(
        &self,
        config: SessionConfig,
        id: &str,
        root: &std::path::Path,
    ) -> (AgentBuilder, updates::Announced) {
        let announced = updates::Announced::default();
        let approvals = ClientApprovals::new(
            self.peer.clone(),
            id.to_owned(),
            root.to_path_buf(),
            Arc::clone(&announced),
        );
        let builder = Agent::builder()
            .config(config)
            .approvals(Arc::new(approvals));
        (builder, announced)
    }
}

/// A string parameter the request must have.
fn required(params: &Value, name: &str) -> Result<String, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, format!("`{name}` is required")))
}

/// The prompt's text: text blocks as they are, resources by their text or their link.
fn prompt_text(prompt: &Value) -> Result<String, RpcError> {
    let Some(blocks) = prompt.as_array() else {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "`prompt` is required: a list of content blocks",
        ));
    };
    let mut parts = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_owned()),
            Some("resource_link") => {
                parts.push(format!("@{}", block["uri"].as_str().unwrap_or_default()));
            }
            Some("resource") => {
                let resource = &block["resource"];
                match resource["text"].as_str() {
                    Some(text) => parts.push(format!(
                        "{}:\n{text}",
                        resource["uri"].as_str().unwrap_or_default()
                    )),
                    None => {
                        parts.push(format!("@{}", resource["uri"].as_str().unwrap_or_default()))
                    }
                }
            }
            other => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!(
                        "toolrail takes text and resources in a prompt, not {}",
                        other.unwrap_or("a block without a type")
                    ),
                ));
            }
        }
    }
    Ok(parts.join("\n"))
}

/// An ACP `McpServer` as toolrail configures one: stdio servers only (toolrail advertises
/// no HTTP or SSE transport).
fn mcp_server(server: &Value) -> Result<(String, toolrail_runtime::McpServerConfig), RpcError> {
    let name = server["name"].as_str().unwrap_or_default().to_owned();
    if server
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind != "stdio")
    {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "MCP server {name}: toolrail starts stdio servers only (it advertises no http or sse)"
            ),
        ));
    }
    let env: serde_json::Map<String, Value> = server["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| Some((pair["name"].as_str()?.to_owned(), pair["value"].clone())))
        .collect();
    let args = server.get("args").cloned().unwrap_or_else(|| json!([]));
    let config = json!({"command": server["command"], "args": args, "env": env});
    serde_json::from_value(config)
        .map(|config| (name.clone(), config))
        .map_err(|error| RpcError::new(code::INVALID_PARAMS, format!("MCP server {name}: {error}")))
}
