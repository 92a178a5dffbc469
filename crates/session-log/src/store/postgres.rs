//! The PostgreSQL store: the sessions of a fleet of workers in one database, one row per
//! event keyed by (session, seq) with the same envelope as a JSONL line, large values in
//! their own table by content hash, a group of events per transaction. Migrations live here
//! and run on connect.
//!
//! Leases: a worker that drives a session holds its lease — a row with the owner, a fencing
//! token and an expiry in the database's clock. Every append of a leased log checks, in its
//! own transaction, that the token is still the session's: once another worker took the
//! lease over (after it expired), the old owner's next append is refused, so a paused or
//! partitioned worker can never write after a takeover.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use postgres::{Client, NoTls};

use super::jsonl::first_event;
use super::spill::{BlobShelf, DEFAULT_BLOB_CAP, encode_stored, load_form};
use super::writer::Medium;
use super::{
    Durability, Opened, SessionStore, StoreError, StoreLog, check_session_id, checked_rows,
    error_chain, row_event,
};
use crate::event::{Event, SessionStart};
use crate::ids::SessionId;
use crate::sink::SinkError;

/// Each migration once, in order; the `toolrail_schema` table remembers how far a database
/// is. Appending a step is how the schema changes.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE events (
        session TEXT NOT NULL,
        seq BIGINT NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    );
    CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        bytes BYTEA NOT NULL
    );
    CREATE TABLE leases (
        session TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        token BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE sync_marks (n INTEGER);
",
    "
    CREATE TABLE work_queue (
        session TEXT PRIMARY KEY,
        payload TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'waiting',
        worker TEXT,
        claims INTEGER NOT NULL DEFAULT 0,
        updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX work_queue_waiting ON work_queue (updated_at) WHERE state = 'waiting';
",
    // Which lease wrote each event: the audit that shows no worker wrote after a takeover.
    "
    ALTER TABLE events ADD COLUMN lease_token BIGINT;
",
];

/// A key for `pg_advisory_lock`, so two workers connecting at once migrate one at a time.
const MIGRATION_LOCK: i64 = 0x746f_6f6c_7261_696c;

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

/// A worker's hold on a session: while its token is the session's, its appends go through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub session: SessionId,
    pub owner: String,
    /// Larger for every new holder; appends carry it.
    pub token: i64,
    pub ttl: Duration,
}

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
        // Every connection: a bounded wait to connect, and no transaction left open by a
        // paused or stuck worker for more than 5 s (it would hold lease or queue rows).
        let options = format!(
            "{} -c idle_in_transaction_session_timeout=5000",
            config.get_options().unwrap_or_default()
        );
        config
            .connect_timeout(Duration::from_secs(10))
            .options(options.trim());
        let store = Self {
            config,
            shown,
            durability,
            blob_cap: DEFAULT_BLOB_CAP,
            idle: Arc::default(),
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

    /// A connection: an idle one when there is one, else a new one.
    fn client(&self) -> Result<Client, StoreError> {
        loop {
            let idle = self.idle.0.lock().pop();
            let Some((mut client, since)) = idle else {
                return self
                    .config
                    .connect(NoTls)
                    .map_err(|error| self.failed(&error));
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
    fn with_client<T>(
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

    fn failed(&self, error: &dyn std::error::Error) -> StoreError {
        StoreError::Database {
            path: PathBuf::from(&self.shown),
            // The `postgres` error's own text is only its kind ("db error"); the server's
            // message and code are in its source.
            message: error_chain(error),
        }
    }

    fn name(&self, id: &SessionId) -> String {
        format!("{}#{}", self.shown, id.as_str())
    }

    fn migrate(&self, client: &mut Client) -> Result<(), StoreError> {
        let fail = |error: postgres::Error| self.failed(&error);
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
            .map_err(fail)?;
        let migrated = (|| {
            client.batch_execute(
                "CREATE TABLE IF NOT EXISTS toolrail_schema (version INTEGER NOT NULL)",
            )?;
            let version: i32 = client
                .query_opt("SELECT version FROM toolrail_schema", &[])?
                .map_or(0, |row| row.get(0));
            if usize::try_from(version).unwrap_or(usize::MAX) > MIGRATIONS.len() {
                return Ok(Some(version));
            }
            for (number, step) in MIGRATIONS.iter().enumerate() {
                let target = i32::try_from(number + 1).unwrap_or(i32::MAX);
                if target <= version {
                    continue;
                }
                let mut transaction = client.transaction()?;
                transaction.batch_execute(step)?;
                transaction.execute("DELETE FROM toolrail_schema", &[])?;
                transaction.execute(
                    "INSERT INTO toolrail_schema (version) VALUES ($1)",
                    &[&target],
                )?;
                transaction.commit()?;
            }
            Ok::<_, postgres::Error>(None)
        })();
        let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
        if let Some(newer) = migrated.map_err(fail)? {
            return Err(StoreError::Database {
                path: PathBuf::from(&self.shown),
                message: format!(
                    "the database's schema is version {newer}, written by a newer toolrail (this one knows {}); upgrade toolrail",
                    MIGRATIONS.len()
                ),
            });
        }
        unlocked.map_err(fail).map(drop)
    }

    /// Takes the lease of session `id` for `owner`, for `ttl`: granted when nobody holds
    /// it, when its holder's lease expired (a takeover: the token grows), or when `owner`
    /// holds it already — with a new token, which fences any log opened under the old one:
    /// give every worker process an owner name of its own, and keep a lease with `renew`.
    /// Refused, naming the holder, while another holder's lease runs.
    pub fn acquire(&self, id: &SessionId, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        off_runtime(|| self.acquire_here(id, owner, ttl))
    }

    fn acquire_here(
        &self,
        id: &SessionId,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        check_session_id(id)?;
        self.with_client(|client| {
            // A holder paused inside a group holds the lease row; a takeover waits for it at
            // most this long (the writer's own idle limit ends such a group soon after).
            let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
            transaction
                .batch_execute("SET LOCAL lock_timeout = '2s'")
                .map_err(|error| self.failed(&error))?;
            let granted = grant_lease(&mut transaction, id.as_str(), owner, ttl)
                .map_err(|error| self.failed(&error))?;
            transaction.commit().map_err(|error| self.failed(&error))?;
            match granted {
                Some(token) => Ok(Lease {
                    session: id.clone(),
                    owner: owner.to_owned(),
                    token,
                    ttl,
                }),
                None => {
                    let holder = client
                        .query_opt(
                            "SELECT owner, GREATEST(0, EXTRACT(EPOCH FROM expires_at - now()))::float8
                             FROM leases WHERE session = $1",
                            &[&id.as_str()],
                        )
                        .map_err(|error| self.failed(&error))?;
                    let (holder, left): (String, f64) =
                        holder.map_or_else(|| ("?".to_owned(), 0.0), |row| (row.get(0), row.get(1)));
                    Err(StoreError::Leased {
                        session: id.as_str().to_owned(),
                        owner: holder,
                        seconds_left: left,
                    })
                }
            }
        })
    }

    /// `Err(Leased)` when someone holds a live lease on session `id`.
    fn refuse_if_leased(&self, id: &SessionId) -> Result<(), StoreError> {
        self.with_client(|client| {
            let held = client
                .query_opt(
                    "SELECT owner, EXTRACT(EPOCH FROM expires_at - now())::float8
                     FROM leases WHERE session = $1 AND expires_at > now()",
                    &[&id.as_str()],
                )
                .map_err(|error| self.failed(&error))?;
            match held {
                None => Ok(()),
                Some(row) => Err(StoreError::Leased {
                    session: id.as_str().to_owned(),
                    owner: row.get(0),
                    seconds_left: row.get(1),
                }),
            }
        })
    }

    /// Extends `lease` by its ttl; `Err` when it is no longer the session's (taken over).
    pub fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        off_runtime(|| self.renew_here(lease))
    }

    fn renew_here(&self, lease: &Lease) -> Result<(), StoreError> {
        self.with_client(|client| {
            let millis = i64::try_from(lease.ttl.as_millis()).unwrap_or(i64::MAX);
            // A renewal that cannot finish within a third of the lease is of no use: it is
            // given up, and tried again, well before the lease runs out.
            let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
            transaction
                .batch_execute(&format!(
                    "SET LOCAL statement_timeout = {}",
                    (millis / 3).max(1)
                ))
                .map_err(|error| self.failed(&error))?;
            let renewed = transaction
                .execute(
                    "UPDATE leases SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
                     WHERE session = $1 AND token = $2",
                    &[&lease.session.as_str(), &lease.token, &millis],
                )
                .map_err(|error| self.failed(&error))?;
            if renewed == 1 {
                transaction.commit().map_err(|error| self.failed(&error))
            } else {
                Err(self.fenced(lease))
            }
        })
    }

    /// Gives the lease up (its session may be taken at once).
    pub fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        off_runtime(|| self.release_here(lease))
    }

    fn release_here(&self, lease: &Lease) -> Result<(), StoreError> {
        self.with_client(|client| {
            expire_lease(client, lease)
                .map_err(|error| self.failed(&error))
                .map(drop)
        })
    }

    fn fenced(&self, lease: &Lease) -> StoreError {
        StoreError::Fenced {
            session: lease.session.as_str().to_owned(),
            token: lease.token,
        }
    }

    /// Creates session `start` under `lease` (which must be for it).
    pub fn create_leased(
        &self,
        start: SessionStart,
        lease: &Lease,
    ) -> Result<PostgresLog, StoreError> {
        self.create_with(start, Some(lease.token))
    }

    /// Opens session `id` under `lease`: every append checks the lease is still held.
    pub fn open_leased(&self, lease: &Lease) -> Result<Opened<PostgresLog>, StoreError> {
        self.open_with(&lease.session, Some(lease.token))
    }

    fn create_with(
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

    fn open_with(
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

    fn read_with(&self, client: &mut Client, id: &SessionId) -> Result<Vec<Event>, StoreError> {
        let name = PathBuf::from(self.name(id));
        let rows = client
            .query(
                "SELECT seq, line FROM events WHERE session = $1 ORDER BY seq",
                &[&id.as_str()],
            )
            .map_err(|error| self.failed(&error))?;
        let mut events: Vec<Event> = Vec::with_capacity(rows.len());
        for (number, row) in rows.iter().enumerate() {
            let mut event = row_event(
                &name,
                number,
                row.get(0),
                row.get::<_, &str>(1),
                events.len() as u64 + 1,
            )?;
            let shelf = ReadShelf {
                client: std::cell::RefCell::new(&mut *client),
            };
            load_form(&mut event, &shelf).map_err(|why| StoreError::Corrupt {
                path: name.clone(),
                line: number + 1,
                why,
            })?;
            events.push(event);
        }
        Ok(events)
    }

    fn start_log(
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
        client
            .batch_execute(&format!("SET synchronous_commit = {setting}"))
            .map_err(|error| self.failed(&error))?;
        let medium = PostgresSession {
            client: Some(client),
            idle: Arc::clone(&self.idle),
            healthy: true,
            session: id.as_str().to_owned(),
            durability: self.durability,
            blob_cap: self.blob_cap,
            fence,
        };
        Ok(StoreLog::start(
            medium,
            self.name(id),
            next_seq,
            self.durability,
        ))
    }
}

/// A session a worker claimed from the queue: its lease, and what it is to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub lease: Lease,
    /// What the enqueuer put there (a scenario, a prompt and settings).
    pub payload: String,
    /// How many times it was claimed before (0 for a first claim; more after takeovers).
    pub earlier_claims: i32,
}

impl PostgresStore {
    /// Puts session `id` in the queue with `payload`, waiting for a worker; `Exists` when
    /// the queue has (or had) a session of that name.
    pub fn enqueue(&self, id: &SessionId, payload: &str) -> Result<(), StoreError> {
        check_session_id(id)?;
        off_runtime(|| {
            self.with_client(|client| {
                let queued = client
                    .execute(
                        "INSERT INTO work_queue (session, payload) VALUES ($1, $2)
                         ON CONFLICT DO NOTHING",
                        &[&id.as_str(), &payload],
                    )
                    .map_err(|error| self.failed(&error))?;
                if queued == 0 {
                    return Err(StoreError::Exists {
                        path: PathBuf::from(self.name(id)),
                    });
                }
                Ok(())
            })
        })
    }

    /// Claims the oldest session waiting for work — or one whose worker's lease ran out (a
    /// takeover) — for `owner`, with its lease. Claimers skip rows another claimer has
    /// locked (`FOR UPDATE SKIP LOCKED`), so no session is claimed twice at once and no
    /// claimer waits for another. `None` when nothing waits.
    pub fn claim(&self, owner: &str, ttl: Duration) -> Result<Option<Claimed>, StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
                // Taking a lapsed lease waits for a group its old holder is writing; not
                // for longer than this (the claim fails and is tried again).
                transaction
                    .batch_execute("SET LOCAL lock_timeout = '2s'")
                    .map_err(|error| self.failed(&error))?;
                // The candidate is locked first, then checked again by a statement of its own:
                // under READ COMMITTED a locked row that another claimer has just taken is
                // re-read, but the lease it joined is not, so the first query alone would let a
                // fresh claim look like a lapsed one and hand the session out twice.
                let mut passed: Vec<String> = Vec::new();
                let found = loop {
                    if passed.len() > 32 {
                        break None;
                    }
                    let row = transaction
                        .query_opt(
                            "SELECT q.session FROM work_queue q
                             LEFT JOIN leases l ON l.session = q.session
                             WHERE (q.state = 'waiting'
                                 OR (q.state = 'running'
                                     AND (l.expires_at IS NULL OR l.expires_at < clock_timestamp())))
                               AND NOT (q.session = ANY($1))
                             ORDER BY q.updated_at
                             LIMIT 1
                             FOR UPDATE OF q SKIP LOCKED",
                            &[&passed],
                        )
                        .map_err(|error| self.failed(&error))?;
                    let Some(row) = row else {
                        break None;
                    };
                    let session: String = row.get(0);
                    let current = transaction
                        .query_one(
                            "SELECT q.payload, q.claims, q.state = 'waiting'
                                 OR (q.state = 'running' AND (l.expires_at IS NULL
                                     OR l.expires_at < clock_timestamp()))
                             FROM work_queue q LEFT JOIN leases l ON l.session = q.session
                             WHERE q.session = $1",
                            &[&session],
                        )
                        .map_err(|error| self.failed(&error))?;
                    if current.get::<_, bool>(2) {
                        let granted = grant_lease(&mut transaction, &session, owner, ttl)
                            .map_err(|error| self.failed(&error))?;
                        if let Some(token) = granted {
                            let (payload, claims) = (current.get(0), current.get(1));
                            break Some((session, payload, claims, token));
                        }
                    }
                    passed.push(session);
                };
                let Some((session, payload, claims, token)) = found else {
                    // Ended here, so the connection goes back to the idle ones clean.
                    transaction.rollback().map_err(|error| self.failed(&error))?;
                    return Ok(None);
                };
                transaction
                    .execute(
                        "UPDATE work_queue SET state = 'running', worker = $2, claims = claims + 1,
                             updated_at = clock_timestamp()
                         WHERE session = $1",
                        &[&session, &owner],
                    )
                    .map_err(|error| self.failed(&error))?;
                transaction.commit().map_err(|error| self.failed(&error))?;
                Ok(Some(Claimed {
                    lease: Lease {
                        session: SessionId::new(session),
                        owner: owner.to_owned(),
                        token,
                        ttl,
                    },
                    payload,
                    earlier_claims: claims,
                }))
            })
        })
    }

    /// Marks a claimed session `done` (or `failed`) and gives its lease up — only while the
    /// lease is still this worker's: a worker that was taken over finishes nothing.
    pub fn finish(&self, lease: &Lease, succeeded: bool) -> Result<(), StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
                // The queue row first, then the lease: the order a claim takes them in, so
                // a claim and a finish of the same session cannot deadlock.
                transaction
                    .execute(
                        "SELECT 1 FROM work_queue WHERE session = $1 FOR UPDATE",
                        &[&lease.session.as_str()],
                    )
                    .map_err(|error| self.failed(&error))?;
                let held = lease_token(&mut transaction, lease.session.as_str(), RowLock::Update)
                    .map_err(|error| self.failed(&error))?;
                if held != Some(lease.token) {
                    return Err(self.fenced(lease));
                }
                let state = if succeeded { "done" } else { "failed" };
                transaction
                    .execute(
                        "UPDATE work_queue SET state = $2, updated_at = clock_timestamp()
                         WHERE session = $1",
                        &[&lease.session.as_str(), &state],
                    )
                    .map_err(|error| self.failed(&error))?;
                expire_lease(&mut transaction, lease).map_err(|error| self.failed(&error))?;
                transaction.commit().map_err(|error| self.failed(&error))
            })
        })
    }
}

