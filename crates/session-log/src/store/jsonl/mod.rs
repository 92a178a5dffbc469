//! The embedded store: one JSON Lines file per session, `<dir>/<session-id>.jsonl`.

mod reader;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::writer::Medium;
use super::{Durability, Opened, SessionStore, StoreError, StoreLog, check_session_id};
use crate::event::{Event, EventData, FORMAT_VERSION, SessionStart};
use crate::ids::SessionId;
use crate::sink::SinkError;
use crate::time::Timestamp;

/// A folder of session files.
#[derive(Clone, Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    durability: Durability,
}

/// The log of a JSONL session.
pub type JsonlLog = StoreLog;

impl JsonlStore {
    /// A store in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Result<Self, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::io("creating", &dir, source))?;
        Ok(Self { dir, durability })
    }

    /// The file of a session.
    pub fn path_of(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        check_session_id(id)?;
        Ok(self.dir.join(format!("{}.jsonl", id.as_str())))
    }
}

impl SessionStore for JsonlStore {
    type Log = JsonlLog;

    fn create(&self, start: SessionStart) -> Result<JsonlLog, StoreError> {
        let path = self.path_of(&start.session_id)?;
        let mut file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    StoreError::Exists { path: path.clone() }
                } else {
                    StoreError::io("creating", &path, source)
                }
            })?;
        let first = first_event(start);
        let mut line = serde_json::to_vec(&first)
            .map_err(|error| StoreError::io("encoding", &path, error.into()))?;
        line.push(b'\n');
        file.write_all(&line)
            .map_err(|source| StoreError::io("writing", &path, source))?;
        file.sync_all()
            .map_err(|source| StoreError::io("syncing", &path, source))?;
        sync_dir(&self.dir)?;
        let name = path.display().to_string();
        Ok(StoreLog::start(
            JsonlFile::new(file),
            name,
            2,
            self.durability,
        ))
    }

    fn open(&self, id: &SessionId) -> Result<Opened<JsonlLog>, StoreError> {
        let path = self.path_of(id)?;
        let read = reader::read_log(&path)?;
        check_first(&path, &read.events)?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|source| StoreError::io("opening", &path, source))?;
        if read.torn_bytes > 0 {
            file.set_len(read.good_len)
                .map_err(|source| StoreError::io("truncating", &path, source))?;
            file.sync_all()
                .map_err(|source| StoreError::io("syncing", &path, source))?;
        }
        let next_seq = read.events.len() as u64 + 1;
        let name = path.display().to_string();
        Ok(Opened {
            log: StoreLog::start(JsonlFile::new(file), name, next_seq, self.durability),
            events: read.events,
            torn_bytes_dropped: read.torn_bytes,
        })
    }
}

/// The first event of every session.
pub(crate) fn first_event(start: SessionStart) -> Event {
    Event {
        seq: 1,
        ts: Timestamp::now(),
        turn: None,
        step: None,
        call_id: None,
        data: EventData::SessionStart(SessionStart {
            format_version: FORMAT_VERSION,
            ..start
        }),
    }
}

/// A session's first event must be a `session/start` this version can read.
pub(crate) fn check_first(path: &Path, events: &[Event]) -> Result<(), StoreError> {
    match events.first().map(|event| &event.data) {
        Some(EventData::SessionStart(start)) if start.format_version > FORMAT_VERSION => {
            Err(StoreError::NewerFormat {
                path: path.to_path_buf(),
                found: start.format_version,
            })
        }
        Some(EventData::SessionStart(_)) => Ok(()),
        Some(other) => Err(StoreError::NotASession {
            path: path.to_path_buf(),
            kind: other.kind().to_owned(),
        }),
        None => Err(StoreError::NotASession {
            path: path.to_path_buf(),
            kind: "nothing".to_owned(),
        }),
    }
}

/// Makes a new directory entry durable (the file exists after a crash, not only its data).
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| StoreError::io("syncing", dir, source))
}

/// A session file as a writer medium: one `write` per group, `fdatasync` when asked.
struct JsonlFile {
    file: File,
    buffer: Vec<u8>,
}

impl JsonlFile {
    fn new(file: File) -> Self {
        Self {
            file,
            buffer: Vec::with_capacity(64 * 1024),
        }
    }
}

impl Medium for JsonlFile {
    fn commit(&mut self, events: &[&Event], sync: bool) -> Result<(), SinkError> {
        self.buffer.clear();
        for event in events {
            serde_json::to_writer(&mut self.buffer, event).map_err(|error| {
                SinkError::Refused(format!("an event could not be encoded: {error}"))
            })?;
            self.buffer.push(b'\n');
        }
        self.file.write_all(&self.buffer).map_err(|error| {
            SinkError::Refused(format!("writing the session file failed: {error}"))
        })?;
        if sync {
            self.file.sync_data().map_err(|error| {
                SinkError::Refused(format!("syncing the session file failed: {error}"))
            })?;
        }
        Ok(())
    }

    fn close(&mut self) {
        // Best effort: the last writes reach the disk before the file is closed.
        let _ = self.file.sync_data();
    }
}
