//! The PostgreSQL store: the sessions of a fleet of workers in one database, one row per
//! event keyed by (session, seq) with the same envelope as a JSONL line, large values in
//! their own table by content hash, a group of events per transaction. Migrations
//! (`migrations.rs`) run on connect; leases are `lease.rs`, the work queue `queue.rs`, where
//! a session stands in it `standing.rs`, a session's writer connection `session.rs`, and
//! opening a connection within a bound that covers its startup `connect.rs`.
//!
//! Leases: a worker that drives a session holds its lease — a row with the owner, a fencing
//! token and an expiry in the database's clock. Every append of a leased log checks, in its
//! own transaction, that the token is still the session's: once another worker took the
//! lease over (after it expired), the old owner's next append is refused, so a paused or
//! partitioned worker can never write after a takeover.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use postgres::Client;

mod connect;
mod lease;
mod migrations;
mod queue;
mod session;
mod standing;

pub use lease::Lease;
use lease::*;
pub use queue::{Claimed, Finish};
use session::*;
use standing::standing_of;
pub use standing::{SessionSummary, Standing};

use crate::jsonl::first_event;
use crate::spill::{BlobShelf, DEFAULT_BLOB_CAP, load_stored};
use crate::writer::{Group, Medium, Writers};
use crate::{
    Durability, Opened, SessionStore, StoreError, StoreLog, check_session_id, checked_rows,
    row_event,
};
use toolrail_session_log::SessionId;
use toolrail_session_log::SinkError;
use toolrail_session_log::error_chain;
use toolrail_session_log::{Event, event::SessionStart};

/// A database of sessions.
#[derive(Clone)]
pub struct PostgresStore {
    /// The URL's settings, with the timeouts every connection gets.
    config: postgres::Config,
    /// The URL without its password, for messages.
    shown: String,
    durability: Durability,
    blob_cap: usize,
    idle: Arc<Idle>,
    writers: Arc<Writers>,
    /// Opens connections within a bound that covers their startup too.
    connecting: Arc<connect::Bounded>,
}

/// Connections kept between the store's own calls (claims, reads, leases) and handed back
/// by logs that close cleanly: a connection is a server process, and a worker making one
/// per call spent most of a short session on them. Each remembers when it went idle.
#[derive(Default)]
struct Idle(parking_lot::Mutex<Vec<(Client, std::time::Instant)>>);

impl Idle {
    fn put(&self, client: Client) {
        let mut idle = self.0.lock();
        if idle.len() < IDLE_MAX {
            idle.push((client, std::time::Instant::now()));
        }
    }
}

/// A connection idle longer than this is checked with a round trip before it is used (the
/// server, a proxy or a restart may have closed it, which the client learns only by use).
const IDLE_CHECK_AFTER: Duration = Duration::from_secs(2);

/// Idle connections kept at most.
const IDLE_MAX: usize = 8;

impl Drop for Idle {
    fn drop(&mut self) {
        // A client owns a runtime of its own, which must not be dropped on a thread that
        // runs an async runtime; the last store may be dropped on one.
        let clients: Vec<Client> = std::mem::take(self.0.get_mut())
            .into_iter()
            .map(|(client, _)| client)
            .collect();
        if !clients.is_empty() {
            let _ = std::thread::Builder::new()
                .name("postgres close".to_owned())
                .spawn(move || drop(clients));
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.shown)
            .field("durability", &self.durability)
            .finish()
    }
}

