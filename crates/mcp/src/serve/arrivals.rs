//! The order calls are served in: the order their requests arrived. rmcp starts each
//! request's handler as a task of its own, and tasks run in whatever order the runtime
//! picks, so the order is taken where the stream is read in order — a transport that
//! stamps each `tools/call` as it reads it ([`Stamping`], on stdio) — and handlers take
//! their turn by ticket. Where no stamp exists (streamable HTTP: each request is its own
//! HTTP exchange, with no order between them) a handler takes the next ticket when it
//! starts.
//!
//! A stamped request whose handler never runs (refused by the SDK before it) would hold up
//! every later call: a ticket nobody claims within [`UNCLAIMED`] is passed over.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rmcp::RoleServer;
use rmcp::model::{ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::Notify;

/// How long a stamped ticket waits to be claimed by its handler.
const UNCLAIMED: Duration = Duration::from_secs(2);

/// Tickets in arrival order, and whose turn it is.
#[derive(Default)]
pub(crate) struct Arrivals {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    serving: u64,
    /// Stamped on arrival, not yet claimed by a handler: the request's ticket.
    stamped: HashMap<RequestId, u64>,
    /// The same stamps by ticket: when, and whose.
    unclaimed: BTreeMap<u64, (Instant, RequestId)>,
    /// Tickets done (served, or given up) ahead of their turn.
    done: BTreeSet<u64>,
}

impl State {
    fn advance(&mut self) {
        while self.done.remove(&self.serving) {
            self.serving += 1;
        }
    }
}

/// A call's place: its turn comes when every earlier ticket is done.
pub(crate) struct Ticket {
    arrivals: Arc<Arrivals>,
    number: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.arrivals.state.lock();
        state.done.insert(self.number);
        state.advance();
        drop(state);
        self.arrivals.changed.notify_waiters();
    }
}

impl Arrivals {
    /// Stamps a request as it is read (in arrival order).
    fn stamp(&self, id: &RequestId) {
        let mut state = self.state.lock();
        let number = state.next_ticket;
        state.next_ticket += 1;
        state.stamped.insert(id.clone(), number);
        state.unclaimed.insert(number, (Instant::now(), id.clone()));
    }

    /// The ticket of request `id`: its stamp, or the next number when it has none.
    pub(crate) fn claim(self: &Arc<Self>, id: &RequestId) -> Ticket {
        let mut state = self.state.lock();
        let number = match state.stamped.remove(id) {
            Some(number) => {
                state.unclaimed.remove(&number);
                number
            }
            None => {
                let number = state.next_ticket;
                state.next_ticket += 1;
                number
            }
        };
        Ticket {
            arrivals: Arc::clone(self),
            number,
        }
    }

    /// Waits for `ticket`'s turn.
    pub(crate) async fn turn(&self, ticket: &Ticket) {
        loop {
            let changed = self.changed.notified();
            {
                let mut state = self.state.lock();
                // A stamped request nobody claimed in time gives its place up.
                let now = Instant::now();
                let stale: Vec<u64> = state
                    .unclaimed
                    .range(..ticket.number)
                    .filter(|(_, (since, _))| now.duration_since(*since) >= UNCLAIMED)
                    .map(|(number, _)| *number)
                    .collect();
                for number in stale {
                    if let Some((_, id)) = state.unclaimed.remove(&number) {
                        state.stamped.remove(&id);
                    }
                    state.done.insert(number);
                }
                state.advance();
                if state.serving == ticket.number {
                    return;
                }
            }
            // Woken by a change, or again after a while to pass over unclaimed stamps.
            let _ = tokio::time::timeout(UNCLAIMED, changed).await;
        }
    }
}

/// A transport that stamps each `tools/call` (not a retry answering a question) as it is
/// read.
pub(crate) struct Stamping<T> {
    inner: T,
    arrivals: Arc<Arrivals>,
}

impl<T> Stamping<T> {
    pub(crate) fn new(inner: T, arrivals: Arc<Arrivals>) -> Self {
        Self { inner, arrivals }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Stamping<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Request(request)) = &message
            && let ClientRequest::CallToolRequest(call) = &request.request
            && call.params.request_state.is_none()
        {
            self.arrivals.stamp(&request.id);
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
