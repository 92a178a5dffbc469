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
    AppendFuture, AppendUrgency, BoxFuture, EventDraft, EventSink, SessionLog, SinkError,
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
        drop(shared);
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
