//! The one writer of a session: a thread that takes events in `seq` order and commits each
//! group to its medium (a file, a database) at once — one `write` or one transaction, and at
//! most one sync when any event of the group (or a barrier) asks for it — then answers every
//! waiting appender. A thread, not an async task: writes and syncs block, and the log must
//! keep working whatever runtime its users run.

use std::sync::Arc;
use std::sync::mpsc::Receiver;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use toolrail_session_log::Event;
use toolrail_session_log::SinkError;

/// Most events one group may hold, so acknowledgements are not held back forever under load.
const MAX_GROUP: usize = 4096;

/// Where a writer puts groups of events.
///
/// Implementors guarantee: `commit` stores all the events or reports an error; after
/// `Ok` with `sync`, they survive a crash of the machine.
pub(crate) trait Medium: Send + 'static {
    fn commit(&mut self, events: &[&Event], sync: bool) -> Result<(), SinkError>;

    /// Called once after the last group, before the thread ends.
    fn close(&mut self);
}

pub(crate) enum Command {
    /// Store the event; `sync` asks for durability before `ack` is answered.
    Append {
        event: Box<Event>,
        sync: bool,
        ack: Option<oneshot::Sender<Result<u64, SinkError>>>,
    },
    /// Make everything before it durable.
    Barrier {
        ack: oneshot::Sender<Result<(), SinkError>>,
    },
}

/// State shared by appenders and the writer.
#[derive(Default)]
pub(crate) struct Shared {
    pub next_seq: u64,
    /// Set by the writer on its first failure; every later append is refused with it.
    pub failed: Option<SinkError>,
    pub closed: bool,
    /// Groups the writer committed with a sync.
    pub syncs: u64,
    /// Events the writer is done with, for an appender to free: memory is freed by the
    /// thread that allocated it, so the writer and the appenders never contend for the
    /// allocator's locks.
    // The boxes the appenders allocated, kept whole: unboxing here would free them on
    // the writer's thread, which is what this is for avoiding.
    #[allow(clippy::vec_box)]
    pub spent: Vec<Box<Event>>,
}

/// Runs until every sender is gone.
pub(crate) fn run(
    mut medium: impl Medium,
    commands: Receiver<Command>,
    shared: Arc<Mutex<Shared>>,
) {
    let mut group = Vec::with_capacity(256);
    while let Ok(first) = commands.recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match commands.try_recv() {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        let mut sync = false;
        let mut events = Vec::with_capacity(group.len());
        for command in &group {
            match command {
                Command::Append {
                    event, sync: wants, ..
                } => {
                    sync |= *wants;
                    events.push(event.as_ref());
                }
                Command::Barrier { .. } => sync = true,
            }
        }
        let earlier = shared.lock().failed.clone();
        let outcome = match earlier {
            Some(failure) => Err(failure),
            None => medium.commit(&events, sync),
        };
        drop(events);
        match &outcome {
            Err(error) => {
                shared.lock().failed.get_or_insert_with(|| error.clone());
            }
            Ok(()) if sync => shared.lock().syncs += 1,
            Ok(()) => {}
        }
        let mut spent = Vec::with_capacity(group.len());
        for command in group.drain(..) {
            // An appender that stopped waiting does not need its answer.
            match command {
                Command::Append {
                    event,
                    ack: Some(ack),
                    ..
                } => {
                    let _ = ack.send(outcome.clone().map(|()| event.seq));
                    spent.push(event);
                }
                Command::Append {
                    event, ack: None, ..
                } => spent.push(event),
                Command::Barrier { ack } => {
                    let _ = ack.send(outcome.clone());
                }
            }
        }
        let mut handed = shared.lock();
        if handed.spent.is_empty() {
            // The usual case (an appender took the last ones): hand the whole vector over.
            handed.spent = spent;
        } else {
            handed.spent.append(&mut spent);
        }
    }
    medium.close();
}
