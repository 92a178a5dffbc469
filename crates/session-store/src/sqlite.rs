//! The SQLite store: many sessions in one database file, one row per event keyed by
//! (session, seq), the same envelope as a JSONL line. WAL journal; `strict` commits with
//! `synchronous = FULL`; `batched` and `none` commit with `NORMAL` and make a group durable,
//! when asked, by committing it with `FULL`. The busy timeout (60 s) is how a writer waits
//! for another session's writer in the same file.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use super::jsonl::first_event;
use std::sync::Arc;

use super::spill::{BlobShelf, DEFAULT_BLOB_CAP, load_stored};
use super::writer::{Group, Medium, Writers};
use super::{
    Durability, Opened, SessionStore, StoreError, StoreLog, check_session_id, checked_rows,
    row_event,
};
use toolrail_session_log::SessionId;
use toolrail_session_log::SinkError;
use toolrail_session_log::{Event, event::SessionStart};

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS events (
        session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS sync_marks (n INTEGER);
    CREATE TABLE IF NOT EXISTS blobs (
        digest TEXT PRIMARY KEY,
        bytes BLOB NOT NULL
    ) WITHOUT ROWID;
";

/// A database of sessions.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    path: PathBuf,
    durability: Durability,
    blob_cap: usize,
    writers: Arc<Writers>,
}

/// The log of a SQLite session.
pub type SqliteLog = StoreLog;

impl SqliteStore {
    /// A store in the database file `path` (created, with its schema, if missing).
    pub fn new(path: impl Into<PathBuf>, durability: Durability) -> Result<Self, StoreError> {
        let store = Self {
            path: path.into(),
            durability,
            blob_cap: DEFAULT_BLOB_CAP,
            writers: Arc::default(),
        };
        store.connect()?;
        Ok(store)
    }

    /// Values (and details) whose compact JSON is longer than `bytes` go to the `blobs`
    /// table under their SHA-256, in the same transaction as their event.
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

    fn connect(&self) -> Result<Connection, StoreError> {
        let fail = |error: rusqlite::Error| database(&self.path, &error);
        let conn = Connection::open(&self.path).map_err(fail)?;
        conn.busy_timeout(std::time::Duration::from_secs(60))
            .map_err(fail)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(fail)?;
        conn.pragma_update(None, "synchronous", synchronous(self.durability))
            .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        Ok(conn)
    }

    fn name(&self, id: &SessionId) -> String {
        format!("{}#{}", self.path.display(), id.as_str())
    }

    /// The writer of session `id` on `conn`, whose next event gets `next_seq`.
    fn start_log(&self, conn: Connection, id: &SessionId, next_seq: u64) -> SqliteLog {
        let medium = SqliteSession {
            conn,
            session: id.as_str().to_owned(),
            durability: self.durability,
        };
        StoreLog::start(
            &self.writers,
            medium,
            self.name(id),
            next_seq,
            self.durability,
            self.blob_cap,
        )
    }
}

fn synchronous(durability: Durability) -> &'static str {
    match durability {
        Durability::Strict => "FULL",
        Durability::Batched => "NORMAL",
        // Not OFF: in WAL mode OFF also skips the syncs of checkpoints, which would put
        // commits that other sessions in the same file were told are durable at risk.
        Durability::None => "NORMAL",
    }
}

fn database(path: &Path, error: &rusqlite::Error) -> StoreError {
    StoreError::Database {
        path: path.to_path_buf(),
        message: error.to_string(),
    }
}

impl SessionStore for SqliteStore {
    type Log = SqliteLog;

    fn create(&self, start: SessionStart) -> Result<SqliteLog, StoreError> {
        check_session_id(&start.session_id)?;
        let id = start.session_id.clone();
        let conn = self.connect()?;
        let first = first_event(start);
        let line = serde_json::to_string(&first)
            .map_err(|error| StoreError::io("encoding", &self.path, error.into()))?;
        // session/start is durable before create returns, whatever the mode.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|error| database(&self.path, &error))?;
        let inserted = conn.execute(
            "INSERT INTO events (session, seq, line) VALUES (?1, 1, ?2) ON CONFLICT DO NOTHING",
            params![id.as_str(), line],
        );
        match inserted {
            Ok(0) => {
                return Err(StoreError::Exists {
                    path: PathBuf::from(self.name(&id)),
                });
            }
            Ok(_) => {}
            Err(error) => return Err(database(&self.path, &error)),
        }
        conn.pragma_update(None, "synchronous", synchronous(self.durability))
            .map_err(|error| database(&self.path, &error))?;
        Ok(self.start_log(conn, &id, 2))
    }

