//! Calls waiting for their client's answer on the stateless revision (2026-07-28): the
//! question went back as the call's `input_required` result with an opaque handle, and the
//! call waits here — still holding its turn — until the client retries with the handle and
//! its answer. A client that does not come back within [`PARKED_FOR`] gets its question
//! expired: the call is refused `APPROVAL_EXPIRED`, never run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::ToolResultRecord;
use toolrail_tools_core::ApprovalAnswer;

use super::approvals::Question;

/// How long a question waits for the client's retry.
pub(crate) const PARKED_FOR: Duration = Duration::from_secs(600);

/// One call on its way: its task, what it reports, and its turn.
pub(crate) struct Flight {
    pub(crate) call_id: String,
    pub(crate) task: JoinHandle<Result<Arc<ToolResultRecord>, String>>,
    pub(crate) questions: mpsc::UnboundedReceiver<Question>,
    pub(crate) progress: mpsc::UnboundedReceiver<String>,
    pub(crate) cancel: CancellationToken,
    /// Held until the call commits: the calls behind it wait.
    pub(crate) _turn: OwnedMutexGuard<()>,
}

/// A call waiting for the answer to `question`.
pub(crate) struct Parked {
    pub(crate) flight: Flight,
    pub(crate) session_key: Option<String>,
    pub(crate) answer: oneshot::Sender<ApprovalAnswer>,
}

/// The parked calls, by handle.
#[derive(Clone, Default)]
pub(crate) struct ParkedCalls {
    calls: Arc<Mutex<HashMap<String, Parked>>>,
}

impl ParkedCalls {
    /// Parks a call under a fresh handle, and expires it if no retry takes it in time.
    pub(crate) fn park(&self, parked: Parked) -> String {
        let handle = fresh_handle();
        self.calls.lock().insert(handle.clone(), parked);
        let calls = Arc::clone(&self.calls);
        let expiring = handle.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARKED_FOR).await;
            let Some(parked) = calls.lock().remove(&expiring) else {
                return;
            };
            let _ = parked.answer.send(ApprovalAnswer::Expired);
            // The call commits its refusal; its turn is given up when it has.
            let _ = parked.flight.task.await;
        });
        handle
    }

    /// The call parked under `handle`, taken out (a handle answers once).
    pub(crate) fn take(&self, handle: &str) -> Option<Parked> {
        self.calls.lock().remove(handle)
    }
}

/// An unguessable handle: it is all a retry needs to answer the question.
fn fresh_handle() -> String {
    let mut bytes = [0_u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut random| std::io::Read::read_exact(&mut random, &mut bytes));
    if filled.is_err() {
        // No randomness to be had: a handle from the clock and a counter still names one
        // call, and answering a question still needs the session's connection.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
