//! `AgentStream`: a running turn's events, then its answer. Events are read as they are
//! sent; the answer comes once every event before it was read. Dropping the stream early
//! cancels the turn (which still settles honestly on its task).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio::sync::mpsc::UnboundedReceiver;

use super::events::AgentEvent;
use super::{AgentError, RunningTurn};

/// The events of one turn, ending with [`AgentEvent::TurnEnded`] (or an error).
///
/// It is a [`Stream`]; [`AgentStream::next`] reads it without any stream crate.
pub struct AgentStream {
    state: State,
}

enum State {
    Running {
        turn: RunningTurn,
        events: UnboundedReceiver<AgentEvent>,
    },
    /// The turn is over; what is left of its events comes before its outcome.
    Draining {
        events: UnboundedReceiver<AgentEvent>,
        outcome: Result<super::Answer, AgentError>,
    },
    Refused(AgentError),
    Done,
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Running { .. } => "running",
            State::Draining { .. } => "draining",
            State::Refused(_) => "refused",
            State::Done => "done",
        };
        f.debug_struct("AgentStream")
            .field("state", &state)
            .finish()
    }
}

impl AgentStream {
    pub(super) fn running(turn: RunningTurn, events: UnboundedReceiver<AgentEvent>) -> Self {
        Self {
            state: State::Running { turn, events },
        }
    }

    pub(super) fn refused(error: AgentError) -> Self {
        Self {
            state: State::Refused(error),
        }
    }

    /// The next event, or `None` once the turn's outcome was given.
    pub async fn next(&mut self) -> Option<Result<AgentEvent, AgentError>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for AgentStream {
    type Item = Result<AgentEvent, AgentError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Running {
                    mut turn,
                    mut events,
                } => {
                    if let Ok(event) = events.try_recv() {
                        this.state = State::Running { turn, events };
                        return Poll::Ready(Some(Ok(event)));
                    }
                    match turn.poll_outcome(cx) {
                        Poll::Ready(outcome) => {
                            this.state = State::Draining { events, outcome };
                        }
                        Poll::Pending => {
                            // Woken by whichever comes first: an event or the end.
                            let next = events.poll_recv(cx);
                            this.state = State::Running { turn, events };
                            if let Poll::Ready(Some(event)) = next {
                                return Poll::Ready(Some(Ok(event)));
                            }
                            return Poll::Pending;
                        }
                    }
                }
                State::Draining {
                    mut events,
                    outcome,
                } => {
                    if let Ok(event) = events.try_recv() {
                        this.state = State::Draining { events, outcome };
                        return Poll::Ready(Some(Ok(event)));
                    }
                    return Poll::Ready(Some(
                        outcome.map(|answer| AgentEvent::TurnEnded(Box::new(answer))),
                    ));
                }
                State::Refused(error) => return Poll::Ready(Some(Err(error))),
                State::Done => return Poll::Ready(None),
            }
        }
    }
}
