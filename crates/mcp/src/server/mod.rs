//! The servers: each a child process — the root of a process tree that ends whole — spoken
//! to with `rmcp` over the link of `wire.rs`, its tools registered under `mcp(<server>)` and
//! re-registered when it says its list changed (notifications coalesced; the current
//! snapshot never changes, the next request sees the new list), restarted with backoff when
//! it crashes and withdrawn after its restarts run out, and ended — with everything it
//! started — at shutdown. Its stderr is kept (`stderr.rs`).

mod listing;
mod servers;
mod stopping;

pub use servers::{McpOptions, McpServers};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{ProgressNotificationParam, ProtocolVersion, ServerNotification};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningServiceCancellationToken,
    Subscription,
};
use rmcp::{ClientHandler, Peer, RoleClient};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::ToolSource;
use toolrail_tools_core::{Registry, ToolContext, ToolFailure, ToolSpec};

use crate::config::ServerConfig;
use crate::process::{Spawned, kill_group};
use crate::stderr::StderrLog;
use crate::tool::Remote;
use crate::wire::{Book, SkippedTool, Wire};
use stopping::GroupGuard;

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
        /// The protocol revision the connection speaks, as negotiated (`2026-07-28`,
        /// `2025-11-25`, …).
        protocol: String,
        /// Its offered tools, by their names in the session (`mcp__<server>__<tool>`).
        tools: Vec<String>,
        /// Tools it listed that are not offered, each with why (a definition that cannot be
        /// read, a schema that does not compile, a name another tool holds); the rest are.
        skipped: Vec<SkippedTool>,
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
    /// Its tools withdrawn: it could not be started, crashed past its restarts, or was
    /// stopped ([`McpServers::shutdown`]).
    Withdrawn {
        /// How the last connection failed or ended, and after how many restarts; or that
        /// it was stopped.
        why: String,
    },
}

/// How long a server whose stdin was closed has to end by itself before it is sent
/// SIGTERM (the MCP stdio shutdown: close its input, wait, SIGTERM, then SIGKILL).
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long it has after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(1);

/// How long a connection must last for its server's restart count to start again.
const STABLE: Duration = Duration::from_secs(60);

/// How long after a `tools/list_changed` the list is read: more notifications in this time
/// are answered by the same reading.
const SETTLE: Duration = Duration::from_millis(50);

/// The least time between two readings of a server's list: a server that floods
/// notifications is read at most this often.
const RELIST_SPACING: Duration = Duration::from_millis(250);

/// The live link to a running server.
pub(crate) struct Link {
    pub(crate) peer: Peer<RoleClient>,
    service: RunningServiceCancellationToken,
    /// The server's process group (its leader's pid).
    group: Option<u32>,
    /// What the link knows of its requests.
    pub(crate) book: Arc<Book>,
    /// Whether the server's process tree ends whole (see [`McpServers::contained`]).
    contained: bool,
}

pub(crate) struct Server {
    pub(crate) name: String,
    pub(crate) config: ServerConfig,
    registry: Registry,
    state: Mutex<ServerState>,
    pub(crate) link: Mutex<Option<Link>>,
    pub(crate) progress: ProgressDispatcher,
    pub(crate) stderr: StderrLog,
    /// Ends the connection at once (its process group killed).
    stop: CancellationToken,
    /// Ends the connection the way MCP asks of a stdio client: stdin closed, a grace to end
    /// by itself, then SIGTERM, then SIGKILL.
    closing: CancellationToken,
    /// The connection is past its start (listed, subscribed): a stop is graceful from now
    /// on; before, it ends the server at once.
    serving: AtomicBool,
    /// A stop is under way; `halted` fires once it is over, for a second caller to wait on.
    stopping: AtomicBool,
    halted: CancellationToken,
    settled: Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    relisted: AtomicU64,
    first_try_over: AtomicBool,
}

