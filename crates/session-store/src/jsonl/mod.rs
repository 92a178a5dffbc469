//! The embedded store: one JSON Lines file per session, `<dir>/<session-id>.jsonl`.

mod lock;
mod reader;
mod scan;

pub use lock::{DEFAULT_LOCK_WAIT, LockHolder};
pub use scan::{Envelope, ScannedSession};

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use super::spill::{BlobShelf, DEFAULT_BLOB_CAP, decode_stored, load_form};
use super::writer::{Group, Medium, Writers};
use super::{Durability, Opened, SessionStore, StoreError, StoreLog, check_session_id};
use toolrail_session_log::SessionId;
use toolrail_session_log::SinkError;
use toolrail_session_log::Timestamp;
use toolrail_session_log::{
    Event, EventData,
    event::{FORMAT_VERSION, SessionStart},
};

/// A folder of session files.
///
/// # Example
///
/// One log per file at a time: while a session is open, opening it again is refused; once
/// its log is dropped, it reopens with every event, and appends go on from the next `seq`.
///
/// ```
/// use toolrail_session_log::{
///     AppendUrgency, ContentBlock, EventData, EventDraft, EventSink, SessionId, Timestamp,
///     TurnId, event::{SessionStart, TurnStart},
/// };
/// use toolrail_session_store::{Durability, JsonlStore, SessionStore, StoreError};
///
/// let turn_start = || EventDraft {
///     ts: Timestamp::now(),
///     turn: Some(TurnId(1)),
///     step: None,
///     call_id: None,
///     data: EventData::TurnStart(TurnStart { user: vec![ContentBlock::text("hello")], trace: None, caller: None, client: false }),
/// };
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let store = JsonlStore::new(dir.path(), Durability::Strict)?;
/// let id = SessionId::new("s1");
/// let start = SessionStart {
///     format_version: 0, // the store writes its own
///     session_id: id.clone(),
///     tools: vec![],
///     meta: None,
/// };
/// let log = store.create(start)?;
/// assert_eq!(log.append(turn_start(), AppendUrgency::Durable).await?, 2);
/// assert!(matches!(store.open(&id), Err(StoreError::Locked { .. })));
/// assert_eq!(store.read(&id)?.events.len(), 2); // reading takes no lock
/// drop(log);
///
/// let opened = store.open(&id)?;
/// assert_eq!(opened.events.len(), 2);
/// assert_eq!(opened.log.append(turn_start(), AppendUrgency::Durable).await?, 3);
/// assert_eq!(store.path_of(&id)?, dir.path().join("s1.jsonl"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    durability: Durability,
    blob_cap: usize,
    lock_wait: Duration,
    writers: Arc<Writers>,
}

/// The log of a JSONL session.
pub type JsonlLog = StoreLog;

impl JsonlStore {
    /// A store in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Result<Self, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::io("creating", &dir, source))?;
        Ok(Self {
            dir,
            durability,
            blob_cap: DEFAULT_BLOB_CAP,
            lock_wait: DEFAULT_LOCK_WAIT,
            writers: Arc::default(),
        })
    }

    /// How long [`SessionStore::open`] waits for a session whose lock is held by a process
    /// that is exiting (killed a moment ago: the kernel lets go of its files late in its
    /// exit) before it reports the holder (default [`DEFAULT_LOCK_WAIT`]). A live holder is
    /// reported at once.
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Values (and details) whose compact JSON is longer than `bytes` are kept beside the
    /// file, in `<session-id>.blobs/`, under their SHA-256.
    pub fn with_blob_cap(mut self, bytes: usize) -> Self {
        self.blob_cap = bytes;
        self
    }

    /// How many writer threads the store's open sessions share (default
    /// [`DEFAULT_WRITERS`](crate::DEFAULT_WRITERS), at most
    /// [`MAX_WRITERS`](crate::MAX_WRITERS)): a thousand open sessions are written by these,
    /// not by a thread each.
    pub fn with_writers(mut self, threads: usize) -> Self {
        self.writers = Arc::new(Writers::new(threads));
        self
    }

    fn shelf(&self, id: &SessionId) -> FileShelf {
        FileShelf {
            dir: self.dir.join(format!("{}.blobs", id.as_str())),
        }
    }

    /// The file of a session.
    pub fn path_of(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        check_session_id(id)?;
        Ok(self.dir.join(format!("{}.jsonl", id.as_str())))
    }

    /// Every event of a session, read without opening it for writing: nothing is locked,
    /// cut or repaired, so a session another process is writing can be watched. A torn
    /// last line is left out and its length reported.
    pub fn read(&self, id: &SessionId) -> Result<SessionRead, StoreError> {
        let path = self.path_of(id)?;
        let mut read = reader::read_log(&path)?;
        check_first(&path, &read.events)?;
        load_all(&mut read, &path, &self.shelf(id))?;
        Ok(SessionRead {
            events: read.events,
            torn_bytes: read.torn_bytes,
        })
    }

    /// A session scanned without decoding its payloads: every envelope read and checked as
    /// [`read`](Self::read) checks it, each payload decoded when its event is asked for. What
    /// lists sessions, counts turns or finds how a session ended reads this.
    pub fn scan(&self, id: &SessionId) -> Result<ScannedSession, StoreError> {
        scan::scan(&self.path_of(id)?, self.shelf(id))
    }
}

