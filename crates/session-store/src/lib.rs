//! Session stores: where a session's events live between runs (DESIGN §6). Every store has
//! one writer thread with group commit behind the same append side ([`StoreLog`]), the same
//! durability modes and the same reading rules, so a store is a choice, not a format.
//!
//! Depends on `session-log` (the events it keeps) and nothing else of toolrail.
//!
//! # Example
//!
//! A session kept in a JSONL file: created, appended to, reopened after the process that
//! wrote it stopped in the middle of a turn, and repaired by
//! [`recover`](toolrail_session_log::recover).
//!
//! ```
//! use toolrail_session_log::{
//!     AppendUrgency, ContentBlock, EventData, EventDraft, EventSink, SessionId, Timestamp,
//!     TurnId, recover, event::{SessionStart, TurnStart},
//! };
//! use toolrail_session_store::{Durability, JsonlStore, SessionStore};
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store = JsonlStore::new(dir.path(), Durability::Strict)?;
//! let id = SessionId::new("demo");
//! let start = SessionStart {
//!     format_version: 0, // the store writes its own
//!     session_id: id.clone(),
//!     tools: vec![],
//!     meta: None,
//! };
//! let log = store.create(start)?;
//! let user = TurnStart { user: vec![ContentBlock::text("hello")], trace: None, caller: None, client: false };
//! let draft = EventDraft {
//!     ts: Timestamp::now(),
//!     turn: Some(TurnId(1)),
//!     step: None,
//!     call_id: None,
//!     data: EventData::TurnStart(user),
//! };
//! assert_eq!(log.append(draft, AppendUrgency::Durable).await?, 2);
//! drop(log); // the process stops before the turn ends
//!
//! let opened = store.open(&id)?;
//! let kinds: Vec<_> = opened.events.iter().map(|event| event.data.kind()).collect();
//! assert_eq!(kinds, ["session/start", "turn/start"]);
//! let report = recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log).await?;
//! assert_eq!(report.closed_turn, Some(TurnId(1)));
//! let events = store.read(&id)?.events; // read without taking the lock
//! assert_eq!(events.last().map(|event| event.data.kind()), Some("turn/end"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod jsonl;
mod log;
#[cfg(feature = "postgres")]
pub mod postgres;
mod spill;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod writer;

pub use spill::DEFAULT_BLOB_CAP;
pub use writer::{DEFAULT_WRITERS, MAX_WRITERS};

use std::path::{Path, PathBuf};

pub use jsonl::{
    DEFAULT_LOCK_WAIT, Envelope, JsonlLog, JsonlStore, LockHolder, ScannedSession, SessionRead,
};
pub use log::StoreLog;
#[cfg(feature = "postgres")]
pub use postgres::{Claimed, Finish, Lease, PostgresLog, PostgresStore, SessionSummary, Standing};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteLog, SqliteStore};
pub use toolrail_session_log::SessionLog;

use toolrail_session_log::SessionId;
use toolrail_session_log::{
    Event,
    event::{FORMAT_VERSION, SessionStart},
};

/// When appends are made durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// A `Durable` append (a `tool/start` of a call that may act, a commit) returns after
    /// its sync (the default).
    #[default]
    Strict,
    /// Synced at the end of every batch and every turn ([`Settle`]), and at a barrier.
    ///
    /// [`Settle`]: toolrail_session_log::Settle
    Batched,
    /// Never synced unless a barrier asks: not at a turn's end, not when a session is
    /// created.
    None,
}

impl Durability {
    /// Whether the mode syncs on its own at all (every mode but `none`).
    pub(crate) fn syncs(self) -> bool {
        self != Self::None
    }
}

/// Why a store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done (`opening`, `syncing`, …), the message's first word.
        action: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A stored event cannot be read, or breaks the `seq` order (a gap or a repeat). A
    /// torn last line of a file is cut instead.
    #[error(
        "{path}, line {line}: {why}. Nothing was changed; repair or move it before resuming the session"
    )]
    Corrupt {
        /// The session file, or `<database>#<session>` for a database store.
        path: PathBuf,
        /// The line, from 1 (for a database, the row in `seq` order).
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The session id was used already: a session is created once.
    #[error("{path} already exists: a session id is used once; open it to resume")]
    Exists {
        /// The session file, or `<database>#<session>` for a database store.
        path: PathBuf,
    },
    /// The id cannot be a file stem or key.
    #[error(
        "`{id}` cannot name a session: use letters, digits, `.`, `_` and `-`, not starting with `.`"
    )]
    InvalidSessionId {
        /// The id as given.
        id: String,
    },
    /// The first event is not `session/start`.
    #[error("{path} is not a session log: its first event is `{kind}`, not `session/start`")]
    NotASession {
        /// The session file, or `<database>#<session>` for a database store.
        path: PathBuf,
        /// The first event's kind, or `nothing` for a file without events.
        kind: String,
    },
    /// The session was written in a format newer than [`FORMAT_VERSION`].
    #[error(
        "{path} was written by a newer toolrail (format {found}, this one reads up to {FORMAT_VERSION})"
    )]
    NewerFormat {
        /// The session file, or `<database>#<session>` for a database store.
        path: PathBuf,
        /// The `format_version` of its `session/start`.
        found: u32,
    },
    /// The database failed or refused (including a schema newer than this toolrail).
    #[error("{path}: {message}")]
    Database {
        /// The SQLite file, or the PostgreSQL connection shown without its password.
        path: PathBuf,
        /// The database's error, with its causes.
        message: String,
    },
    /// Another log has the session file open.
    #[error("{path} is locked by another log: {holder}")]
    Locked {
        /// The session file.
        path: PathBuf,
        /// Who holds the lock, as far as the system tells.
        holder: jsonl::LockHolder,
    },
    /// Another holder's lease on the session still runs.
    #[error(
        "session `{session}` is leased to `{owner}` for {seconds_left:.1} s more; wait for it to expire or be released"
    )]
    Leased {
        /// The id of the leased session.
        session: String,
        /// The owner name of the lease's holder.
        owner: String,
        /// Seconds until the lease expires, by the database's clock.
        seconds_left: f64,
    },
    /// The lease was taken over: its token no longer holds the session.
    #[error(
        "session `{session}`: the lease with token {token} is no longer held (another worker took it over); stop driving the session"
    )]
    Fenced {
        /// The id of the session taken over.
        session: String,
        /// The token of the lease that lost it.
        token: i64,
    },
    /// Enqueueing a session the store knows already (in its queue, or with events): an id
    /// names one session, and a session that exists is queued again only when it is retried.
    #[cfg(feature = "postgres")]
    #[error("session `{session}` exists already: it is {standing}")]
    Known {
        /// The session's id.
        session: String,
        /// Where it stands.
        standing: postgres::Standing,
    },
    /// Retrying a session that did not fail: only a failed session (or one a run outside
    /// the queue left with a turn open) is queued again.
    #[cfg(feature = "postgres")]
    #[error(
        "session `{session}` is {standing}; only a failed session, or one a run outside the queue left open, is queued again"
    )]
    NotRetryable {
        /// The session's id.
        session: String,
        /// Where it stands.
        standing: postgres::Standing,
    },
}