/// Receives the server's notifications.
struct Client {
    progress: ProgressDispatcher,
    /// Woken by `tools/list_changed`; a wake-up not yet taken stands for any number of
    /// notifications, which is what coalesces them.
    changed: Arc<Notify>,
}

/// The subscription's next notification; `None` once it ended. Never ready without one.
async fn next_notification(subscription: &mut Option<Subscription>) -> Option<ServerNotification> {
    match subscription {
        Some(subscription) => subscription.next().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// The newest revision rmcp speaks is asked for first (`server/discover`, the stateless
/// 2026-07-28 revision); a server that does not know it is met with the `initialize`
/// handshake of the newest revision that has one, and its own answer settles the version.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
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
        self.changed.notify_one();
    }
}

impl Server {
    fn new(name: String, config: ServerConfig, registry: Registry, stderr: StderrLog) -> Arc<Self> {
        Arc::new(Self {
            name,
            config,
            registry,
            state: Mutex::new(ServerState::Starting),
            link: Mutex::new(None),
            progress: ProgressDispatcher::new(),
            stderr,
            stop: CancellationToken::new(),
            closing: CancellationToken::new(),
            serving: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            halted: CancellationToken::new(),
            settled: Notify::new(),
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
            if self.closing.is_cancelled() {
                return;
            }
            let began = tokio::time::Instant::now();
            let outcome = tokio::select! {
                outcome = self.connect_and_serve() => outcome,
                () = self.stop.cancelled() => return,
                // A server still starting (spawned, shaking hands, listing) is ended at
                // once: the connection is dropped, and its process group with it.
                () = self.closing_before_serving() => return,
            };
            self.serving.store(false, Ordering::Release);
            self.registry.remove_source(&self.source());
            *self.link.lock() = None;
            if self.stop.is_cancelled() || self.closing.is_cancelled() {
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
                () = self.closing.cancelled() => return,
            }
        }
    }

    /// One connection, from spawn to its end; says how it ended (with what the server last
    /// wrote to its stderr).
    async fn connect_and_serve(self: &Arc<Self>) -> String {
        let mut spawned = match Spawned::start(&self.config) {
            Ok(spawned) => spawned,
            Err(why) => return why,
        };
        let group = spawned.pid;
        // Whatever ends this connection — a failed handshake, a crash, a stop while it
        // starts — ends the server's whole process tree with it.
        let mut guard = GroupGuard(group);
        let draining = spawned.stderr.take().map(|stderr| {
            let server = Arc::clone(self);
            let header = format!(
                "{} started, pid {}",
                self.name,
                group.map_or_else(|| "?".to_owned(), |pid| pid.to_string())
            );
            tokio::spawn(async move { server.stderr.drain(stderr, &header).await })
        });
        let ended = self.serve(&mut spawned).await;
        let mut gone = false;
        if self.closing.is_cancelled() {
            // Its grace was spent waiting for its stdout to end, which it does as it exits.
            gone = spawned
                .end_gracefully(Duration::from_millis(200), TERM_GRACE)
                .await;
        }
        if gone && spawned.contained {
            // The tree ended whole with its root, which is reaped: its group id may be
            // another's by now, so it is not signalled.
            guard.0 = None;
        } else {
            kill_group(group);
        }
        if let Some(mut draining) = draining {
            // What it wrote last, read before its words are quoted; a descendant holding
            // the pipe open (where no process tree could be made) does not hold the
            // connection's end up.
            if tokio::time::timeout(Duration::from_millis(500), &mut draining)
                .await
                .is_err()
            {
                draining.abort();
                tracing_note(&self.name, "its stderr was still open after it ended");
            }
        }
        format!("{ended}{}", self.stderr.quoted())
    }

    /// The handshake, the listing, then serving until the connection ends.
    async fn serve(self: &Arc<Self>, spawned: &mut Spawned) -> String {
        let book = Arc::new(Book::default());
        let (Some(stdout), Some(stdin)) = (spawned.stdout.take(), spawned.stdin.take()) else {
            return "the server's stdin or stdout could not be had".to_owned();
        };
        let wire = Wire::new(
            stdout,
            stdin,
            self.config.max_message_bytes,
            Arc::clone(&book),
        );
        let stdin = wire.stdin_closer();
        let changed = Arc::new(Notify::new());
        let client = Client {
            progress: self.progress.clone(),
            changed: Arc::clone(&changed),
        };
        let service = match tokio::time::timeout(
            self.config.startup_timeout(),
            client.serve_with_lifecycle(wire, lifecycle()),
        )
        .await
        {
            Ok(Ok(service)) => service,
            Ok(Err(error)) => return format!("the MCP handshake failed: {error}"),
            Err(_) => {
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
        let protocol = service
            .peer_info()
            .map(|info| info.protocol_version.to_string())
            .unwrap_or_else(|| "unknown".to_owned());
        let peer = service.peer().clone();
        *self.link.lock() = Some(Link {
            peer: peer.clone(),
            service: service.cancellation_token(),
            group: spawned.pid,
            book: Arc::clone(&book),
            contained: spawned.contained,
        });
        if let Err(why) = self
            .list_and_register(&peer, &book, &version, &protocol)
            .await
        {
            return why;
        }
        self.serving.store(true, Ordering::Release);
        // On the stateless revision a server tells of changes only to a subscriber. The
        // tools are offered first (a server slow to acknowledge holds no session up), and
        // the list is read once more after the acknowledgment, so a change made between
        // the two (by a call through it, say) is not lost.
        let stateless = service
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize());
        let mut subscription = if stateless {
            tokio::select! {
                subscription = self.subscribe(&peer) => subscription,
                // The loop below sees the stop at once.
                () = self.closing.cancelled() => None,
            }
        } else {
            None
        };
        if subscription.is_some() {
            changed.notify_one();
        }
        let waiting = service.waiting();
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                () = self.closing.cancelled() => {
                    // Its stdin closed is a stdio server's cue to end; what it still writes
                    // is read (a server whose stdout is gone fails its last writes), until
                    // it ends or its grace does.
                    stdin.close().await;
                    let _ = tokio::time::timeout(EXIT_GRACE, &mut waiting).await;
                    return "its stdin was closed to stop it".to_owned();
                }
                told = next_notification(&mut subscription) => match told {
                    Some(ServerNotification::ToolListChangedNotification(_)) => changed.notify_one(),
                    Some(_) => {}
                    None => {
                        tracing_note(&self.name, "the server ended its notification subscription; tool changes are no longer followed");
                        subscription = None;
                    }
                },
                ended = &mut waiting => {
                    return match ended {
                        Ok(reason) => format!("the connection ended ({reason:?})"),
                        Err(error) => format!("the connection failed: {error}"),
                    };
                }
                () = changed.notified() => {
                    // Notifications that come while it settles, or while the list is read,
                    // leave one wake-up: a flood is read a few times, not once each.
                    tokio::time::sleep(SETTLE).await;
                    match self.list_and_register(&peer, &book, &version, &protocol).await {
                        Ok(()) => {
                            self.relisted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => tracing_note(&self.name, &why),
                    }
                    tokio::time::sleep(RELIST_SPACING.saturating_sub(SETTLE)).await;
                }
            }
        }
    }
}

/// Problems a running server causes (a list that could not be re-read, a tool that is not
/// offered) leave its state as it was; they go to `tracing` (the state carries the skipped
/// tools too), never straight to a terminal another part of the program may own.
fn tracing_note(server: &str, why: &str) {
    tracing::warn!(server, "MCP server: {why}");
}

impl Remote for Server {
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: &'a serde_json::Value,
        ctx: &'a ToolContext,
        spec: &'a ToolSpec,
    ) -> toolrail_session_log::BoxFuture<'a, Result<serde_json::Value, ToolFailure>> {
        Box::pin(crate::call::call(self, tool, args, ctx, spec))
    }
}
