//! Session stores: where a session's events live between runs (DESIGN §6). Every store has
//! one writer thread with group commit behind the same append side ([`StoreLog`]), the same
//! durability modes and the same reading rules, so a store is a choice, not a format.

pub mod jsonl;
mod log;
#[cfg(feature = "postgres")]
pub mod postgres;
mod spill;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod writer;

pub use spill::DEFAULT_BLOB_CAP;

use std::path::{Path, PathBuf};

pub use log::{SessionLog, StoreLog};

use crate::event::{Event, FORMAT_VERSION, SessionStart};
use crate::ids::SessionId;

/// When appends are made durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// A `Durable` append (a `tool/start` of a call that may act, a commit) returns after
    /// its sync (the default).
    #[default]
    Strict,
    /// Synced at each durable barrier (the scheduler's batch end).
    Batched,
    /// Synced only when a barrier asks.
    None,
}

/// Why a store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}, line {line}: {why}. Nothing was changed; repair or move it before resuming the session"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("{path} already exists: a session id is used once; open it to resume")]
    Exists { path: PathBuf },
    #[error(
        "`{id}` cannot name a session: use letters, digits, `.`, `_` and `-`, not starting with `.`"
    )]
    InvalidSessionId { id: String },
    #[error("{path} is not a session log: its first event is `{kind}`, not `session/start`")]
    NotASession { path: PathBuf, kind: String },
    #[error(
        "{path} was written by a newer toolrail (format {found}, this one reads up to {FORMAT_VERSION})"
    )]
    NewerFormat { path: PathBuf, found: u32 },
    #[error("{path}: {message}")]
    Database { path: PathBuf, message: String },
    #[error("{path} is locked by another log: {holder}")]
    Locked {
        path: PathBuf,
        holder: jsonl::LockHolder,
    },
    #[error(
        "session `{session}` is leased to `{owner}` for {seconds_left:.1} s more; wait for it to expire or be released"
    )]
    Leased {
        session: String,
        owner: String,
        seconds_left: f64,
    },
    #[error(
        "session `{session}`: the lease with token {token} is no longer held (another worker took it over); stop driving the session"
    )]
    Fenced { session: String, token: i64 },
}

impl StoreError {
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
    type Log: SessionLog + 'static;

    fn create(&self, start: SessionStart) -> Result<Self::Log, StoreError>;

    fn open(&self, id: &SessionId) -> Result<Opened<Self::Log>, StoreError>;
}

/// An error with its causes, which hold what actually went wrong (a server's message, a
/// refused connection): the top error's own text is often only its kind.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
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
