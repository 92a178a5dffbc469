//! A session log that also keeps, in memory, what was appended through it since it was
//! last drained: what a turn appended, read without reopening the store (which the open
//! log holds locked). Drafts are kept in the order the store took them, which is `seq`
//! order: the store numbers an event inside `append` itself, and the keeping happens under
//! the same lock.

use std::sync::Arc;

use parking_lot::Mutex;
use toolrail_session_log::{
    AppendFuture, AppendUrgency, BoxFuture, EventDraft, EventSink, SessionLog, Settle, SinkError,
};

pub(crate) struct RecordingLog {
    inner: Arc<dyn SessionLog>,
    kept: Mutex<Vec<EventDraft>>,
}

impl RecordingLog {
    pub(crate) fn new(inner: Arc<dyn SessionLog>) -> Self {
        Self {
            inner,
            kept: Mutex::new(Vec::new()),
        }
    }

    /// What was appended since the last drain, in `seq` order.
    pub(crate) fn drain(&self) -> Vec<EventDraft> {
        std::mem::take(&mut *self.kept.lock())
    }
}

impl EventSink for RecordingLog {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        let mut kept = self.kept.lock();
        kept.push(draft.clone());
        self.inner.append(draft, urgency)
    }
}

impl SessionLog for RecordingLog {
    fn barrier(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.inner.barrier()
    }

    fn settle(&self, point: Settle) -> BoxFuture<'_, Result<(), SinkError>> {
        self.inner.settle(point)
    }
}
