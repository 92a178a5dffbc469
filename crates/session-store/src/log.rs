//! The appending side of a store's session: any number of tasks append. Each encodes its
//! event on its own thread (large values collected for the shelf), then, under the session's
//! lock, takes the next `seq` and copies the line into the pending group, so the group's
//! order is the `seq` order. Appends that need not wait return at once.

use std::cell::RefCell;
use std::io::Write;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::Durability;
use super::spill::{Collected, encode_stored};
use super::writer::{Line, Medium, Session, SessionState, Waiter, Writers};
use toolrail_session_log::{
    AppendFuture, AppendUrgency, BoxFuture, EventDraft, EventSink, SessionLog, Settle, SinkError,
};

/// How every encoded event begins before its `seq` is known: the envelope writes `seq`
/// first, and the event is encoded with `seq` 0.
const UNNUMBERED: &[u8] = b"{\"seq\":0,";

thread_local! {
    /// Each appending thread's encoding buffer, reused from event to event.
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(1024));
}

/// An open session of a store. Dropping it commits what it was given (syncing it in every
/// mode that syncs), closes the session and returns once it is closed.
pub struct StoreLog {
    name: String,
    durability: Durability,
    blob_cap: usize,
    session: Arc<Session>,
}

impl StoreLog {
    pub(crate) fn start(
        writers: &Writers,
        medium: impl Medium,
        name: String,
        next_seq: u64,
        durability: Durability,
        blob_cap: usize,
    ) -> Self {
        Self {
            name,
            durability,
            blob_cap,
            session: writers.open(medium, next_seq),
        }
    }

    /// Where the session is kept (a file path, a database and session id).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many times the writer has synced this session so far (each sync covers a group
    /// of events): what a durability mode costs, counted.
    pub fn syncs(&self) -> u64 {
        self.session.state.lock().syncs
    }

    /// Returns once every event appended before the call is durable.
    pub async fn durable_barrier(&self) -> Result<(), SinkError> {
        let (ack, answer) = oneshot::channel();
        {
            let mut state = self.session.state.lock();
            refuse_if_unusable(&state)?;
            state.pending.sync = true;
            state.pending.waiters.push(Waiter::Barrier(ack));
            self.session.queue(&mut state, true);
        }
        answer.await.unwrap_or(Err(SinkError::Closed))
    }

    /// Encodes `draft` into `line` as it is stored, numbered 0, with the large values it
    /// moves to the shelf.
    fn encode(&self, draft: EventDraft, line: &mut Vec<u8>) -> Result<Collected, SinkError> {
        let event = draft.into_event(0);
        let mut blobs = Collected::default();
        line.clear();
        encode_stored(&event, self.blob_cap, &mut blobs, line).map_err(SinkError::Refused)?;
        if !line.starts_with(UNNUMBERED) {
            return Err(SinkError::Refused(
                "an encoded event does not begin with its seq".to_owned(),
            ));
        }
        // Freed here, on the thread that made it.
        drop(event);
        Ok(blobs)
    }
}

fn refuse_if_unusable(state: &SessionState) -> Result<(), SinkError> {
    if let Some(failure) = &state.failed {
        return Err(failure.clone());
    }
    if state.closed {
        return Err(SinkError::Closed);
    }
    Ok(())
}

/// Copies the encoded `line` into the group as event `seq`.
fn push_line(state: &mut SessionState, seq: u64, line: &[u8], blobs: Collected) {
    let pending = &mut state.pending;
    let start = pending.bytes.len();
    pending.bytes.extend_from_slice(b"{\"seq\":");
    // Writing to a vector cannot fail.
    let _ = write!(pending.bytes, "{seq}");
    pending.bytes.push(b',');
    pending
        .bytes
        .extend_from_slice(line.get(UNNUMBERED.len()..).unwrap_or_default());
    let end = pending.bytes.len();
    pending.bytes.push(b'\n');
    pending.lines.push(Line { seq, start, end });
    pending.blobs.extend(blobs.0);
}

