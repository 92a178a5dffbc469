//! Calls waiting for their client's answer on the stateless revision (2026-07-28): the
//! question went back as the call's `input_required` result with an opaque handle, and the
//! call waits here — still holding its turn — until the client retries with the handle and
//! its answer. The turn is given up as soon as the call ends, whichever way (its own
//! approval deadline, a shutdown); a client that does not come back within [`PARKED_FOR`]
//! has its question expired: the call is refused `APPROVAL_EXPIRED`, never run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use toolrail_session_log::ToolResultRecord;
use toolrail_tools_core::ApprovalAnswer;

use super::approvals::Question;
use super::arrivals::Ticket;

/// How long a question waits for the client's retry.
pub(crate) const PARKED_FOR: Duration = Duration::from_secs(600);

/// One call on its way: its task, what it reports, and its turn.
pub(crate) struct Flight {
    pub(crate) call_id: String,
    /// What the client called, which a retry must name again.
    pub(crate) tool: String,
    pub(crate) arguments: Value,
    pub(crate) task: JoinHandle<Result<Arc<ToolResultRecord>, String>>,
    /// Fired when the task ended.
    pub(crate) ended: CancellationToken,
    pub(crate) questions: mpsc::UnboundedReceiver<Question>,
    pub(crate) progress: mpsc::UnboundedReceiver<String>,
    pub(crate) cancel: CancellationToken,
    /// A flight dropped before its call ended (its client went away, the server stops)
    /// cancels it: the call commits an honest outcome on its task.
    pub(crate) _cancel_on_drop: DropGuard,
    /// Held until the call ends: the calls behind it wait.
    pub(crate) _turn: Ticket,
}

/// A call waiting for the answer to its question.
pub(crate) struct Parked {
    pub(crate) flight: Flight,
    pub(crate) session_key: Option<String>,
    pub(crate) answer: oneshot::Sender<ApprovalAnswer>,
}

/// The parked calls, by handle.
#[derive(Clone, Default)]
pub(crate) struct ParkedCalls {
    calls: Arc<Mutex<HashMap<String, Parked>>>,
    watchers: TaskTracker,
}

impl ParkedCalls {
    /// Parks a call under `handle`: released when its call ends, expired if no retry
    /// takes it in time.
    pub(crate) fn park(&self, handle: String, parked: Parked) {
        let ended = parked.flight.ended.clone();
        self.calls.lock().insert(handle.clone(), parked);
        let calls = Arc::clone(&self.calls);
        self.watchers.spawn(async move {
            tokio::select! {
                () = ended.cancelled() => {
                    // Ended while parked (its approval deadline, a shutdown): its turn goes.
                    drop(calls.lock().remove(&handle));
                }
                () = tokio::time::sleep(PARKED_FOR) => {
                    let parked = calls.lock().remove(&handle);
                    if let Some(parked) = parked {
                        let _ = parked.answer.send(ApprovalAnswer::Expired);
                        // The call commits its refusal; its turn goes when it has.
                        parked.flight.ended.cancelled().await;
                    }
                }
            }
        });
    }

    /// The call parked under `handle`, taken out (a handle answers once).
    pub(crate) fn take(&self, handle: &str) -> Option<Parked> {
        self.calls.lock().remove(handle)
    }

    /// Puts back a call a retry did not match.
    pub(crate) fn put_back(&self, handle: &str, parked: Parked) {
        self.calls.lock().insert(handle.to_owned(), parked);
    }

    /// Ends every parked call's wait as cancelled (the server stops).
    pub(crate) fn cancel_all(&self) {
        let parked: Vec<Parked> = self
            .calls
            .lock()
            .drain()
            .map(|(_, parked)| parked)
            .collect();
        for parked in parked {
            let _ = parked.answer.send(ApprovalAnswer::Cancelled);
        }
        self.watchers.close();
    }
}

/// An unguessable handle — it is all a retry needs to answer the question — or `None`
/// when the system has no randomness to give (then no question is parked: no yes).
pub(crate) fn fresh_handle() -> Option<String> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}
