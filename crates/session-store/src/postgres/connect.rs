//! Opening a connection within a bound that covers the whole of it: the TCP connect *and*
//! the server's answer to the startup. tokio-postgres' `connect_timeout` bounds the TCP
//! connect alone, and a server whose postmaster is stopped accepts TCP into its backlog and
//! never answers the startup: a connect would wait as long as the pause.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;

use postgres::NoTls;

use super::*;

/// The whole attempt's bound when the URL gives no `connect_timeout`.
const DEFAULT_BOUND: Duration = Duration::from_secs(10);

/// Attempts a store keeps running at most, counting those whose callers gave up: an attempt
/// cannot be stopped from outside, so one that outlived its bound waits on its thread for
/// the server's answer (and closes what it gets). Past this many, a new attempt is refused
/// at once instead of leaving one more thread behind.
const RUNNING_MAX: usize = 16;

/// A connection's idle time before the kernel asks the server whether it is still there,
/// and how the asking goes on, when the URL says nothing of it: a server that vanished
/// (a host gone, a partition) is noticed within about 30 s, not the system's 2 hours.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;

/// Sent data left unacknowledged this long drops the connection (Linux `TCP_USER_TIMEOUT`),
/// unless the URL says otherwise.
const UNACKNOWLEDGED_MAX: Duration = Duration::from_secs(30);

/// Opens connections, each within the store's bound.
pub(super) struct Bounded {
    /// The whole attempt's bound: the URL's `connect_timeout` for each of its hosts.
    within: Duration,
    /// Attempts still running, including those their callers gave up on.
    running: Arc<AtomicUsize>,
}

impl Bounded {
    /// The bound `config` asks for, read as libpq reads `connect_timeout` (per host, the
    /// whole connection); 10 s per host when it gives none. `config` keeps the same value
    /// for its TCP connect, and gets keepalives unless it has its own.
    pub(super) fn for_config(config: &mut postgres::Config) -> Self {
        let per_host = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_BOUND);
        config.connect_timeout(per_host);
        if config.get_keepalives_interval().is_none() && config.get_keepalives_retries().is_none() {
            config
                .keepalives_idle(KEEPALIVE_IDLE)
                .keepalives_interval(KEEPALIVE_INTERVAL)
                .keepalives_retries(KEEPALIVE_RETRIES);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(UNACKNOWLEDGED_MAX);
        }
        let hosts = u32::try_from(config.get_hosts().len().max(1)).unwrap_or(1);
        Self {
            within: per_host.saturating_mul(hosts),
            running: Arc::default(),
        }
    }

    /// A new connection, or an error within the bound: the attempt runs on a thread of its
    /// own, which the caller stops waiting for once the bound has passed.
    pub(super) fn connect(
        &self,
        config: &postgres::Config,
        shown: &str,
    ) -> Result<Client, StoreError> {
        let failed = |message: String| StoreError::Database {
            path: PathBuf::from(shown),
            message,
        };
        if self.running.fetch_add(1, Ordering::SeqCst) >= RUNNING_MAX {
            self.running.fetch_sub(1, Ordering::SeqCst);
            return Err(failed(format!(
                "{RUNNING_MAX} connection attempts are still waiting for the server's answer past their bound ({:.1} s): it accepts connections but does not answer them (stopped, or overloaded); try again once it answers",
                self.within.as_secs_f64()
            )));
        }
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let attempt = config.clone();
        let running = Arc::clone(&self.running);
        let spawned = std::thread::Builder::new()
            .name("postgres connect".to_owned())
            .spawn(move || {
                let connected = attempt.connect(NoTls);
                running.fetch_sub(1, Ordering::SeqCst);
                // A caller that gave up is gone: the connection is dropped here, closed.
                let _ = answer.send(connected);
            });
        if let Err(error) = spawned {
            self.running.fetch_sub(1, Ordering::SeqCst);
            return Err(failed(format!(
                "no thread could be started to connect on: {error}"
            )));
        }
        match answered.recv_timeout(self.within) {
            Ok(Ok(client)) => Ok(client),
            // The `postgres` error's own text is only its kind; the causes say what.
            Ok(Err(error)) => Err(failed(error_chain(&error))),
            Err(RecvTimeoutError::Timeout) => Err(failed(format!(
                "the connection was not made within {:.1} s: the server (or the network) accepted it but did not finish its startup — a stopped or overloaded server; try again later, or raise `connect_timeout` in the URL",
                self.within.as_secs_f64()
            ))),
            Err(RecvTimeoutError::Disconnected) => Err(failed(
                "the connection attempt ended without an answer (its thread stopped)".to_owned(),
            )),
        }
    }
}