/// Grants the lease of `session` to `owner` for `ttl` when nobody holds it, its holder's
/// lease ran out, or `owner` holds it already; the token grows with every grant. `None`
/// while another holder's lease runs.
fn grant_lease(
    client: &mut impl postgres::GenericClient,
    session: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Option<i64>, postgres::Error> {
    let millis = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    Ok(client
        .query_opt(
            "INSERT INTO leases (session, owner, token, expires_at)
             VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 millisecond')
             ON CONFLICT (session) DO UPDATE
             SET owner = EXCLUDED.owner, token = leases.token + 1,
                 expires_at = EXCLUDED.expires_at
             WHERE leases.expires_at < clock_timestamp() OR leases.owner = EXCLUDED.owner
             RETURNING token",
            &[&session, &owner, &millis],
        )?
        .map(|row| row.get(0)))
}

/// How a transaction holds the lease row it reads.
#[derive(Clone, Copy)]
enum RowLock {
    /// Against a takeover until the transaction ends (a group being written).
    Share,
    /// To change it (finishing).
    Update,
    /// Only to read it (naming the holder of a lease that refused a group).
    None,
}

/// The token of `session`'s lease, its row locked as `lock` says for the rest of the
/// transaction.
fn lease_token(
    client: &mut impl postgres::GenericClient,
    session: &str,
    lock: RowLock,
) -> Result<Option<i64>, postgres::Error> {
    let query = match lock {
        RowLock::Share => "SELECT token FROM leases WHERE session = $1 FOR SHARE",
        RowLock::Update => "SELECT token FROM leases WHERE session = $1 FOR UPDATE",
        RowLock::None => "SELECT token FROM leases WHERE session = $1",
    };
    Ok(client.query_opt(query, &[&session])?.map(|row| row.get(0)))
}

/// Ends `lease` at once, if its token still holds the session.
fn expire_lease(
    client: &mut impl postgres::GenericClient,
    lease: &Lease,
) -> Result<u64, postgres::Error> {
    client.execute(
        "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second'
         WHERE session = $1 AND token = $2",
        &[&lease.session.as_str(), &lease.token],
    )
}

/// One session as `toolrail sessions` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    pub session: String,
    pub events: u64,
    /// The kind of its last event (`turn/end`, `tool/result`, …).
    pub last_kind: String,
    /// How its last turn ended, if it did.
    pub ended: Option<String>,
    /// The lease holder, and whether the lease still runs.
    pub owner: Option<String>,
    pub leased: bool,
    /// Where it stands in the work queue (`waiting`, `running`, `done`, `failed`), if it was
    /// put there.
    pub queue: Option<String>,
}

