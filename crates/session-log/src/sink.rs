//! The seam through which facts enter a session log, and an in-memory log for tests and
//! embedders that persist elsewhere.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::event::{Event, EventData};
use crate::ids::{CallId, StepId, TurnId};
use crate::time::Timestamp;

/// A boxed, sendable future, as returned by the object-safe async traits of toolrail.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An event before the log gave it a place: the log assigns `seq`. The producer stamps the
/// time (it usually has just read the clock anyway).
#[derive(Clone, Debug, PartialEq)]
pub struct EventDraft {
    /// The event's time; the log keeps it as given.
    pub ts: Timestamp,
    /// The user turn the event belongs to (`None` outside a turn).
    pub turn: Option<TurnId>,
    /// The model request inside the turn, if any.
    pub step: Option<StepId>,
    /// The tool call the event is about, if any.
    pub call_id: Option<CallId>,
    /// The kind and its data.
    pub data: EventData,
}

impl EventDraft {
    /// The event this draft becomes at `seq`: what every log appends.
    pub fn into_event(self, seq: u64) -> Event {
        Event {
            seq,
            ts: self.ts,
            turn: self.turn,
            step: self.step,
            call_id: self.call_id,
            data: self.data,
        }
    }
}

/// How durable an append must be before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendUrgency {
    /// The store may buffer the event; it is durable by the next barrier.
    Buffered,
    /// The event guards an action that follows it (a `tool/start` of a call that may change
    /// the world, a commit): under the strict durability mode the store makes it durable
    /// before returning.
    Durable,
}

/// Why a log refused an event. After a refusal the pipeline starts nothing new.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The store could not write (disk full, connection lost, …).
    #[error("the session log refused the write: {0}")]
    Refused(String),
    /// The log was closed.
    #[error("the session log is closed")]
    Closed,
    /// The session was taken over: another holder's lease fences this log, and nothing it
    /// appends is written any more. Whoever drives the session must stop.
    #[error(
        "session `{session}` was taken over (its lease token is now {holder}, this log holds {held}): stop driving it; nothing more was written"
    )]
    TakenOver {
        /// The id of the session taken over.
        session: String,
        /// The token of the session's lease now (0 when no lease is left).
        holder: i64,
        /// The lease token this log was opened under.
        held: i64,
    },
}

impl SinkError {
    /// Whether the session's lease was lost: no append of this log can succeed again.
    pub fn is_taken_over(&self) -> bool {
        matches!(self, Self::TakenOver { .. })
    }
}

/// The answer of [`EventSink::append`]: already settled (no allocation; the common case for
/// in-memory sinks and for stores that only enqueue a buffered event), or still waiting
/// (for durability, a full queue, a network round trip).
pub enum AppendFuture<'a> {
    /// Settled on the spot (made with [`AppendFuture::done`]); the answer is taken when
    /// polled, leaving `None`.
    Done(Option<Result<u64, SinkError>>),
    /// Still to settle.
    Waiting(BoxFuture<'a, Result<u64, SinkError>>),
}

impl AppendFuture<'_> {
    /// An append that settled on the spot.
    pub fn done(result: Result<u64, SinkError>) -> Self {
        Self::Done(Some(result))
    }
}

impl Future for AppendFuture<'_> {
    type Output = Result<u64, SinkError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Done(result) => Poll::Ready(result.take().unwrap_or_else(|| {
                Err(SinkError::Refused(
                    "an append future was polled after it completed".to_owned(),
                ))
            })),
            Self::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

/// Where the pipeline writes facts.
///
/// Implementors guarantee: events are given consecutive `seq` numbers starting at 1 in the
/// order their appends were accepted; an `Ok` answer means the event is part of the log (and
/// durable, if the urgency and the store's mode ask for it); an `Err` means it is not, and
/// no later append may be given a `seq` that implies otherwise.
pub trait EventSink: Send + Sync {
    /// Appends one event and returns its `seq`.
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_>;