    fn open(&self, id: &SessionId) -> Result<Opened<SqliteLog>, StoreError> {
        check_session_id(id)?;
        let conn = self.connect()?;
        let name = PathBuf::from(self.name(id));
        let events = {
            let mut statement = conn
                .prepare("SELECT seq, line FROM events WHERE session = ?1 ORDER BY seq")
                .map_err(|error| database(&self.path, &error))?;
            let rows = statement
                .query_map(params![id.as_str()], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(|error| database(&self.path, &error))?;
            let mut events: Vec<Event> = Vec::new();
            for (number, row) in rows.enumerate() {
                let (seq, line) = row.map_err(|error| database(&self.path, &error))?;
                let mut event = row_event(&name, number, seq, &line, events.len() as u64 + 1)?;
                load_stored(&mut event, line.as_bytes(), &TableShelf { conn: &conn }).map_err(
                    |why| StoreError::Corrupt {
                        path: name.clone(),
                        line: number + 1,
                        why,
                    },
                )?;
                events.push(event);
            }
            events
        };
        let next_seq = checked_rows(&name, &events)?;
        Ok(Opened {
            log: self.start_log(conn, id, next_seq),
            events,
            torn_bytes_dropped: 0,
        })
    }
}

/// One session's writer connection: one transaction per group.
struct SqliteSession {
    conn: Connection,
    session: String,
    durability: Durability,
}

/// Large values as rows of `blobs`, written in the group's transaction.
struct TableShelf<'a> {
    conn: &'a Connection,
}

impl BlobShelf for TableShelf<'_> {
    fn put(&mut self, digest: &str, bytes: &[u8]) -> Result<(), String> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO blobs (digest, bytes) VALUES (?1, ?2)",
                params![digest, bytes],
            )
            .map(drop)
            .map_err(|error| format!("storing the large value {digest} failed: {error}"))
    }

    fn get(&self, digest: &str) -> Result<Vec<u8>, String> {
        self.conn
            .query_row(
                "SELECT bytes FROM blobs WHERE digest = ?1",
                params![digest],
                |row| row.get(0),
            )
            .map_err(|error| format!("the large value {digest} cannot be read: {error}"))
    }
}

impl SqliteSession {
    /// One transaction per group. A group that must be durable (any mode but `strict`, whose
    /// every commit is synced already) commits with `synchronous = FULL`, which syncs the WAL
    /// and so every earlier commit too; a barrier with no events writes and removes a mark so
    /// that there is a commit to sync.
    fn write(&mut self, group: &Group<'_>, sync: bool) -> Result<(), rusqlite::Error> {
        let raise = sync && self.durability != Durability::Strict;
        if raise {
            self.conn.pragma_update(None, "synchronous", "FULL")?;
        }
        let written = self.write_group(group, raise);
        if raise {
            let restored =
                self.conn
                    .pragma_update(None, "synchronous", synchronous(self.durability));
            written?;
            restored?;
            return Ok(());
        }
        written
    }

    fn write_group(&mut self, group: &Group<'_>, mark: bool) -> Result<(), rusqlite::Error> {
        let transaction = self.conn.transaction()?;
        {
            let mut shelf = TableShelf { conn: &transaction };
            for (digest, bytes) in group.blobs {
                shelf
                    .put(digest, bytes)
                    .map_err(|error| rusqlite::Error::ToSqlConversionFailure(error.into()))?;
            }
            let mut insert = transaction
                .prepare_cached("INSERT INTO events (session, seq, line) VALUES (?1, ?2, ?3)")?;
            for (seq, line) in group.lines() {
                let text = std::str::from_utf8(line)
                    .map_err(|error| rusqlite::Error::ToSqlConversionFailure(Box::new(error)))?;
                let seq = i64::try_from(seq)
                    .map_err(|error| rusqlite::Error::ToSqlConversionFailure(Box::new(error)))?;
                insert.execute(params![self.session, seq, text])?;
            }
        }
        if mark && group.is_empty() {
            transaction.execute("INSERT INTO sync_marks (n) VALUES (1)", [])?;
            transaction.execute("DELETE FROM sync_marks", [])?;
        }
        transaction.commit()
    }
}

impl Medium for SqliteSession {
    fn commit(&mut self, group: &Group<'_>, sync: bool) -> Result<(), SinkError> {
        self.write(group, sync).map_err(|error| {
            SinkError::Refused(format!(
                "writing session `{}` to SQLite failed: {error}",
                self.session
            ))
        })
    }

    fn close(&mut self) {
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }
}
