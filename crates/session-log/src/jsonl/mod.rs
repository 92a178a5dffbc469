//! The embedded session store: one JSON Lines file per session, `<dir>/<session-id>.jsonl`,
//! appended by one writer thread with group commit (DESIGN §6).
//!
//! Durability modes decide when an append returns: `strict` makes `Durable` appends (a
//! `tool/start` of a call that may act, a commit) wait for their `fsync`; `batched` syncs only
//! at [`JsonlLog::durable_barrier`] (the scheduler calls it at batch end); `none` never syncs
//! on its own. Every other append returns as soon as it has its place in the order, without
//! waiting for the writer; a later write failure refuses every append after it.

mod reader;
mod writer;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::event::{Event, EventData, FORMAT_VERSION, SessionStart};
use crate::ids::SessionId;
use crate::sink::{AppendFuture, AppendUrgency, EventDraft, EventSink, SinkError};
use crate::time::Timestamp;
use writer::{Command, Shared};

/// When appends are made durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `fsync` before a `Durable` append returns (the default).
    #[default]
    Strict,
    /// `fsync` at each durable barrier (batch end).
    Batched,
    /// No `fsync` unless a barrier asks for one.
    None,
}

/// Why the store could not do what was asked.
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
        "{path}, line {line}: {why}. The file is not changed; repair or move it before resuming the session"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("{path} already exists: a session id is used once; open it to resume")]
    Exists { path: PathBuf },
    #[error(
        "`{id}` cannot name a session file: use letters, digits, `.`, `_` and `-`, not starting with `.`"
    )]
    InvalidSessionId { id: String },
    #[error("{path} is not a session log: its first event is `{kind}`, not `session/start`")]
    NotASession { path: PathBuf, kind: String },
    #[error(
        "{path} was written by a newer toolrail (format {found}, this one reads up to {FORMAT_VERSION})"
    )]
    NewerFormat { path: PathBuf, found: u32 },
}

impl StoreError {
    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A folder of session files.
#[derive(Clone, Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    durability: Durability,
}

/// A session reopened from its file.
pub struct Opened {
    pub log: JsonlLog,
    /// Every event in the file, in `seq` order.
    pub events: Vec<Event>,
    /// Bytes of a torn last line that were cut off (0 if the file ended cleanly).
    pub torn_bytes_dropped: u64,
}

impl JsonlStore {
    /// A store in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Result<Self, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::io("creating", &dir, source))?;
        Ok(Self { dir, durability })
    }

    /// The file of a session.
    pub fn path_of(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        let text = id.as_str();
        let valid = !text.is_empty()
            && !text.starts_with('.')
            && text
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
        if !valid {
            return Err(StoreError::InvalidSessionId {
                id: text.to_owned(),
            });
        }
        Ok(self.dir.join(format!("{text}.jsonl")))
    }

    /// Starts a new session file whose first line is `session/start` (made durable before
    /// this returns).
    pub fn create(&self, start: SessionStart) -> Result<JsonlLog, StoreError> {
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
        let first = Event {
            seq: 1,
            ts: Timestamp::now(),
            turn: None,
            step: None,
            call_id: None,
            data: EventData::SessionStart(SessionStart {
                format_version: FORMAT_VERSION,
                ..start
            }),
        };
        let mut line = serde_json::to_vec(&first)
            .map_err(|error| StoreError::io("encoding", &path, error.into()))?;
        line.push(b'\n');
        file.write_all(&line)
            .map_err(|source| StoreError::io("writing", &path, source))?;
        file.sync_all()
            .map_err(|source| StoreError::io("syncing", &path, source))?;
        sync_dir(&self.dir)?;
        Ok(JsonlLog::start(file, path, 2, self.durability))
    }

    /// Reopens a session: reads every event, cuts off a torn last line (reported, and made
    /// durable), and returns a log that appends after the last good event.
    pub fn open(&self, id: &SessionId) -> Result<Opened, StoreError> {
        let path = self.path_of(id)?;
        let read = reader::read_log(&path)?;
        match read.events.first().map(|event| &event.data) {
            Some(EventData::SessionStart(start)) if start.format_version > FORMAT_VERSION => {
                return Err(StoreError::NewerFormat {
                    path,
                    found: start.format_version,
                });
            }
            Some(EventData::SessionStart(_)) => {}
            Some(other) => {
                return Err(StoreError::NotASession {
                    path,
                    kind: other.kind().to_owned(),
                });
            }
            None => {
                return Err(StoreError::NotASession {
                    path,
                    kind: "nothing".to_owned(),
                });
            }
        }
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
        Ok(Opened {
            log: JsonlLog::start(file, path, next_seq, self.durability),
            events: read.events,
            torn_bytes_dropped: read.torn_bytes,
        })
    }
}

