//! The writers of a store: a few threads (at most [`MAX_WRITERS`]) shared by every session the
//! store has open, not one per session. Appenders encode their events themselves, into their
//! session's pending group; a writer takes a session's whole group at once and commits it to
//! its medium (a file, a database) — one `write` or one transaction, and at most one sync
//! when any event of the group (or a barrier) asks for it — then answers whoever waits.
//!
//! Waking a thread costs more than writing an event, so a writer is not woken for every
//! event. After a round of groups it naps for at most [`GROUP_WINDOW`]: events that need no
//! answer (every event of mode `none`, the buffered ones of the other modes) wait for the
//! nap to end and are written together; a durable append, a barrier or a close wakes it at
//! once. A writer that found nothing after its nap sleeps until an append wakes it, so an idle
//! session costs no wake-ups. Threads, not async tasks: writes and syncs block, and the log
//! must keep working whatever runtime its users run. A writer thread ends when the last
//! session on it closes and starts again with the next one.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use toolrail_session_log::SinkError;

/// How many writer threads a store uses by default.
pub const DEFAULT_WRITERS: usize = 4;

/// The most writer threads one store may use.
pub const MAX_WRITERS: usize = 8;

/// How long an event that needs no answer may wait in memory for its writer (it reaches the
/// operating system within this; mode `none` syncs it never).
pub(crate) const GROUP_WINDOW: std::time::Duration = std::time::Duration::from_millis(1);

/// Where a writer puts groups of events.
///
/// Implementors guarantee: `commit` stores every line and blob of the group or reports an
/// error; after `Ok` with `sync`, they survive a crash of the machine.
pub(crate) trait Medium: Send + 'static {
    fn commit(&mut self, group: &Group<'_>, sync: bool) -> Result<(), SinkError>;

    /// Called once after the last group, before the medium is dropped.
    fn close(&mut self);
}

/// A group of encoded events, each a line of `bytes` (every line ends with `\n`), and the
/// large values they moved to the shelf, which must be stored before the lines.
pub(crate) struct Group<'a> {
    pub bytes: &'a [u8],
    pub lines: &'a [Line],
    pub blobs: &'a [Blob],
}