impl PostgresStore {
    /// Every session in the database, by name, with its lease.
    pub fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let rows = client
                    .query(
                        // Queued sessions have no events yet, and are sessions all the same.
                        "SELECT s.session, COALESCE(e.seq, 0), e.line, l.owner,
                                COALESCE(l.expires_at > now(), false), q.state
                         FROM (SELECT session FROM events UNION SELECT session FROM work_queue) s
                         LEFT JOIN LATERAL (SELECT seq, line FROM events
                                            WHERE session = s.session
                                            ORDER BY seq DESC LIMIT 1) e ON true
                         LEFT JOIN leases l ON l.session = s.session
                         LEFT JOIN work_queue q ON q.session = s.session
                         ORDER BY s.session",
                        &[],
                    )
                    .map_err(|error| self.failed(&error))?;
                Ok(rows
                    .iter()
                    .map(|row| {
                        let line: Option<String> = row.get(2);
                        let last: Option<Event> =
                            line.and_then(|line| serde_json::from_str(&line).ok());
                        let last_kind = last.as_ref().map_or_else(
                            || "(none)".to_owned(),
                            |event| event.data.kind().to_owned(),
                        );
                        let ended = last.as_ref().and_then(|event| {
                            let crate::event::EventData::TurnEnd(end) = &event.data else {
                                return None;
                            };
                            serde_json::to_value(end.kind)
                                .ok()
                                .and_then(|kind| kind.as_str().map(str::to_owned))
                        });
                        SessionSummary {
                            session: row.get(0),
                            events: u64::try_from(row.get::<_, i64>(1)).unwrap_or_default(),
                            last_kind,
                            ended,
                            owner: row.get(3),
                            leased: row.get(4),
                            queue: row.get(5),
                        }
                    })
                    .collect())
            })
        })
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