impl JsonlStore {
    /// The event one line of session `id`'s file holds (read by hand, as a live view reads
    /// new lines), with the values that were kept beside the log for their size put back.
    pub fn decode_line(&self, id: &SessionId, line: &[u8]) -> Result<Event, StoreError> {
        decode_stored(line, &self.shelf(id)).map_err(|why| StoreError::Corrupt {
            path: self.dir.join(format!("{}.jsonl", id.as_str())),
            line: 0,
            why,
        })
    }
}

/// Puts back what every event read from `path` keeps on the shelf.
fn load_all(
    read: &mut reader::ReadLog,
    path: &Path,
    shelf: &dyn BlobShelf,
) -> Result<(), StoreError> {
    let mut refs = std::mem::take(&mut read.shelf_refs).into_iter().peekable();
    for (index, event) in read.events.iter_mut().enumerate() {
        let own = refs.next_if(|(at, _)| *at == index).map(|(_, refs)| refs);
        load_form(event, own, shelf).map_err(|why| StoreError::Corrupt {
            path: path.to_path_buf(),
            line: usize::try_from(event.seq).unwrap_or(usize::MAX),
            why,
        })?;
    }
    Ok(())
}

/// A session as read, without a log to append to.
#[derive(Debug)]
pub struct SessionRead {
    /// Every complete event, in `seq` order.
    pub events: Vec<Event>,
    /// Bytes of a torn last line that were left out.
    pub torn_bytes: u64,
}

impl SessionStore for JsonlStore {
    type Log = JsonlLog;

    fn create(&self, start: SessionStart) -> Result<JsonlLog, StoreError> {
        let path = self.path_of(&start.session_id)?;
        let shelf = self.shelf(&start.session_id);
        let first = first_event(start);
        let mut line = serde_json::to_vec(&first)
            .map_err(|error| StoreError::io("encoding", &path, error.into()))?;
        line.push(b'\n');
        // In mode `none` nothing is synced unless a barrier asks, the first line included.
        let file = create_whole(&self.dir, &path, &line, self.durability.syncs())?;
        let name = path.display().to_string();
        Ok(StoreLog::start(
            &self.writers,
            JsonlFile::new(file, line.len() as u64, shelf, self.durability.syncs()),
            name,
            2,
            self.durability,
            self.blob_cap,
        ))
    }