impl Group<'_> {
    /// Each event's `seq` and its line, without the newline (what a database stores).
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database stores read lines one by one")
    )]
    pub(crate) fn lines(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.lines.iter().map(|line| {
            let text = self.bytes.get(line.start..line.end).unwrap_or_default();
            (line.seq, text)
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// Where one event's line is in its group's bytes (`end` excludes the newline).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database stores read lines one by one")
)]
pub(crate) struct Line {
    pub seq: u64,
    pub start: usize,
    pub end: usize,
}

/// A large value kept on the shelf: its digest and its bytes.
pub(crate) type Blob = (String, Vec<u8>);

/// Someone waiting for a group's commit.
pub(crate) enum Waiter {
    Append(u64, oneshot::Sender<Result<u64, SinkError>>),
    Barrier(oneshot::Sender<Result<(), SinkError>>),
}

impl Waiter {
    fn answer(self, outcome: &Result<(), SinkError>) {
        // A waiter that stopped waiting does not need its answer.
        match self {
            Self::Append(seq, ack) => drop(ack.send(outcome.clone().map(|()| seq))),
            Self::Barrier(ack) => drop(ack.send(outcome.clone())),
        }
    }
}

/// What the appenders of a session filled since the writer last took it.
#[derive(Default)]
pub(crate) struct Pending {
    pub bytes: Vec<u8>,
    pub lines: Vec<Line>,
    pub blobs: Vec<Blob>,
    /// Whether an event or a barrier of the group asked for a sync.
    pub sync: bool,
    pub waiters: Vec<Waiter>,
}

impl Pending {
    fn clear(&mut self) {
        self.bytes.clear();
        self.lines.clear();
        self.blobs.clear();
        self.sync = false;
    }
}

/// A session's state, shared by its appenders and its writer.
pub(crate) struct SessionState {
    pub next_seq: u64,
    /// Set by the writer on its first failure; every later append is refused with it.
    pub failed: Option<SinkError>,
    /// No more appends: the log is being dropped.
    pub closed: bool,
    /// Groups the writer committed with a sync.
    pub syncs: u64,
    pub pending: Pending,
    /// In its writer's ready list: the next append need not queue it again.
    queued: bool,
    /// Its writer was told that someone waits for this group.
    urged: bool,
    /// The medium is closed and dropped (its file closed, its connection returned).
    finished: bool,
}

/// One open session of a store.
pub(crate) struct Session {
    pub state: Mutex<SessionState>,
    finished: Condvar,
    /// Only its writer locks it; `spare` is the group buffer handed back and forth with
    /// `pending`, so a steady session allocates nothing per group.
    medium: Mutex<WriterSide>,
    hub: Arc<Hub>,
}

struct WriterSide {
    medium: Option<Box<dyn Medium>>,
    spare: Pending,
}

impl Session {
    /// Puts the session in its writer's ready list unless it is there; wakes the writer if
    /// it sleeps, or if it naps and someone waits for the group (`urgent`). Called with the
    /// session's state locked (`state`).
    pub(crate) fn queue(self: &Arc<Self>, state: &mut SessionState, urgent: bool) {
        if state.queued && (state.urged || !urgent) {
            return;
        }
        let mut hub = self.hub.state.lock();
        if !state.queued {
            state.queued = true;
            hub.ready.push(Arc::clone(self));
        }
        state.urged |= urgent;
        hub.urgent |= urgent;
        let wake = match hub.rest {
            Rest::Working => false,
            Rest::Napping => urgent,
            Rest::Sleeping => true,
        };
        if wake {
            self.hub.wake.notify_one();
        }
    }

    /// Closes the session: what was appended is committed (and synced in a mode that
    /// syncs), then the medium is closed. Returns once it is.
    pub(crate) fn close(self: &Arc<Self>) {
        let mut state = self.state.lock();
        state.closed = true;
        if state.finished {
            return;
        }
        self.queue(&mut state, true);
        while !state.finished {
            self.finished.wait(&mut state);
        }
    }

    /// The writer's part: takes the pending group, commits it, answers its waiters, and
    /// closes the medium if the log was closed.
    fn write_pending(&self) {
        let mut side = self.medium.lock();
        let side = &mut *side;
        let (earlier, closing) = {
            let mut state = self.state.lock();
            std::mem::swap(&mut state.pending, &mut side.spare);
            state.queued = false;
            state.urged = false;
            (state.failed.clone(), state.closed)
        };
        let group = &mut side.spare;
        let outcome = match (earlier, side.medium.as_mut()) {
            (Some(failure), _) => Err(failure),
            (None, None) => Err(SinkError::Closed),
            (None, Some(medium)) => {
                let written = Group {
                    bytes: &group.bytes,
                    lines: &group.lines,
                    blobs: &group.blobs,
                };
                if written.is_empty() && !group.sync {
                    Ok(())
                } else {
                    let committed = medium.commit(&written, group.sync);
                    if committed.is_ok() && group.sync {
                        self.state.lock().syncs += 1;
                    }
                    committed
                }
            }
        };
        if let Err(error) = &outcome {
            self.state
                .lock()
                .failed
                .get_or_insert_with(|| error.clone());
        }
        for waiter in group.waiters.drain(..) {
            waiter.answer(&outcome);
        }
        group.clear();
        if closing {
            if let Some(mut medium) = side.medium.take() {
                medium.close();
            }
            self.hub.state.lock().open -= 1;
            self.state.lock().finished = true;
            self.finished.notify_all();
        }
    }
}

/// One writer thread and the sessions it writes.
struct Hub {
    state: Mutex<HubState>,
    wake: Condvar,
}

impl Hub {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(HubState::default()),
            wake: Condvar::new(),
        })
    }
}