    /// The span the next call recorded here opens, when the session writing to this log
    /// exports telemetry: the pipeline writes it into the call's `tool/call` and hands it
    /// to the tool (an MCP call passes it on to its server). `None` (the default) for a log
    /// that is not traced.
    fn next_call_span(&self) -> Option<crate::TraceRef> {
        None
    }
}

/// A log kept in memory. Cheap, exact, and able to refuse writes on demand (to test what
/// happens when a real store fails).
#[derive(Default)]
pub struct MemorySink {
    state: Mutex<MemoryState>,
}

/// Events in fixed-size chunks: appending never moves earlier events (a growing `Vec` of
/// large events spent most of a trivial call's time copying them).
#[derive(Default)]
struct MemoryState {
    chunks: Vec<Vec<Event>>,
    len: u64,
    refuse_after: Option<u64>,
}

// Small enough (with events of ~150 bytes) to stay below malloc's mmap threshold, so chunks
// reuse freed heap memory instead of page-faulting fresh mappings.
const CHUNK: usize = 256;

impl MemoryState {
    fn iter(&self) -> impl Iterator<Item = &Event> {
        self.chunks.iter().flatten()
    }
}

impl MemorySink {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `accepted` more events, then refuses every append.
    pub fn refuse_after(&self, accepted: u64) {
        let mut state = self.state.lock();
        let len = state.len;
        state.refuse_after = Some(len + accepted);
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().iter().cloned().collect()
    }

    /// The kinds of the events so far, in order.
    pub fn kinds(&self) -> Vec<String> {
        self.state
            .lock()
            .iter()
            .map(|event| event.data.kind().to_owned())
            .collect()
    }

    /// The number of events so far.
    pub fn len(&self) -> usize {
        usize::try_from(self.state.lock().len).unwrap_or(usize::MAX)
    }

    /// Whether no event was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn append_now(&self, draft: EventDraft) -> Result<u64, SinkError> {
        let mut state = self.state.lock();
        let seq = state.len + 1;
        if state.refuse_after.is_some_and(|limit| seq > limit) {
            return Err(SinkError::Refused(format!(
                "memory sink configured to refuse events after seq {}",
                seq - 1
            )));
        }
        if state.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
            state.chunks.push(Vec::with_capacity(CHUNK));
        }
        state.len = seq;
        let event = draft.into_event(seq);
        if let Some(chunk) = state.chunks.last_mut() {
            chunk.push(event);
        }
        Ok(seq)
    }
}

impl EventSink for MemorySink {
    fn append(&self, draft: EventDraft, _urgency: AppendUrgency) -> AppendFuture<'_> {
        AppendFuture::done(self.append_now(draft))
    }
}

/// A session log of any store: appends, a barrier that makes them durable, and the points
/// of a session where the log's durability mode may sync. The stores
/// (`toolrail-session-store`) implement it; recovery appends through it.
pub trait SessionLog: EventSink {
    /// Returns once every event appended before the call is durable, whatever the log's
    /// durability mode: the caller asks for a sync.
    fn barrier(&self) -> BoxFuture<'_, Result<(), SinkError>>;

    /// The session reached `point`: returns once the events appended before it are as
    /// durable as the log's mode promises there. A log that syncs at every append, or never
    /// unless asked, returns at once. By default a barrier: a log that does not say how it
    /// keeps its promises syncs.
    fn settle(&self, point: Settle) -> BoxFuture<'_, Result<(), SinkError>> {
        let _ = point;
        self.barrier()
    }
}

/// A point of a session where a log may have promised a sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// A batch of tool calls is committed (its `step/end` is appended).
    BatchEnd,
    /// A turn ended (its `turn/end` is appended).
    TurnEnd,
}

/// The memory log has nothing to sync: a barrier (and so every settle) returns at once.
impl SessionLog for MemorySink {
    fn barrier(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}