/// One session's writer connection: one transaction per group.
struct PostgresSession {
    /// Taken back to the idle connections when the log closes.
    client: Option<Client>,
    /// Where the connection goes when the log closes, if no group failed on it.
    idle: Arc<Idle>,
    healthy: bool,
    session: String,
    durability: Durability,
    blob_cap: usize,
    /// The lease token every group checks, for a leased log.
    fence: Option<i64>,
}

/// Large values read back while a session is opened.
struct ReadShelf<'a> {
    client: std::cell::RefCell<&'a mut Client>,
}

impl BlobShelf for ReadShelf<'_> {
    fn put(&mut self, digest: &str, _bytes: &[u8]) -> Result<(), String> {
        Err(format!("{digest}: a reading shelf stores nothing"))
    }

    fn get(&self, digest: &str) -> Result<Vec<u8>, String> {
        self.client
            .borrow_mut()
            .query_one("SELECT bytes FROM blobs WHERE digest = $1", &[&digest])
            .map(|row| row.get(0))
            .map_err(|error| format!("the large value {digest} cannot be read: {error}"))
    }
}

/// What refuses a group: the database, or a lease that is no longer this log's.
enum GroupError {
    Database(postgres::Error),
    Encoding(String),
    Fenced { holder: i64 },
}

impl PostgresSession {
    /// One group, in as few round trips as it allows: a group with no large value and no
    /// flush to ask for (in strict mode the connection flushes every commit anyway) is one
    /// statement — its own transaction — that checks the lease under a share lock and
    /// inserts every event; otherwise a transaction stores the large values first, and a
    /// non-strict log's sync group asks for the flush.
    fn write_group(&mut self, events: &[&Event], sync: bool) -> Result<(), GroupError> {
        let mut blobs = PendingBlobs::default();
        let mut seqs: Vec<i64> = Vec::with_capacity(events.len());
        let mut lines: Vec<String> = Vec::with_capacity(events.len());
        let mut line = Vec::with_capacity(1024);
        for event in events {
            line.clear();
            encode_stored(event, self.blob_cap, &mut blobs, &mut line)
                .map_err(GroupError::Encoding)?;
            lines.push(String::from_utf8_lossy(&line).into_owned());
            seqs.push(
                i64::try_from(event.seq)
                    .map_err(|error| GroupError::Encoding(error.to_string()))?,
            );
        }
        // Strict mode's connection waits for every commit's flush already.
        let flushed = !sync || self.durability == Durability::Strict;
        let simple = flushed && blobs.0.is_empty() && !events.is_empty();
        let Some(client) = self.client.as_mut() else {
            return Err(GroupError::Encoding("the log is closed".to_owned()));
        };
        if simple {
            let inserted = client
                .execute(INSERT_GROUP, &[&self.session, &seqs, &lines, &self.fence])
                .map_err(GroupError::Database)?;
            return check_inserted(client, &self.session, inserted, events.len());
        }
        let mut transaction = client.transaction().map_err(GroupError::Database)?;
        if sync && self.durability != Durability::Strict {
            transaction
                .batch_execute("SET LOCAL synchronous_commit = on")
                .map_err(GroupError::Database)?;
        }
        for (digest, bytes) in &blobs.0 {
            transaction
                .execute(
                    "INSERT INTO blobs (digest, bytes) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[digest, bytes],
                )
                .map_err(GroupError::Database)?;
        }
        if events.is_empty() {
            // A barrier of a leased log says the lease still holds, as every group does.
            if let Some(token) = self.fence {
                let held = lease_token(&mut transaction, &self.session, RowLock::Share)
                    .map_err(GroupError::Database)?;
                if held != Some(token) {
                    return Err(GroupError::Fenced {
                        holder: held.unwrap_or(0),
                    });
                }
            }
            // A commit that wrote nothing waits for nothing: a mark makes one to flush.
            transaction
                .batch_execute("INSERT INTO sync_marks (n) VALUES (1); DELETE FROM sync_marks")
                .map_err(GroupError::Database)?;
        } else {
            let inserted = transaction
                .execute(INSERT_GROUP, &[&self.session, &seqs, &lines, &self.fence])
                .map_err(GroupError::Database)?;
            // Dropping the transaction rolls the large values back with the refused group.
            check_inserted(&mut transaction, &self.session, inserted, events.len())?;
        }
        transaction.commit().map_err(GroupError::Database)
    }
}

