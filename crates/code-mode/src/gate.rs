//! The scheduler's rules inside one program run (DESIGN §5), for calls that arrive while the
//! program runs: preparation one at a time in submission order, pausing behind an exclusive
//! call until it commits; a shared call starts when a slot is free and no earlier unfinished
//! call is exclusive or holds a conflicting claim; an exclusive call runs alone after every
//! earlier call committed; commits in submission order.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use tokio::sync::Notify;
use toolrail_tools_core::Concurrency;

#[derive(Debug)]
enum Stage {
    /// Prepared, waiting to start.
    Waiting(Concurrency),
    Running(Concurrency),
    /// Settled (or refused), waiting to commit.
    Settled,
}

#[derive(Debug, Default)]
struct State {
    /// The next ticket allowed to prepare.
    next_prepare: u64,
    /// The next ticket allowed to commit.
    next_commit: u64,
    /// Prepared, uncommitted calls.
    calls: BTreeMap<u64, Stage>,
}

/// One run's gate. Tickets are handed out in submission order from 0.
#[derive(Debug)]
pub(crate) struct Gate {
    state: Mutex<State>,
    changed: Notify,
    max_parallel: usize,
}

impl Gate {
    pub fn new(max_parallel: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            max_parallel: max_parallel.max(1),
        }
    }

    async fn wait_until(&self, ready: impl Fn(&State) -> bool) {
        loop {
            let notified = self.changed.notified();
            if ready(&self.state.lock()) {
                return;
            }
            notified.await;
        }
    }

    fn change(&self, update: impl FnOnce(&mut State)) {
        update(&mut self.state.lock());
        self.changed.notify_waiters();
    }

    /// Waits for `ticket`'s turn to prepare: every earlier call prepared, and no earlier
    /// exclusive call uncommitted.
    pub async fn turn_to_prepare(&self, ticket: u64) {
        self.wait_until(|state| {
            state.next_prepare == ticket
                && !state.calls.iter().any(|(earlier, stage)| {
                    *earlier < ticket
                        && matches!(
                            stage,
                            Stage::Waiting(Concurrency::Exclusive)
                                | Stage::Running(Concurrency::Exclusive)
                        )
                })
        })
        .await;
    }

    /// `ticket` is prepared; `None` when it was refused and goes straight to commit.
    pub fn prepared(&self, ticket: u64, concurrency: Option<Concurrency>) {
        self.change(|state| {
            state.next_prepare = ticket + 1;
            let stage = match concurrency {
                Some(concurrency) => Stage::Waiting(concurrency),
                None => Stage::Settled,
            };
            state.calls.insert(ticket, stage);
        });
    }

    /// Waits until `ticket` may start, and marks it running.
    pub async fn start(&self, ticket: u64) {
        self.wait_until(|state| may_start(state, ticket, self.max_parallel))
            .await;
        self.change(|state| {
            if let Some(stage) = state.calls.get_mut(&ticket)
                && let Stage::Waiting(concurrency) = stage
            {
                *stage = Stage::Running(concurrency.clone());
            }
        });
    }

    pub fn settled(&self, ticket: u64) {
        self.change(|state| {
            state.calls.insert(ticket, Stage::Settled);
        });
    }

    /// Waits for `ticket`'s turn to commit: every earlier call committed.
    pub async fn turn_to_commit(&self, ticket: u64) {
        self.wait_until(|state| state.next_commit == ticket).await;
    }

    pub fn committed(&self, ticket: u64) {
        self.change(|state| {
            state.calls.remove(&ticket);
            state.next_commit = ticket + 1;
        });
    }
}

fn may_start(state: &State, ticket: u64, max_parallel: usize) -> bool {
    let Some(Stage::Waiting(mine)) = state.calls.get(&ticket) else {
        return false;
    };
    let running = state
        .calls
        .values()
        .filter(|stage| matches!(stage, Stage::Running(_)))
        .count();
    match mine {
        Concurrency::Exclusive => state.next_commit == ticket && running == 0,
        Concurrency::Shared(claims) => {
            running < max_parallel
                && state.calls.iter().all(|(other, stage)| {
                    let theirs = match stage {
                        Stage::Running(theirs) => theirs,
                        // An earlier call that has not started still comes first.
                        Stage::Waiting(theirs) if *other < ticket => theirs,
                        Stage::Waiting(_) | Stage::Settled => return true,
                    };
                    match theirs {
                        Concurrency::Exclusive => false,
                        Concurrency::Shared(held) => !held
                            .iter()
                            .any(|held| claims.iter().any(|claim| claim.conflicts_with(held))),
                    }
                })
        }
    }
}