/// Makes a new directory entry durable (the file exists after a crash, not only its data).
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| StoreError::io("syncing", dir, source))
}

/// An open session file. Appends from any number of tasks; one writer thread writes them.
/// Dropping the log lets the writer finish what it was given and waits for it.
pub struct JsonlLog {
    path: PathBuf,
    durability: Durability,
    shared: Arc<Mutex<Shared>>,
    sender: Option<Sender<Command>>,
    writer: Option<JoinHandle<()>>,
}

impl JsonlLog {
    fn start(file: File, path: PathBuf, next_seq: u64, durability: Durability) -> Self {
        let shared = Arc::new(Mutex::new(Shared {
            next_seq,
            ..Shared::default()
        }));
        let (sender, commands) = mpsc::channel();
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("toolrail-log-writer".to_owned())
            .spawn(move || writer::run(file, commands, writer_shared));
        match writer {
            Ok(handle) => Self {
                path,
                durability,
                shared,
                sender: Some(sender),
                writer: Some(handle),
            },
            Err(error) => {
                // No writer, no log: every append is refused with the reason.
                shared.lock().failed = Some(SinkError::Refused(format!(
                    "the log writer thread could not start: {error}"
                )));
                Self {
                    path,
                    durability,
                    shared,
                    sender: None,
                    writer: None,
                }
            }
        }
    }

    /// The session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns once every event appended before the call is durable.
    pub async fn durable_barrier(&self) -> Result<(), SinkError> {
        let (ack, answer) = oneshot::channel();
        {
            let shared = self.shared.lock();
            refuse_if_unusable(&shared)?;
            self.send(Command::Barrier { ack })?;
        }
        answer.await.unwrap_or(Err(SinkError::Closed))
    }

    fn send(&self, command: Command) -> Result<(), SinkError> {
        match &self.sender {
            Some(sender) => sender.send(command).map_err(|_| SinkError::Closed),
            None => Err(SinkError::Closed),
        }
    }
}

fn refuse_if_unusable(shared: &Shared) -> Result<(), SinkError> {
    if let Some(failure) = &shared.failed {
        return Err(failure.clone());
    }
    if shared.closed {
        return Err(SinkError::Closed);
    }
    Ok(())
}

impl EventSink for JsonlLog {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        let wait = self.durability == Durability::Strict && urgency == AppendUrgency::Durable;
        // The lock makes taking a `seq` and queueing the event one step, so the queue order
        // is the `seq` order whatever the number of appenders.
        let mut shared = self.shared.lock();
        if let Err(refusal) = refuse_if_unusable(&shared) {
            return AppendFuture::done(Err(refusal));
        }
        let seq = shared.next_seq;
        let event = Box::new(Event {
            seq,
            ts: draft.ts,
            turn: draft.turn,
            step: draft.step,
            call_id: draft.call_id,
            data: draft.data,
        });
        let (ack, answer) = if wait {
            let (ack, answer) = oneshot::channel();
            (Some(ack), Some(answer))
        } else {
            (None, None)
        };
        if let Err(refusal) = self.send(Command::Append {
            event,
            sync: wait,
            ack,
        }) {
            return AppendFuture::done(Err(refusal));
        }
        shared.next_seq += 1;
        drop(shared);
        match answer {
            None => AppendFuture::done(Ok(seq)),
            Some(answer) => AppendFuture::Waiting(Box::pin(async move {
                answer.await.unwrap_or(Err(SinkError::Closed))
            })),
        }
    }
}

impl Drop for JsonlLog {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        // Closing the channel ends the writer after it wrote (and synced) what it was given.
        drop(self.sender.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}
