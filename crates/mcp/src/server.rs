//! The servers: each a child process spoken to with `rmcp`, its tools registered under
//! `mcp(<server>)` and re-registered when it says its list changed (the current snapshot
//! never changes; the next request sees the new list), restarted with backoff when it
//! crashes and withdrawn after its restarts run out, and ended — its whole process group —
//! at shutdown.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, ProgressNotificationParam,
    Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningServiceCancellationToken};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::ToolSource;
use toolrail_tools_core::{Registry, ToolContext, ToolFailure};

use crate::config::{McpConfig, ServerConfig, Start};
use crate::naming;
use crate::tool::{Listed, McpTool, Remote};

/// Where a server stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Its first connection is being made: not yet connected, its tools not yet listed.
    Starting,
    /// Connected, its tools registered.
    Running {
        /// The version the server gave in its handshake (`unknown` when it gave none),
        /// recorded with every call of its tools.
        version: String,
        /// Its offered tools, by their names in the session (`mcp__<server>__<tool>`).
        tools: Vec<String>,
    },
    /// Not started (disabled in the configuration).
    Disabled,
    /// Its last connection failed (it could not be started, or it ended); it is started
    /// again after a pause.
    Restarting {
        /// How the last connection failed or ended.
        why: String,
        /// Restarts so far, this one included; the count starts again after a connection
        /// that lasted a minute.
        restarts: u32,
    },
    /// Its tools withdrawn: it could not be started, or crashed past its restarts.
    Withdrawn {
        /// How the last connection failed or ended, and after how many restarts.
        why: String,
    },
}

/// How long a connection must last for its server's restart count to start again.
const STABLE: Duration = Duration::from_secs(60);

/// Environment variables a server inherits; the configuration adds its own.
const ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "USER",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Every configured server of a session.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
}

impl McpServers {
    /// Starts the configured servers against `registry`: the ones that start with the
    /// session are waited for (each up to its startup timeout), the lazy ones connect in
    /// the background.
    pub async fn start(config: &McpConfig, registry: &Registry) -> Self {
        let servers: Vec<Arc<Server>> = config
            .servers
            .iter()
            .map(|(name, server)| Server::new(name.clone(), server.clone(), registry.clone()))
            .collect();
        let mut waiting = Vec::new();
        for server in &servers {
            if !server.config.enabled {
                *server.state.lock() = ServerState::Disabled;
                continue;
            }
            let running = Arc::clone(server);
            let task = tokio::spawn(async move { running.run().await });
            server.tasks.lock().push(task);
            if server.config.start == Start::Session {
                waiting.push(Arc::clone(server));
            }
        }
        for server in waiting {
            server.started().await;
        }
        Self { servers }
    }

    /// Each server's name and state, in name order.
    pub fn states(&self) -> Vec<(String, ServerState)> {
        self.servers
            .iter()
            .map(|server| (server.name.clone(), server.state.lock().clone()))
            .collect()
    }

    /// The process id of a running server (the leader of its process group).
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.find(name)?.link.lock().as_ref()?.group
    }

    /// How often a server's tool list was read again after it said the list changed.
    pub fn relisted(&self, name: &str) -> u64 {
        self.find(name)
            .map_or(0, |server| server.relisted.load(Ordering::Relaxed))
    }

    fn find(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|server| server.name == name)
    }

    /// Ends every server and its processes; their tools leave the registry.
    pub async fn shutdown(&self) {
        for server in &self.servers {
            server.stop().await;
        }
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        for server in &self.servers {
            server.kill_now();
        }
    }
}

/// The live link to a running server.
struct Link {
    peer: Peer<RoleClient>,
    service: RunningServiceCancellationToken,
    /// The server's process group (its leader's pid).
    group: Option<u32>,
}

pub(crate) struct Server {
    name: String,
    config: ServerConfig,
    registry: Registry,
    state: Mutex<ServerState>,
    link: Mutex<Option<Link>>,
    progress: ProgressDispatcher,
    stop: CancellationToken,
    settled: tokio::sync::Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    relisted: AtomicU64,
    first_try_over: AtomicBool,
}

/// Receives the server's notifications.
struct Client {
    progress: ProgressDispatcher,
    changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.changed.send(());
    }
}

impl Server {
    fn new(name: String, config: ServerConfig, registry: Registry) -> Arc<Self> {
        Arc::new(Self {
            name,
            config,
            registry,
            state: Mutex::new(ServerState::Starting),
            link: Mutex::new(None),
            progress: ProgressDispatcher::new(),
            stop: CancellationToken::new(),
            settled: tokio::sync::Notify::new(),
            tasks: Mutex::new(Vec::new()),
            relisted: AtomicU64::new(0),
            first_try_over: AtomicBool::new(false),
        })
    }

    fn source(&self) -> ToolSource {
        ToolSource::Mcp(Arc::from(self.name.as_str()))
    }