    fn open(&self, id: &SessionId) -> Result<Opened<JsonlLog>, StoreError> {
        let path = self.path_of(id)?;
        // The lock comes first: a session another log holds is not even read.
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|source| StoreError::io("opening", &path, source))?;
        lock::lock(&file, &path, self.lock_wait)?;
        let mut read = reader::read_log(&path)?;
        check_first(&path, &read.events)?;
        let shelf = self.shelf(id);
        load_all(&mut read, &path, &shelf)?;
        if read.torn_bytes > 0 {
            file.set_len(read.good_len)
                .map_err(|source| StoreError::io("truncating", &path, source))?;
            file.sync_all()
                .map_err(|source| StoreError::io("syncing", &path, source))?;
        }
        if read.unterminated {
            // The last event was kept without its newline; the next line must not join it.
            (&file)
                .write_all(b"\n")
                .and_then(|()| file.sync_data())
                .map_err(|source| StoreError::io("ending the last line of", &path, source))?;
            read.good_len += 1;
        }
        let next_seq = read.events.len() as u64 + 1;
        let name = path.display().to_string();
        Ok(Opened {
            log: StoreLog::start(
                &self.writers,
                JsonlFile::new(file, read.good_len, shelf, self.durability.syncs()),
                name,
                next_seq,
                self.durability,
                self.blob_cap,
            ),
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

/// Makes `path` appear holding `first` (its `session/start` line), or not at all: the line
/// is written (and, with `sync`, synced) under a hidden name, then linked to `path` (which fails if
/// `path` exists, so no session is overwritten). A crash never leaves an empty or torn log
/// whose session never started — at worst a hidden `.creating-…` file (a second name for the
/// log if the crash came between the link and the unlink). The file comes back
/// locked, in append mode. Where links are not supported, it is created in place.
fn create_whole(dir: &Path, path: &Path, first: &[u8], sync: bool) -> Result<File, StoreError> {
    let exists = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            StoreError::Exists {
                path: path.to_path_buf(),
            }
        } else {
            StoreError::io("creating", path, source)
        }
    };
    // Short, so a long session id still fits; unique per process and call.
    static CREATING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = CREATING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let hidden = dir.join(format!(".creating-{}-{number}", std::process::id()));
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&hidden)
        .map_err(|source| StoreError::io("creating", &hidden, source))?;
    let written = (|| {
        lock::lock(&file, &hidden, Duration::ZERO)?;
        file.write_all(first)
            .map_err(|source| StoreError::io("writing", &hidden, source))?;
        if sync {
            file.sync_all()
                .map_err(|source| StoreError::io("syncing", &hidden, source))?;
        }
        match std::fs::hard_link(&hidden, path) {
            Ok(()) => Ok(true),
            Err(source) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(exists(source))
            }
            Err(_) => Ok(false),
        }
    })();
    let _ = std::fs::remove_file(&hidden);
    if written? {
        if sync {
            sync_dir(dir)?;
        }
        return Ok(file);
    }
    // No links here: the old way, where a crash between create and sync leaves a log
    // without its first line (opening it then says so).
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(path)
        .map_err(exists)?;
    lock::lock(&file, path, Duration::ZERO)?;
    file.write_all(first)
        .map_err(|source| StoreError::io("writing", path, source))?;
    if sync {
        file.sync_all()
            .map_err(|source| StoreError::io("syncing", path, source))?;
        sync_dir(dir)?;
    }
    Ok(file)
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
    /// Length of the file up to the last group that was written whole.
    len: u64,
    shelf: FileShelf,
    /// Sync what was written when the session closes (every mode but `none`).
    sync_on_close: bool,
}

impl JsonlFile {
    fn new(file: File, len: u64, shelf: FileShelf, sync_on_close: bool) -> Self {
        Self {
            sync_on_close,
            file,
            len,
            shelf,
        }
    }
}

/// Large values as files `<hex>.json` in the session's blob folder, each written to a
/// temporary name, synced and renamed, so a crash leaves either the whole blob or none.
struct FileShelf {
    dir: PathBuf,
}

impl FileShelf {
    fn path(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!("{}.json", digest.trim_start_matches("sha256:")))
    }
}

impl BlobShelf for FileShelf {
    fn put(&mut self, digest: &str, bytes: &[u8]) -> Result<(), String> {
        let target = self.path(digest);
        if target.exists() {
            return Ok(());
        }
        let fail =
            |what: &str, error: std::io::Error| format!("{what} {}: {error}", target.display());
        std::fs::create_dir_all(&self.dir)
            .map_err(|error| fail("creating the folder of", error))?;
        let temporary = target.with_extension("tmp");
        let mut file = File::create(&temporary).map_err(|error| fail("creating", error))?;
        file.write_all(bytes)
            .map_err(|error| fail("writing", error))?;
        file.sync_all().map_err(|error| fail("syncing", error))?;
        std::fs::rename(&temporary, &target).map_err(|error| fail("renaming into", error))?;
        sync_dir(&self.dir).map_err(|error| error.to_string())
    }

    fn get(&self, digest: &str) -> Result<Vec<u8>, String> {
        let path = self.path(digest);
        std::fs::read(&path).map_err(|error| {
            format!(
                "the large value {digest} ({}) cannot be read: {error}",
                path.display()
            )
        })
    }
}

impl Medium for JsonlFile {
    fn commit(&mut self, group: &Group<'_>, sync: bool) -> Result<(), SinkError> {
        // The large values are durable before the lines that point at them.
        for (digest, bytes) in group.blobs {
            self.shelf.put(digest, bytes).map_err(SinkError::Refused)?;
        }
        let written = self.file.write_all(group.bytes).map_err(|error| {
            SinkError::Refused(format!("writing the session file failed: {error}"))
        });
        let synced = written.and_then(|()| {
            if sync {
                self.file.sync_data().map_err(|error| {
                    SinkError::Refused(format!("syncing the session file failed: {error}"))
                })
            } else {
                Ok(())
            }
        });
        match synced {
            Ok(()) => {
                self.len += group.bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                // The appenders of this group are told it failed: none of its lines may come
                // back when the session is reopened.
                let _ = self
                    .file
                    .set_len(self.len)
                    .and_then(|()| self.file.sync_data());
                Err(error)
            }
        }
    }

    fn close(&mut self) {
        // Best effort: the last writes reach the disk before the file is closed, in every
        // mode that syncs at all.
        if self.sync_on_close {
            let _ = self.file.sync_data();
        }
    }
}
