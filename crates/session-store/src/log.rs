//! The appending side of a store's session: any number of tasks append; taking a `seq` and
//! queueing the event for the writer is one step under one lock, so the queue order is the
//! `seq` order. Appends that need not wait return at once without allocating.

use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::Durability;
use super::writer::{self, Command, Medium, Shared};
use toolrail_session_log::{
    AppendFuture, AppendUrgency, BoxFuture, EventDraft, EventSink, SessionLog, Settle, SinkError,
};

/// An open session of a store. Dropping it lets the writer finish what it was given and
/// waits for it.
pub struct StoreLog {
    name: String,
    durability: Durability,
    shared: Arc<Mutex<Shared>>,
    sender: Option<Sender<Command>>,
    writer: Option<JoinHandle<()>>,
}

impl StoreLog {
    pub(crate) fn start(
        medium: impl Medium,
        name: String,
        next_seq: u64,
        durability: Durability,
    ) -> Self {
        let shared = Arc::new(Mutex::new(Shared {
            next_seq,
            ..Shared::default()
        }));
        let (sender, commands) = mpsc::channel();
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("toolrail-log-writer".to_owned())
            .spawn(move || writer::run(medium, commands, writer_shared));
        match writer {
            Ok(handle) => Self {
                name,
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
                    name,
                    durability,
                    shared,
                    sender: None,
                    writer: None,
                }
            }
        }
    }

    /// Where the session is kept (a file path, a database and session id).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many times the writer has synced this session so far (each sync covers a group
    /// of events): what a durability mode costs, counted.
    pub fn syncs(&self) -> u64 {
        self.shared.lock().syncs
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

impl EventSink for StoreLog {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        let wait = self.durability == Durability::Strict && urgency == AppendUrgency::Durable;
        let mut shared = self.shared.lock();
        if let Err(refusal) = refuse_if_unusable(&shared) {
            return AppendFuture::done(Err(refusal));
        }
        let seq = shared.next_seq;
        let event = Box::new(draft.into_event(seq));
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
        let spent = std::mem::take(&mut shared.spent);
        drop(shared);
        // Freed here, outside the lock, on the thread that allocated them.
        drop(spent);
        match answer {
            None => AppendFuture::done(Ok(seq)),
            Some(answer) => AppendFuture::Waiting(Box::pin(async move {
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
            Box::pin(std::future::ready(refuse_if_unusable(&self.shared.lock())))
        }
    }
}

impl Drop for StoreLog {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        // Closing the channel ends the writer after it stored (and synced) what it was given.
        drop(self.sender.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use toolrail_session_log::{Event, EventData, Timestamp, event::StepEnd};

    use super::*;

    /// Counts the syncs the writer asks for.
    struct Counting(Arc<AtomicUsize>);

    impl Medium for Counting {
        fn commit(&mut self, _events: &[&Event], sync: bool) -> Result<(), SinkError> {
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
            data: EventData::StepEnd(StepEnd { usage: None }),
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
                Counting(Arc::clone(&syncs)),
                "counting".to_owned(),
                1,
                durability,
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
