//! A request waiting for a person: it has an id, says what is asked, can be answered once,
//! and tells the person's side when the asker stopped waiting (a cancelled batch, a
//! deadline). Shared by the channel approval and question services.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use toolrail_tools_core::CancellationToken;

/// One request waiting for an answer.
#[derive(Debug)]
pub struct Pending<R, A> {
    id: u64,
    request: R,
    answer: oneshot::Sender<A>,
    withdrawn: CancellationToken,
}

impl<R, A> Pending<R, A> {
    /// Unique among the requests of one service, in the order they were made.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// What is asked.
    pub fn request(&self) -> &R {
        &self.request
    }

    /// Answers the request. `Err` gives the answer back when the asker no longer waits
    /// (cancelled or expired): it did not count.
    pub fn answer(self, answer: A) -> Result<(), A> {
        if self.withdrawn.is_cancelled() {
            return Err(answer);
        }
        self.answer.send(answer)
    }

    /// Whether the asker stopped waiting.
    pub fn is_withdrawn(&self) -> bool {
        self.withdrawn.is_cancelled()
    }

    /// Resolves when the asker stops waiting, so a UI can take the request down.
    pub async fn withdrawn(&self) {
        self.withdrawn.cancelled().await;
    }
}

/// Where a UI receives requests.
#[derive(Debug)]
pub struct Inbox<R, A> {
    receiver: mpsc::UnboundedReceiver<Pending<R, A>>,
}

impl<R, A> Inbox<R, A> {
    /// The next request; `None` once the service is gone.
    pub async fn next(&mut self) -> Option<Pending<R, A>> {
        self.receiver.recv().await
    }

    /// The next request if one is waiting now.
    pub fn try_next(&mut self) -> Option<Pending<R, A>> {
        self.receiver.try_recv().ok()
    }
}

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited<A> {
    Answered(A),
    /// The request was dropped unanswered.
    Dropped,
    /// The asker's cancellation fired.
    Cancelled,
    /// The deadline passed.
    Expired,
    /// No inbox listens any more.
    NoListener,
}

/// The asking side.
#[derive(Debug)]
pub(crate) struct Outbox<R, A> {
    sender: mpsc::UnboundedSender<Pending<R, A>>,
    next_id: AtomicU64,
    deadline: Option<Duration>,
}

impl<R, A> Outbox<R, A> {
    pub(crate) fn channel(deadline: Option<Duration>) -> (Self, Inbox<R, A>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let outbox = Self {
            sender,
            next_id: AtomicU64::new(1),
            deadline,
        };
        (outbox, Inbox { receiver })
    }

    pub(crate) async fn ask(&self, request: R, cancel: &CancellationToken) -> Waited<A> {
        if cancel.is_cancelled() {
            return Waited::Cancelled;
        }
        let (answer, answered) = oneshot::channel();
        let withdrawn = CancellationToken::new();
        // However the wait ends (answer, cancel, deadline, or this future dropped), the
        // person's side learns that it ended.
        let _withdraw = withdrawn.clone().drop_guard();
        let pending = Pending {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            request,
            answer,
            withdrawn,
        };
        if self.sender.send(pending).is_err() {
            return Waited::NoListener;
        }
        let deadline = async {
            match self.deadline {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            answer = answered => match answer {
                Ok(answer) => Waited::Answered(answer),
                Err(_) => Waited::Dropped,
            },
            () = cancel.cancelled() => Waited::Cancelled,
            () = deadline => Waited::Expired,
        }
    }
}
