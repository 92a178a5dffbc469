//! `McpServers`: a session's configured servers, as the embedder holds them — started
//! together, asked for their state, shut down together (or killed when dropped).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use toolrail_tools_core::Registry;

use super::{Server, ServerState};
use crate::config::{McpConfig, Start};
use crate::naming;
use crate::stderr::StderrLog;

/// What an embedder gives the servers of a session besides their configuration.
#[derive(Clone, Debug, Default)]
pub struct McpOptions {
    /// Where each server's whole stderr is written (`<folder>/<server>.stderr.log`, one
    /// header line per connection); without it only the last 8 KiB are kept, in memory.
    pub stderr_dir: Option<PathBuf>,
}

/// Every configured server of a session.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
}

impl McpServers {
    /// Starts the configured servers against `registry`: the ones that start with the
    /// session are waited for (each up to its startup timeout), the lazy ones connect in
    /// the background. Their stderr is kept in memory only ([`McpServers::start_with`]
    /// writes it to files too).
    pub async fn start(config: &McpConfig, registry: &Registry) -> Self {
        Self::start_with(config, registry, &McpOptions::default()).await
    }

    /// [`McpServers::start`] with the embedder's [`McpOptions`].
    pub async fn start_with(config: &McpConfig, registry: &Registry, options: &McpOptions) -> Self {
        let servers: Vec<Arc<Server>> = config
            .servers
            .iter()
            .map(|(name, server)| {
                let stderr = options
                    .stderr_dir
                    .as_ref()
                    .map(|folder| folder.join(format!("{}.stderr.log", naming::file_name(name))));
                Server::new(
                    name.clone(),
                    server.clone(),
                    registry.clone(),
                    StderrLog::new(stderr),
                )
            })
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

    /// The file a server's whole stderr is written to, when the options named a folder.
    pub fn stderr_file(&self, name: &str) -> Option<PathBuf> {
        self.find(name)?.stderr.file().map(PathBuf::from)
    }

    /// Whether a server runs as the root of a process tree that ends whole (its own PID
    /// namespace), or only leads a process group (where namespaces cannot be made: a
    /// descendant that calls `setsid` may then outlive it); `None` before it started.
    pub fn contained(&self, name: &str) -> Option<bool> {
        self.find(name)?
            .link
            .lock()
            .as_ref()
            .map(|link| link.contained)
    }

    fn find(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|server| server.name == name)
    }

    /// Ends every server and its processes, together, the way MCP asks of a stdio client:
    /// its stdin is closed, it has 2 s to end by itself (to flush what it keeps), then 1 s
    /// after SIGTERM, then it is killed. Their tools leave the registry.
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.servers.iter().map(|server| server.stop())).await;
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        for server in &self.servers {
            server.kill_now();
        }
    }
}
