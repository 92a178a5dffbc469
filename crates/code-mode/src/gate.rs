//! The scheduler's rules inside one program run (DESIGN §5), for calls that arrive while the
//! program runs: the rule itself is `toolrail_agent_loop::admission`, shared with the batch
//! scheduler; this gate keeps its own mechanics (tickets in submission order, waiters woken
//! only when a change lets them go, commits in submission order).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use toolrail_agent_loop::admission;
use toolrail_tools_core::Concurrency;

#[derive(Debug)]
enum Stage {
    /// Prepared, waiting to start.
    Waiting(Concurrency),
    Running(Concurrency),
    /// Settled (or refused: `None`), waiting to commit.
    Settled(Option<Concurrency>),
}

#[derive(Debug, Default)]
struct State {
    /// The next ticket allowed to prepare.
    next_prepare: u64,
    /// The next ticket allowed to commit.
    next_commit: u64,
    /// Prepared, uncommitted calls.
    calls: BTreeMap<u64, Stage>,
    /// Who waits for what. A change wakes only the waiters it lets go (waking them all
    /// made a program with a thousand calls in flight quadratic).
    waiting: BTreeMap<(u64, Wait), Arc<Notify>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Wait {
    Prepare,
    Start,
    Commit,
}

/// One run's gate. Tickets are handed out in submission order from 0.
#[derive(Debug)]
pub(crate) struct Gate {
    state: Mutex<State>,
    max_parallel: usize,
}

impl Gate {
    pub(crate) fn new(max_parallel: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            max_parallel: max_parallel.max(1),
        }
    }

    fn ready(&self, state: &State, ticket: u64, wait: Wait) -> bool {
        match wait {
            Wait::Prepare => may_prepare(state, ticket),
            Wait::Start => may_start(state, ticket, self.max_parallel),
            Wait::Commit => state.next_commit == ticket,
        }
    }

    /// Waits until `ticket` may do `wait`. Starting is taken under the same lock that saw
    /// it allowed, so two calls woken together cannot both take the last slot.
    async fn wait_for(&self, ticket: u64, wait: Wait) {
        let take = |state: &mut State| {
            if wait == Wait::Start
                && let Some(stage) = state.calls.get_mut(&ticket)
                && let Stage::Waiting(concurrency) = stage
            {
                *stage = Stage::Running(concurrency.clone());
            }
        };
        let notify = {
            let mut state = self.state.lock();
            if self.ready(&state, ticket, wait) {
                take(&mut state);
                return;
            }
            let notify = Arc::new(Notify::new());
            state.waiting.insert((ticket, wait), Arc::clone(&notify));
            notify
        };
        loop {
            // A permit stored by a wake before this await is not lost.
            notify.notified().await;
            let mut state = self.state.lock();
            if self.ready(&state, ticket, wait) {
                state.waiting.remove(&(ticket, wait));
                take(&mut state);
                return;
            }
        }
    }

    fn change(&self, update: impl FnOnce(&mut State)) {
        let mut state = self.state.lock();
        update(&mut state);
        for ((ticket, wait), notify) in &state.waiting {
            if self.ready(&state, *ticket, *wait) {
                notify.notify_one();
            }
        }
    }

    /// Waits for `ticket`'s turn to prepare: every earlier call prepared, and no earlier
    /// exclusive call uncommitted.
    pub(crate) async fn turn_to_prepare(&self, ticket: u64) {
        self.wait_for(ticket, Wait::Prepare).await;
    }

    /// `ticket` is prepared; `None` when it was refused and goes straight to commit.
    pub(crate) fn prepared(&self, ticket: u64, concurrency: Option<Concurrency>) {
        self.change(|state| {
            state.next_prepare = ticket + 1;
            let stage = match concurrency {
                Some(concurrency) => Stage::Waiting(concurrency),
                None => Stage::Settled(None),
            };
            state.calls.insert(ticket, stage);
        });
    }

    /// Waits until `ticket` may start, and marks it running.
    pub(crate) async fn start(&self, ticket: u64) {
        self.wait_for(ticket, Wait::Start).await;
    }

    pub(crate) fn settled(&self, ticket: u64) {
        self.change(|state| {
            if let Some(stage) = state.calls.get_mut(&ticket) {
                let concurrency = match stage {
                    Stage::Waiting(concurrency) | Stage::Running(concurrency) => {
                        Some(concurrency.clone())
                    }
                    Stage::Settled(concurrency) => concurrency.clone(),
                };
                *stage = Stage::Settled(concurrency);
            }
        });
    }

    /// Waits for `ticket`'s turn to commit: every earlier call committed.
    pub(crate) async fn turn_to_commit(&self, ticket: u64) {
        self.wait_for(ticket, Wait::Commit).await;
    }

    pub(crate) fn committed(&self, ticket: u64) {
        self.change(|state| {
            state.calls.remove(&ticket);
            state.next_commit = ticket + 1;
        });
    }
}

/// `ticket` is next in submission order and the one rule lets a call be prepared.
fn may_prepare(state: &State, ticket: u64) -> bool {
    let exclusive_uncommitted = state
        .calls
        .range(..ticket)
        .filter(|(_, stage)| {
            matches!(
                stage,
                Stage::Waiting(Concurrency::Exclusive)
                    | Stage::Running(Concurrency::Exclusive)
                    | Stage::Settled(Some(Concurrency::Exclusive))
            )
        })
        .count();
    state.next_prepare == ticket && admission::may_prepare(exclusive_uncommitted)
}

/// The one rule ([`admission::may_start`]) over the program's calls: every earlier call that
/// has not started, and every running one, is in the way.
fn may_start(state: &State, ticket: u64, max_parallel: usize) -> bool {
    let Some(Stage::Waiting(mine)) = state.calls.get(&ticket) else {
        return false;
    };
    let running = state
        .calls
        .values()
        .filter(|stage| matches!(stage, Stage::Running(_)))
        .count();
    let turn = admission::StartTurn {
        next_to_commit: state.next_commit == ticket,
        running,
        max_parallel,
    };
    let in_way = state.calls.iter().filter_map(|(other, stage)| match stage {
        Stage::Running(theirs) => Some(theirs),
        Stage::Waiting(theirs) if *other < ticket => Some(theirs),
        Stage::Waiting(_) | Stage::Settled(_) => None,
    });
    admission::may_start(mine, turn, in_way)
}