    /// Waits until the server's first try is over: running, or not (it may still be
    /// restarted in the background).
    async fn started(&self) {
        loop {
            let settled = self.settled.notified();
            if !matches!(
                *self.state.lock(),
                ServerState::Starting | ServerState::Restarting { .. }
            ) || self.first_try_over.load(Ordering::Acquire)
            {
                return;
            }
            settled.await;
        }
    }

    fn set_state(&self, state: ServerState) {
        *self.state.lock() = state;
        self.settled.notify_waiters();
    }

    /// The server's life: connect, serve until the connection ends, restart with backoff
    /// up to the limit, then withdraw its tools.
    async fn run(self: Arc<Self>) {
        let mut restarts = 0;
        loop {
            let began = tokio::time::Instant::now();
            let outcome = tokio::select! {
                outcome = self.connect_and_serve() => outcome,
                () = self.stop.cancelled() => return,
            };
            self.registry.remove_source(&self.source());
            *self.link.lock() = None;
            if self.stop.is_cancelled() {
                self.first_try_over.store(true, Ordering::Release);
                self.settled.notify_waiters();
                return;
            }
            // A server that ran a good while before it failed starts its count again:
            // crashes spread over a long session do not add up to a withdrawal.
            if began.elapsed() > STABLE {
                restarts = 0;
            }
            let withdrawn = restarts >= self.config.max_restarts;
            // The state first, then the word that the first try is over: whoever waited for
            // it reads how it went, never `Starting`.
            if withdrawn {
                self.set_state(ServerState::Withdrawn {
                    why: format!(
                        "{outcome}; withdrawn after {restarts} restart{}",
                        if restarts == 1 { "" } else { "s" }
                    ),
                });
            } else {
                restarts += 1;
                self.set_state(ServerState::Restarting {
                    why: outcome,
                    restarts,
                });
            }
            // The session waits for the first try only, not for every restart.
            self.first_try_over.store(true, Ordering::Release);
            self.settled.notify_waiters();
            if withdrawn {
                return;
            }
            let backoff = Duration::from_millis(200u64.saturating_mul(1 << restarts.min(6)));
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.stop.cancelled() => return,
            }
        }
    }

    /// One connection, from spawn to its end; says how it ended.
    async fn connect_and_serve(self: &Arc<Self>) -> String {
        let mut command = tokio::process::Command::new(&self.config.command);
        command
            .args(&self.config.args)
            .env_clear()
            .process_group(0)
            .kill_on_drop(true);
        for name in ENV_ALLOW {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(&self.config.env);
        if let Some(cwd) = &self.config.cwd {
            command.current_dir(cwd);
        }
        let spawned = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn();
        let transport = match spawned {
            Ok((transport, _)) => transport,
            Err(error) => {
                return format!("`{}` could not be started: {error}", self.config.command);
            }
        };
        let group = transport.id();
        // Whatever ends this connection — a failed handshake, a crash, a stop while it
        // starts — ends the server's whole process group with it.
        let _group = GroupGuard(group);
        let (changed, mut changes) = mpsc::unbounded_channel();
        let client = Client {
            progress: self.progress.clone(),
            changed,
        };
        let service = match tokio::time::timeout(
            self.config.startup_timeout(),
            client.serve(transport),
        )
        .await
        {
            Ok(Ok(service)) => service,
            Ok(Err(error)) => return format!("the MCP handshake failed: {error}"),
            Err(_) => {
                kill_group(group);
                return format!(
                    "the server did not answer within {} ms",
                    self.config.startup_timeout_ms
                );
            }
        };
        let version = service
            .peer_info()
            .and_then(|info| {
                info.server_info
                    .as_ref()
                    .map(|server| server.version.clone())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let peer = service.peer().clone();
        *self.link.lock() = Some(Link {
            peer: peer.clone(),
            service: service.cancellation_token(),
            group,
        });
        if let Err(why) = self.list_and_register(&peer, &version).await {
            kill_group(group);
            return why;
        }
        let waiting = service.waiting();
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                ended = &mut waiting => {
                    kill_group(group);
                    return match ended {
                        Ok(reason) => format!("the connection ended ({reason:?})"),
                        Err(error) => format!("the connection failed: {error}"),
                    };
                }
                Some(()) = changes.recv() => {
                    // The next request sees the new list; the current snapshot keeps its own.
                    match self.list_and_register(&peer, &version).await {
                        Ok(()) => {
                            self.relisted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => tracing_note(&self.name, &why),
                    }
                }
            }
        }
    }

    /// Lists the server's tools and puts the offered ones in the registry in place of the
    /// ones it had there.
    async fn list_and_register(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
        version: &str,
    ) -> Result<(), String> {
        let tools = tokio::time::timeout(self.config.startup_timeout(), peer.list_all_tools())
            .await
            .map_err(|_| "listing its tools timed out".to_owned())?
            .map_err(|error| format!("listing its tools failed: {error}"))?;
        let listed: Vec<Listed> = tools
            .iter()
            .filter_map(|tool| serde_json::to_value(tool).ok())
            .filter_map(|tool| Listed::from_wire(&tool))
            .filter(|tool| self.config.offers(&tool.name))
            .collect();
        let server = Arc::clone(self);
        let made = self.registry.replace_source(&self.source(), move |taken| {
            let pairs: Vec<(String, String)> = listed
                .iter()
                .map(|tool| (server.name.clone(), tool.name.clone()))
                .collect();
            let names = naming::assign(&pairs, taken);
            listed
                .iter()
                .zip(names)
                .map(|(tool, name)| {
                    Arc::new(McpTool::new(
                        name,
                        tool,
                        Arc::clone(&server) as Arc<dyn Remote>,
                        version,
                        server.config.parallel,
                        server.config.trust_annotations,
                    )) as Arc<dyn toolrail_tools_core::Tool>
                })
                .collect()
        });
        let registered = match made {
            Ok((registered, skipped)) => {
                for warning in skipped {
                    tracing_note(&self.name, &warning.message);
                }
                registered
            }
            Err(error) => return Err(format!("its tools could not be registered: {error}")),
        };
        self.set_state(ServerState::Running {
            version: version.to_owned(),
            tools: registered,
        });
        Ok(())
    }

    /// Calls `tool` with `args`: progress goes to the call's progress sink, cancellation of
    /// the call cancels the request (the connection stays), and the call timeout bounds it.
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<Value, ToolFailure> {
        let peer = self
            .link
            .lock()
            .as_ref()
            .map(|link| link.peer.clone())
            .ok_or_else(|| {
                ToolFailure::with_code(
                    toolrail_tools_core::tool_code!("MCP_UNAVAILABLE"),
                    format!(
                        "the MCP server `{}` is not connected; the call was not sent",
                        self.name
                    ),
                )
            })?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = args.as_object() {
            params = params.with_arguments(arguments.clone());
        }
        let handle = peer
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .map_err(|error| {
                ToolFailure::new(format!(
                    "the call could not be sent to `{}`: {error}",
                    self.name
                ))
            })?;
        let id = handle.id.clone();
        let mut progress = self.progress.subscribe(handle.progress_token.clone()).await;
        let forward = async {
            while let Some(update) = progress.next().await {
                ctx.progress(json!({
                    "progress": update.progress,
                    "total": update.total,
                    "message": update.message,
                }));
            }
            std::future::pending::<()>().await;
        };
        let cancel = |reason: &'static str| {
            let peer = peer.clone();
            let id = id.clone();
            async move {
                let param = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
                // A server that stopped reading must not hold the call past its end.
                let _ = tokio::time::timeout(Duration::from_secs(1), peer.notify_cancelled(param))
                    .await;
            }
        };
        tokio::select! {
            answer = handle.await_response() => {
                let answer = answer.map_err(|error| {
                    ToolFailure::new(format!("the MCP server `{}` did not answer: {error}", self.name))
                })?;
                serde_json::to_value(answer).map_err(|error| ToolFailure::new(error.to_string()))
            }
            () = tokio::time::sleep(self.config.call_timeout()) => {
                cancel("timed out").await;
                Err(ToolFailure::new(format!(
                    "the MCP server `{}` did not answer within {} ms; the request was cancelled",
                    self.name, self.config.call_timeout_ms
                )))
            }
            () = ctx.cancellation().cancelled() => {
                cancel("cancelled").await;
                Err(ToolFailure::new("cancelled; the MCP request was cancelled"))
            }
            () = forward => Err(ToolFailure::new("the progress stream ended")),
        }
    }

    /// Ends the server: its connection, its process group, its tools (which hold the
    /// server: leaving them would keep both alive, offered but dead). Its task ends too.
    fn end(&self) {
        self.stop.cancel();
        if let Some(link) = self.link.lock().take() {
            link.service.cancel();
            kill_group(link.group);
        }
        self.registry.remove_source(&self.source());
    }

    /// Ends the server and waits for its task.
    async fn stop(&self) {
        self.end();
        let tasks: Vec<_> = self.tasks.lock().drain(..).collect();
        for task in tasks {
            let _ = task.await;
        }
    }

    /// Ends the server without waiting (on drop).
    fn kill_now(&self) {
        self.end();
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

/// Kills a process group when dropped.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// SIGKILL to a server's whole process group: `npx` and the servers it starts included.
fn kill_group(group: Option<u32>) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    if let Some(pid) = group.and_then(|pid| i32::try_from(pid).ok()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Problems a running server causes (a list that could not be re-read, a tool the registry
/// refused) leave its state as it was; they are reported on stderr, which the embedder may
/// redirect.
fn tracing_note(server: &str, why: &str) {
    eprintln!("toolrail-mcp: server `{server}`: {why}");
}

impl Remote for Server {
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> toolrail_session_log::BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(Server::call(self, tool, args, ctx))
    }
}