#[derive(Default)]
struct HubState {
    ready: Vec<Arc<Session>>,
    /// A session in `ready` has someone waiting for its group: no nap.
    urgent: bool,
    rest: Rest,
    /// Sessions on this writer not yet closed.
    open: usize,
    running: bool,
}

/// What a writer thread is doing, for an appender deciding whether to wake it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Rest {
    #[default]
    Working,
    /// Waiting at most [`GROUP_WINDOW`] for more events: woken only for a waiter.
    Napping,
    /// Waiting for the next event, however long.
    Sleeping,
}

/// The writer threads of a store.
pub(crate) struct Writers {
    hubs: Vec<Arc<Hub>>,
}

impl std::fmt::Debug for Writers {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Writers")
            .field("threads", &self.hubs.len())
            .finish()
    }
}

impl Default for Writers {
    fn default() -> Self {
        Self::new(DEFAULT_WRITERS)
    }
}

impl Writers {
    /// `count` writer threads at most (1 to [`MAX_WRITERS`]), each started when a session
    /// first needs it.
    pub(crate) fn new(count: usize) -> Self {
        let hubs = (0..count.clamp(1, MAX_WRITERS))
            .map(|_| Hub::new())
            .collect();
        Self { hubs }
    }

    /// A new session on the writer with the fewest open sessions, whose next event gets
    /// `next_seq`. If no writer thread can be started, the session refuses every append
    /// with the reason.
    pub(crate) fn open(&self, medium: impl Medium, next_seq: u64) -> Arc<Session> {
        let hub = self
            .hubs
            .iter()
            .min_by_key(|hub| hub.state.lock().open)
            .map(Arc::clone)
            .unwrap_or_else(Hub::new);
        let started = {
            let mut state = hub.state.lock();
            let started = if state.running {
                Ok(())
            } else {
                let runner = Arc::clone(&hub);
                std::thread::Builder::new()
                    .name("toolrail-writer".to_owned())
                    .spawn(move || run(&runner))
                    .map(drop)
            };
            if started.is_ok() {
                state.running = true;
                state.open += 1;
            }
            started
        };
        let failed = started.as_ref().err().map(|error| {
            SinkError::Refused(format!("the log writer thread could not start: {error}"))
        });
        let finished = failed.is_some();
        Arc::new(Session {
            state: Mutex::new(SessionState {
                next_seq,
                failed,
                closed: false,
                syncs: 0,
                pending: Pending::default(),
                queued: false,
                urged: false,
                finished,
            }),
            finished: Condvar::new(),
            medium: Mutex::new(WriterSide {
                medium: (!finished).then(|| Box::new(medium) as Box<dyn Medium>),
                spare: Pending::default(),
            }),
            hub,
        })
    }
}

/// A writer thread: naps after each round unless someone waits, writes every ready
/// session's group, sleeps when there is none, ends when no session is open on it.
fn run(hub: &Hub) {
    let mut batch = Vec::new();
    loop {
        {
            let mut state = hub.state.lock();
            // After every round a nap, even with groups ready: a writer as fast as its
            // appenders would otherwise write each event alone. Someone waiting cuts it short.
            if !state.urgent && state.open > 0 {
                state.rest = Rest::Napping;
                let _ = hub.wake.wait_for(&mut state, GROUP_WINDOW);
            }
            while state.ready.is_empty() {
                if state.open == 0 {
                    state.rest = Rest::Working;
                    state.running = false;
                    return;
                }
                state.rest = Rest::Sleeping;
                hub.wake.wait(&mut state);
            }
            state.rest = Rest::Working;
            state.urgent = false;
            std::mem::swap(&mut batch, &mut state.ready);
        }
        for session in batch.drain(..) {
            session.write_pending();
        }
    }
}
