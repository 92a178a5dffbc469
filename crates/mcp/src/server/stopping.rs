//! How a server ends: gracefully, the way MCP asks of a stdio client (its stdin closed, a
//! grace, SIGTERM, a grace, SIGKILL), or at once when it is still starting or the servers
//! are dropped; a second stop waits for the first.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{EXIT_GRACE, Server, ServerState, TERM_GRACE};
use crate::process::kill_group;

impl Server {
    /// Ends the server: its connection, its process group, its tools (which hold the
    /// server: leaving them would keep both alive, offered but dead). Its task ends too.
    pub(super) fn end(&self) {
        self.stop.cancel();
        if let Some(link) = self.link.lock().take() {
            link.service.cancel();
            kill_group(link.group);
        }
        self.registry.remove_source(&self.source());
    }

    /// Ends the server the MCP way — its stdin closed, time to end by itself, then SIGTERM,
    /// then SIGKILL — and waits for its task; a server still starting is ended at once.
    pub(super) async fn stop(&self) {
        if self.stopping.swap(true, Ordering::AcqRel) {
            // Another caller is stopping it: its stop is this one's.
            self.halted.cancelled().await;
            return;
        }
        self.closing.cancel();
        let tasks: Vec<_> = self.tasks.lock().drain(..).collect();
        let limit = EXIT_GRACE + TERM_GRACE + Duration::from_secs(1);
        for mut task in tasks {
            if tokio::time::timeout(limit, &mut task).await.is_err() {
                self.end();
                let _ = task.await;
            }
        }
        self.end();
        // A server whose state is read after the stop does not look running; one that was
        // disabled or withdrawn keeps saying why.
        let live = matches!(
            *self.state.lock(),
            ServerState::Starting | ServerState::Running { .. } | ServerState::Restarting { .. }
        );
        if live {
            self.set_state(ServerState::Withdrawn {
                why: "stopped: its session ended".to_owned(),
            });
        }
        self.halted.cancel();
    }

    /// Fires when a graceful stop is asked for before the connection is serving; never
    /// once it is (the serving loop then stops it gracefully).
    pub(super) async fn closing_before_serving(&self) {
        self.closing.cancelled().await;
        if self.serving.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
    }

    /// Ends the server without waiting (on drop).
    pub(super) fn kill_now(&self) {
        self.end();
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

/// Kills a process group when dropped.
pub(super) struct GroupGuard(pub(super) Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}