impl StoreError {
    /// Whether the store failed under the caller rather than refused what was asked: a
    /// database that did not answer, dropped the connection or failed a statement, a file
    /// operation that failed. What was committed before stays, and the same call may
    /// succeed later; nothing is wrong with the session itself.
    pub fn is_outage(&self) -> bool {
        match self {
            Self::Io { .. } | Self::Database { .. } => true,
            Self::Locked { .. }
            | Self::Corrupt { .. }
            | Self::Exists { .. }
            | Self::InvalidSessionId { .. }
            | Self::NotASession { .. }
            | Self::NewerFormat { .. }
            | Self::Leased { .. }
            | Self::Fenced { .. } => false,
            #[cfg(feature = "postgres")]
            Self::Known { .. } | Self::NotRetryable { .. } => false,
        }
    }

    /// Whether another holder has the session: its lease runs (or its JSONL log's lock is
    /// held), or the caller's lease was taken over. Whoever drives the session must stop.
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self,
            Self::Leased { .. } | Self::Fenced { .. } | Self::Locked { .. }
        )
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A session reopened from its store.
pub struct Opened<L> {
    /// The session's log; its next append gets `seq` `events.len() + 1`.
    pub log: L,
    /// Every event, in `seq` order.
    pub events: Vec<Event>,
    /// Bytes of a torn last line that were cut off (0 if the session ended cleanly).
    pub torn_bytes_dropped: u64,
}

/// A place sessions are kept.
///
/// Implementors guarantee: `create` makes `session/start` (seq 1, with the current format
/// version) durable before it returns; `open` returns every event with `seq` dense from 1,
/// cuts a torn tail (reporting it) and refuses anything else that is wrong with an error that
/// names where; the returned log appends after the last event.
pub trait SessionStore: Send + Sync {
    /// The log one session of this store is appended through.
    type Log: SessionLog + 'static;

    /// Creates the session `start` names, with `start` as its first event (its
    /// `format_version` set to [`FORMAT_VERSION`]); [`StoreError::Exists`] when the id was
    /// used before.
    fn create(&self, start: SessionStart) -> Result<Self::Log, StoreError>;

    /// Reopens session `id` to go on with it: its events, checked, and a log that appends
    /// after them.
    fn open(&self, id: &SessionId) -> Result<Opened<Self::Log>, StoreError>;
}

/// One row of a database store read back: its event, which must be the next in `seq` order
/// (`number` is the row's place, from 0). Rows hold the JSONL envelope.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn row_event(
    name: &Path,
    number: usize,
    seq: i64,
    line: &str,
    expected: u64,
) -> Result<Event, StoreError> {
    let corrupt = |why: String| StoreError::Corrupt {
        path: name.to_path_buf(),
        line: number + 1,
        why,
    };
    let event: Event = serde_json::from_str(line).map_err(|error| corrupt(error.to_string()))?;
    if u64::try_from(seq).ok() != Some(expected) || event.seq != expected {
        return Err(corrupt(format!(
            "seq {} (key {seq}) where {expected} was expected (a gap or a repeat)",
            event.seq
        )));
    }
    Ok(event)
}

/// A database session's events, checked whole: at least its `session/start` (none means
/// there is no such session). Returns the next `seq`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn checked_rows(name: &Path, events: &[Event]) -> Result<u64, StoreError> {
    if events.is_empty() {
        return Err(StoreError::io(
            "opening",
            name,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such session in the database",
            ),
        ));
    }
    jsonl::check_first(name, events)?;
    Ok(events.len() as u64 + 1)
}

/// A session id usable as a file stem or key: letters, digits, `.`, `_`, `-`, no leading dot.
pub(crate) fn check_session_id(id: &SessionId) -> Result<(), StoreError> {
    let text = id.as_str();
    let valid = !text.is_empty()
        && !text.starts_with('.')
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::InvalidSessionId {
            id: text.to_owned(),
        })
    }
}