impl EventSink for StoreLog {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        let wait = self.durability == Durability::Strict && urgency == AppendUrgency::Durable;
        let queued = LINE.with_borrow_mut(|line| {
            let blobs = self.encode(draft, line)?;
            let mut state = self.session.state.lock();
            refuse_if_unusable(&state)?;
            let seq = state.next_seq;
            state.next_seq += 1;
            push_line(&mut state, seq, line, blobs);
            let answer = wait.then(|| {
                let (ack, answer) = oneshot::channel();
                state.pending.sync = true;
                state.pending.waiters.push(Waiter::Append(seq, ack));
                answer
            });
            self.session.queue(&mut state, wait);
            Ok((seq, answer))
        });
        match queued {
            Err(refusal) => AppendFuture::done(Err(refusal)),
            Ok((seq, None)) => AppendFuture::done(Ok(seq)),
            Ok((_, Some(answer))) => AppendFuture::Waiting(Box::pin(async move {
                answer.await.unwrap_or(Err(SinkError::Closed))
            })),
        }
    }
}

impl SessionLog for StoreLog {
    fn barrier(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(self.durable_barrier())
    }

    /// `strict` has synced every event it promised to at its append, and syncs once more at
    /// a turn's end; `batched` syncs at every batch's and turn's end; `none` never syncs
    /// unless a barrier asks.
    fn settle(&self, point: Settle) -> BoxFuture<'_, Result<(), SinkError>> {
        let sync = match (self.durability, point) {
            (Durability::Strict, Settle::TurnEnd) | (Durability::Batched, _) => true,
            (Durability::Strict, Settle::BatchEnd) | (Durability::None, _) => false,
        };
        if sync {
            Box::pin(self.durable_barrier())
        } else {
            Box::pin(std::future::ready(refuse_if_unusable(
                &self.session.state.lock(),
            )))
        }
    }
}

impl Drop for StoreLog {
    fn drop(&mut self) {
        self.session.close();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use toolrail_session_log::{EventData, Timestamp, event::StepEnd};

    use crate::writer::Group;

    use super::*;

    /// Counts the syncs the writer asks for.
    struct Counting(Arc<AtomicUsize>);

    impl Medium for Counting {
        fn commit(&mut self, _group: &Group<'_>, sync: bool) -> Result<(), SinkError> {
            if sync {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }

        fn close(&mut self) {}
    }

    fn step_end() -> EventDraft {
        EventDraft {
            ts: Timestamp::now(),
            turn: None,
            step: None,
            call_id: None,
            data: EventData::StepEnd(StepEnd::default()),
        }
    }

    /// What each mode syncs at a batch's end and at a turn's end: `none` never, unless a
    /// barrier asks; `strict` at the turn's end (its durable appends synced themselves);
    /// `batched` at both.
    #[tokio::test]
    async fn each_mode_syncs_where_it_promises_and_none_only_when_asked() {
        for (durability, at_batch_end, at_turn_end) in [
            (Durability::None, 0, 0),
            (Durability::Strict, 0, 1),
            (Durability::Batched, 1, 2),
        ] {
            let syncs = Arc::new(AtomicUsize::new(0));
            let log = StoreLog::start(
                &Writers::new(1),
                Counting(Arc::clone(&syncs)),
                "counting".to_owned(),
                1,
                durability,
                crate::DEFAULT_BLOB_CAP,
            );
            log.append(step_end(), AppendUrgency::Buffered)
                .await
                .unwrap();
            log.settle(Settle::BatchEnd).await.unwrap();
            assert_eq!(syncs.load(Ordering::SeqCst), at_batch_end, "{durability:?}");
            log.settle(Settle::TurnEnd).await.unwrap();
            assert_eq!(syncs.load(Ordering::SeqCst), at_turn_end, "{durability:?}");
            log.barrier().await.unwrap();
            assert_eq!(
                syncs.load(Ordering::SeqCst),
                at_turn_end + 1,
                "{durability:?}"
            );
        }
    }
}
