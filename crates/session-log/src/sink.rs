//! The seam through which facts enter a session log, and an in-memory log for tests and
//! embedders that persist elsewhere.

use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::event::{Event, EventData};
use crate::ids::{CallId, StepId, TurnId};
use crate::time::format_rfc3339_utc;

/// A boxed, sendable future, as returned by the object-safe async traits of toolrail.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An event before the log gave it a place: the log assigns `seq` and `ts`.
#[derive(Clone, Debug, PartialEq)]
pub struct EventDraft {
    pub turn: Option<TurnId>,
    pub step: Option<StepId>,
    pub call_id: Option<CallId>,
    pub data: EventData,
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
}

/// Where the pipeline writes facts.
///
/// Implementors guarantee: events are given consecutive `seq` numbers starting at 1 in the
/// order their appends were accepted; an `Ok` answer means the event is part of the log (and
/// durable, if the urgency and the store's mode ask for it); an `Err` means it is not, and
/// no later append may be given a `seq` that implies otherwise.
pub trait EventSink: Send + Sync {
    /// Appends one event and returns its `seq`.
    fn append(
        &self,
        draft: EventDraft,
        urgency: AppendUrgency,
    ) -> BoxFuture<'_, Result<u64, SinkError>>;
}

/// A log kept in memory. Cheap, exact, and able to refuse writes on demand (to test what
/// happens when a real store fails).
#[derive(Default)]
pub struct MemorySink {
    state: Mutex<MemoryState>,
}

#[derive(Default)]
struct MemoryState {
    events: Vec<Event>,
    refuse_after: Option<u64>,
}

impl MemorySink {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `accepted` more events, then refuses every append.
    pub fn refuse_after(&self, accepted: u64) {
        let mut state = self.state.lock();
        let len = state.events.len() as u64;
        state.refuse_after = Some(len + accepted);
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().events.clone()
    }

    /// The kinds of the events so far, in order.
    pub fn kinds(&self) -> Vec<String> {
        self.state
            .lock()
            .events
            .iter()
            .map(|event| event.data.kind().to_owned())
            .collect()
    }

    /// The number of events so far.
    pub fn len(&self) -> usize {
        self.state.lock().events.len()
    }

    /// Whether no event was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn append_now(&self, draft: EventDraft) -> Result<u64, SinkError> {
        let mut state = self.state.lock();
        let seq = state.events.len() as u64 + 1;
        if state.refuse_after.is_some_and(|limit| seq > limit) {
            return Err(SinkError::Refused(format!(
                "memory sink configured to refuse events after seq {}",
                seq - 1
            )));
        }
        state.events.push(Event {
            seq,
            ts: format_rfc3339_utc(SystemTime::now()),
            turn: draft.turn,
            step: draft.step,
            call_id: draft.call_id,
            data: draft.data,
        });
        Ok(seq)
    }
}

impl EventSink for MemorySink {
    fn append(
        &self,
        draft: EventDraft,
        _urgency: AppendUrgency,
    ) -> BoxFuture<'_, Result<u64, SinkError>> {
        let result = self.append_now(draft);
        Box::pin(std::future::ready(result))
    }
}