/// A leased group inserts nothing once the lease is another's: then say whose it is.
fn check_inserted(
    client: &mut impl postgres::GenericClient,
    session: &str,
    inserted: u64,
    expected: usize,
) -> Result<(), GroupError> {
    if inserted == expected as u64 {
        return Ok(());
    }
    let holder = lease_token(client, session, RowLock::None).map_err(GroupError::Database)?;
    Err(GroupError::Fenced {
        holder: holder.unwrap_or(0),
    })
}

/// Inserts a group's events (`$2` seqs, `$3` lines) for session `$1`; with a lease token
/// `$4`, only while the session's lease still carries it — checked under a share lock on
/// the lease row, which a takeover must wait for, so no group lands after a takeover.
const INSERT_GROUP: &str = "
    INSERT INTO events (session, seq, line, lease_token)
    SELECT $1, g.seq, g.line, $4 FROM unnest($2::bigint[], $3::text[]) AS g(seq, line)
    WHERE $4::bigint IS NULL
       OR EXISTS (SELECT 1 FROM leases WHERE session = $1 AND token = $4 FOR SHARE)";

/// Large values a group spills, stored in the group's transaction before its events.
#[derive(Default)]
struct PendingBlobs(Vec<(String, Vec<u8>)>);

impl BlobShelf for PendingBlobs {
    fn put(&mut self, digest: &str, bytes: &[u8]) -> Result<(), String> {
        if !self.0.iter().any(|(stored, _)| stored == digest) {
            self.0.push((digest.to_owned(), bytes.to_vec()));
        }
        Ok(())
    }

    fn get(&self, _digest: &str) -> Result<Vec<u8>, String> {
        Err("large values are read through the loading shelf".to_owned())
    }
}

impl Medium for PostgresSession {
    fn commit(&mut self, events: &[&Event], sync: bool) -> Result<(), SinkError> {
        self.write_group(events, sync).map_err(|error| {
            self.healthy = false;
            match error {
                GroupError::Database(error) => SinkError::Refused(format!(
                    "writing session `{}` to PostgreSQL failed: {error}",
                    self.session
                )),
                GroupError::Encoding(why) => SinkError::Refused(format!(
                    "writing session `{}` to PostgreSQL failed: {why}",
                    self.session
                )),
                // Typed, so whoever drives the session can tell a takeover from a failure.
                GroupError::Fenced { holder } => SinkError::TakenOver {
                    session: self.session.clone(),
                    holder,
                    held: self.fence.unwrap_or_default(),
                },
            }
        })
    }

    fn close(&mut self) {
        let Some(mut client) = self.client.take() else {
            return;
        };
        // The settings this log made are undone before another call gets the connection.
        if self.healthy && !client.is_closed() && client.batch_execute("RESET ALL").is_ok() {
            self.idle.put(client);
        }
    }
}
