//! The one writer of a session file: a thread that takes events in `seq` order, writes each
//! group with one `write` and, when any event of the group (or a barrier) asks for it, one
//! `fsync`, then answers every waiting appender. A thread, not an async task: file writes and
//! `fsync` block, and the log must keep working whatever runtime its users run.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::event::Event;
use crate::sink::SinkError;

/// Most events one group may hold, so acknowledgements are not held back forever under load.
const MAX_GROUP: usize = 4096;

pub(crate) enum Command {
    /// Write the event; `sync` asks for an `fsync` before `ack` is answered.
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
}

/// Runs until every sender is gone, then returns (the file is synced one last time).
pub(crate) fn run(mut file: File, commands: Receiver<Command>, shared: Arc<Mutex<Shared>>) {
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut group = Vec::with_capacity(256);
    while let Ok(first) = commands.recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match commands.try_recv() {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        buffer.clear();
        let mut sync = false;
        let mut encoded = Ok(());
        for command in &group {
            match command {
                Command::Append {
                    event, sync: wants, ..
                } => {
                    sync |= *wants;
                    if encoded.is_ok() {
                        encoded =
                            serde_json::to_writer(&mut buffer, event.as_ref()).map_err(|error| {
                                SinkError::Refused(format!(
                                    "an event could not be encoded: {error}"
                                ))
                            });
                        buffer.push(b'\n');
                    }
                }
                Command::Barrier { .. } => sync = true,
            }
        }
        let outcome = previous_failure(&shared).map_or_else(
            || {
                encoded?;
                file.write_all(&buffer).map_err(|error| {
                    SinkError::Refused(format!("writing the session file failed: {error}"))
                })?;
                if sync {
                    file.sync_data().map_err(|error| {
                        SinkError::Refused(format!("syncing the session file failed: {error}"))
                    })?;
                }
                Ok(())
            },
            Err,
        );
        if let Err(error) = &outcome {
            shared.lock().failed.get_or_insert_with(|| error.clone());
        }
        for command in group.drain(..) {
            // An appender that stopped waiting does not need its answer.
            match command {
                Command::Append {
                    event,
                    ack: Some(ack),
                    ..
                } => {
                    let _ = ack.send(outcome.clone().map(|()| event.seq));
                }
                Command::Append { ack: None, .. } => {}
                Command::Barrier { ack } => {
                    let _ = ack.send(outcome.clone());
                }
            }
        }
    }
    // Best effort: the last writes reach the disk before the file is closed.
    let _ = file.sync_data();
}

fn previous_failure(shared: &Mutex<Shared>) -> Option<SinkError> {
    shared.lock().failed.clone()
}