/// The log of a PostgreSQL session.
pub type PostgresLog = StoreLog;

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`) and brings its
    /// schema up to date.
    pub fn connect(url: &str, durability: Durability) -> Result<Self, StoreError> {
        off_runtime(|| Self::connect_here(url, durability))
    }

    fn connect_here(url: &str, durability: Durability) -> Result<Self, StoreError> {
        let shown = without_password(url);
        let mut config: postgres::Config = url.parse().map_err(|error| StoreError::Database {
            path: PathBuf::from(&shown),
            message: format!("the connection string cannot be read: {error}"),
        })?;
        // Every connection: no transaction left open by a paused or stuck worker for more
        // than 5 s (it would hold lease or queue rows), and no statement — a lock wait
        // included — longer than 30 s, the last bound on a wait the calls do not set
        // tighter themselves.
        let options = format!(
            "{} -c idle_in_transaction_session_timeout=5000 -c statement_timeout=30000",
            config.get_options().unwrap_or_default()
        );
        config.options(options.trim());
        if config.get_application_name().is_none() {
            // What `pg_stat_activity` shows; a session's log names its session instead.
            config.application_name("toolrail");
        }
        let connecting = connect::Bounded::for_config(&mut config);
        let store = Self {
            config,
            shown,
            durability,
            blob_cap: DEFAULT_BLOB_CAP,
            idle: Arc::default(),
            writers: Arc::default(),
            connecting: Arc::new(connecting),
        };
        let mut client = store.client()?;
        store.migrate(&mut client)?;
        Ok(store)
    }

    /// The durability mode its logs are written in.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Values (and details) whose compact JSON is longer than `bytes` go to `blobs`.
    pub fn with_blob_cap(mut self, bytes: usize) -> Self {
        self.blob_cap = bytes;
        self
    }

    /// How many writer threads the store's open sessions share (default
    /// [`DEFAULT_WRITERS`](crate::DEFAULT_WRITERS), at most
    /// [`MAX_WRITERS`](crate::MAX_WRITERS)).
    pub fn with_writers(mut self, threads: usize) -> Self {
        self.writers = Arc::new(Writers::new(threads));
        self
    }

    /// A connection: an idle one when there is one, else a new one.
    pub(super) fn client(&self) -> Result<Client, StoreError> {
        loop {
            let idle = self.idle.0.lock().pop();
            let Some((mut client, since)) = idle else {
                return self.connecting.connect(&self.config, &self.shown);
            };
            let usable = !client.is_closed()
                && (since.elapsed() < IDLE_CHECK_AFTER
                    || client.is_valid(Duration::from_secs(2)).is_ok());
            if usable {
                return Ok(client);
            }
        }
    }

    /// Runs `work` on a connection, which goes back to the idle ones when `work` succeeded
    /// (after a failure its state is not known: it is closed).
    pub(super) fn with_client<T>(
        &self,
        work: impl FnOnce(&mut Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client()?;
        let result = work(&mut client);
        // An answer such as "leased" or "fenced" leaves the connection as good as before; a
        // database error leaves it in a state not known, and it is closed.
        if !matches!(result, Err(StoreError::Database { .. })) {
            self.idle.put(client);
        }
        result
    }

    pub(super) fn failed(&self, error: &dyn std::error::Error) -> StoreError {
        StoreError::Database {
            path: PathBuf::from(&self.shown),
            // The `postgres` error's own text is only its kind ("db error"); the server's
            // message and code are in its source.
            message: error_chain(error),
        }
    }

    pub(super) fn name(&self, id: &SessionId) -> String {
        format!("{}#{}", self.shown, id.as_str())
    }

    pub(super) fn create_with(
        &self,
        start: SessionStart,
        fence: Option<i64>,
    ) -> Result<PostgresLog, StoreError> {
        off_runtime(|| self.create_here(start, fence))
    }

    fn create_here(
        &self,
        start: SessionStart,
        fence: Option<i64>,
    ) -> Result<PostgresLog, StoreError> {
        check_session_id(&start.session_id)?;
        let id = start.session_id.clone();
        let mut client = self.client()?;
        let first = first_event(start);
        let line = serde_json::to_string(&first).map_err(|error| self.failed(&error))?;
        // session/start is durable before create returns, whatever the mode or the server's
        // default; a leased create is fenced like any group.
        let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
        transaction
            .batch_execute("SET LOCAL synchronous_commit = on")
            .map_err(|error| self.failed(&error))?;
        if let Some(token) = fence {
            let held = lease_token(&mut transaction, id.as_str(), RowLock::Share)
                .map_err(|error| self.failed(&error))?;
            if held != Some(token) {
                return Err(StoreError::Fenced {
                    session: id.as_str().to_owned(),
                    token,
                });
            }
        }
        let inserted = transaction
            .execute(
                "INSERT INTO events (session, seq, line, lease_token) VALUES ($1, 1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&id.as_str(), &line, &fence],
            )
            .map_err(|error| self.failed(&error))?;
        transaction.commit().map_err(|error| self.failed(&error))?;
        if inserted == 0 {
            return Err(StoreError::Exists {
                path: PathBuf::from(self.name(&id)),
            });
        }
        self.start_log(client, &id, 2, fence)
    }

    pub(super) fn open_with(
        &self,
        id: &SessionId,
        fence: Option<i64>,
    ) -> Result<Opened<PostgresLog>, StoreError> {
        off_runtime(|| self.open_here(id, fence))
    }

    fn open_here(
        &self,
        id: &SessionId,
        fence: Option<i64>,
    ) -> Result<Opened<PostgresLog>, StoreError> {
        check_session_id(id)?;
        let mut client = self.client()?;
        let events = self.read_with(&mut client, id)?;
        let next_seq = checked_rows(&PathBuf::from(self.name(id)), &events)?;
        Ok(Opened {
            log: self.start_log(client, id, next_seq, fence)?,
            events,
            torn_bytes_dropped: 0,
        })
    }

    /// Every event of session `id`, in `seq` order, without opening a log (empty when the
    /// database holds no such session): what a worker reads to decide whether a session it
    /// claimed is new or to be resumed.
    pub fn read(&self, id: &SessionId) -> Result<Vec<Event>, StoreError> {
        check_session_id(id)?;
        off_runtime(|| self.with_client(|client| self.read_with(client, id)))
    }

    /// `(seq, lease token)` of every event of session `id`: which lease wrote what (`None`
    /// for an unleased write).
    pub fn written_under(&self, id: &SessionId) -> Result<Vec<(u64, Option<i64>)>, StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let rows = client
                    .query(
                        "SELECT seq, lease_token FROM events WHERE session = $1 ORDER BY seq",
                        &[&id.as_str()],
                    )
                    .map_err(|error| self.failed(&error))?;
                Ok(rows
                    .iter()
                    .map(|row| {
                        let seq: i64 = row.get(0);
                        (u64::try_from(seq).unwrap_or_default(), row.get(1))
                    })
                    .collect())
            })
        })
    }

    pub(super) fn read_with(
        &self,
        client: &mut Client,
        id: &SessionId,
    ) -> Result<Vec<Event>, StoreError> {
        let name = PathBuf::from(self.name(id));
        let rows = client
            .query(
                "SELECT seq, line FROM events WHERE session = $1 ORDER BY seq",
                &[&id.as_str()],
            )
            .map_err(|error| self.failed(&error))?;
        let mut events: Vec<Event> = Vec::with_capacity(rows.len());
        for (number, row) in rows.iter().enumerate() {
            let line = row.get::<_, &str>(1);
            let mut event = row_event(&name, number, row.get(0), line, events.len() as u64 + 1)?;
            let shelf = ReadShelf {
                client: std::cell::RefCell::new(&mut *client),
                failed: std::cell::RefCell::new(None),
            };
            let loaded = load_stored(&mut event, line.as_bytes(), &shelf);
            if let Some(error) = shelf.failed.into_inner() {
                // The database failed while reading a large value: not a bad log.
                return Err(self.failed(&error));
            }
            loaded.map_err(|why| StoreError::Corrupt {
                path: name.clone(),
                line: number + 1,
                why,
            })?;
            events.push(event);
        }
        Ok(events)
    }

    pub(super) fn start_log(
        &self,
        mut client: Client,
        id: &SessionId,
        next_seq: u64,
        fence: Option<i64>,
    ) -> Result<PostgresLog, StoreError> {
        // Strict waits for every commit to be flushed whatever the server's default says;
        // the other modes commit without waiting and flush when a group asks. (A group left
        // open by a paused worker is ended by the server: every connection has an
        // idle-in-transaction limit, so it cannot hold a lease row.)
        let setting = if self.durability == Durability::Strict {
            "on"
        } else {
            "off"
        };
        // The connection is named for its session (`pg_stat_activity` shows whose log it
        // is); the id is checked to letters, digits, `.`, `_` and `-`, safe in a literal.
        client
            .batch_execute(&format!(
                "SET synchronous_commit = {setting}; SET application_name = 'toolrail-log {}'",
                id.as_str()
            ))
            .map_err(|error| self.failed(&error))?;
        let medium = PostgresSession {
            client: Some(client),
            idle: Arc::clone(&self.idle),
            healthy: true,
            session: id.as_str().to_owned(),
            durability: self.durability,
            fence,
        };
        Ok(StoreLog::start(
            &self.writers,
            medium,
            self.name(id),
            next_seq,
            self.durability,
            self.blob_cap,
        ))
    }
}

impl SessionStore for PostgresStore {
    type Log = PostgresLog;

    fn create(&self, start: SessionStart) -> Result<PostgresLog, StoreError> {
        self.create_with(start, None)
    }

    fn open(&self, id: &SessionId) -> Result<Opened<PostgresLog>, StoreError> {
        // Unleased writes beside a live lease's would interleave with its holder's: a
        // session a worker holds is opened through its lease, or once the lease is gone.
        off_runtime(|| self.refuse_if_leased(id))?;
        self.open_with(id, None)
    }
}

/// Runs `work` on a thread of its own. The `postgres` client drives its connection with a
/// runtime of its own, which must not be entered — or dropped — on a thread that runs an
/// async runtime, and store calls come from async code. The writer thread is such a thread
/// of its own already.
fn off_runtime<T: Send>(
    work: impl FnOnce() -> Result<T, StoreError> + Send,
) -> Result<T, StoreError> {
    std::thread::scope(|scope| {
        scope.spawn(work).join().unwrap_or_else(|_| {
            Err(StoreError::Database {
                path: PathBuf::from("postgres"),
                message: "the database call panicked".to_owned(),
            })
        })
    })
}

/// The connection as shown in messages: user, hosts, ports and database only — never a
/// password, whether in the URL's user part, its query, or a key-value string.
fn without_password(url: &str) -> String {
    use postgres::config::Host;
    let Ok(config) = url.parse::<postgres::Config>() else {
        return "postgres (a connection string that could not be read)".to_owned();
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres://{}@{}:{}/{}",
        config.get_user().unwrap_or_default(),
        hosts.join(","),
        ports.join(","),
        config.get_dbname().unwrap_or_default()
    )
}

/// Large values read back while a session is opened.
struct ReadShelf<'a> {
    client: std::cell::RefCell<&'a mut Client>,
    /// The database's error, when reading failed (a value that is not there is the log's
    /// fault instead, said in the `get` error).
    failed: std::cell::RefCell<Option<postgres::Error>>,
}

impl BlobShelf for ReadShelf<'_> {
    fn put(&mut self, digest: &str, _bytes: &[u8]) -> Result<(), String> {
        Err(format!("{digest}: a reading shelf stores nothing"))
    }

    fn get(&self, digest: &str) -> Result<Vec<u8>, String> {
        let read = self
            .client
            .borrow_mut()
            .query_opt("SELECT bytes FROM blobs WHERE digest = $1", &[&digest]);
        match read {
            Ok(Some(row)) => Ok(row.get(0)),
            Ok(None) => Err(format!(
                "the large value {digest} cannot be read: it is not in the database"
            )),
            Err(error) => {
                let said = format!("the large value {digest} cannot be read: {error}");
                *self.failed.borrow_mut() = Some(error);
                Err(said)
            }
        }
    }
}
