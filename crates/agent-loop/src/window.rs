//! The scheduler's view of the calls between the next commit and the next preparation:
//! which are ready to start, which stand in later calls' way (exclusive, or holding
//! claims), and whether an exclusive call holds preparation back. It is kept as the slots
//! change, so deciding what may start costs what stands in the way, not what the window
//! holds: with a cap as large as the batch, scanning the window at every wake-up made a
//! batch quadratic in its size.

use std::collections::{BTreeMap, BTreeSet};

use toolrail_tools_core::Concurrency;

pub(crate) struct Window {
    /// Prepared calls not started yet.
    ready: BTreeSet<usize>,
    /// Ready or running calls that may block a later one: `true` when exclusive, `false`
    /// when shared with claims. Shared calls without claims block no one.
    barriers: BTreeMap<usize, bool>,
    /// Calls found exclusive when prepared or when started, until they commit: while one
    /// is in the window, preparation pauses (it may change what later calls see).
    exclusive: Vec<bool>,
    exclusive_uncommitted: usize,
}

impl Window {
    pub(crate) fn new(total: usize) -> Self {
        Self {
            ready: BTreeSet::new(),
            barriers: BTreeMap::new(),
            exclusive: vec![false; total],
            exclusive_uncommitted: 0,
        }
    }

    /// The call at `index` is prepared and ready to start, with `concurrency`.
    pub(crate) fn prepared(&mut self, index: usize, concurrency: &Concurrency) {
        self.ready.insert(index);
        self.read(index, concurrency);
    }

    /// The concurrency of a ready call as read again right before its start.
    pub(crate) fn read(&mut self, index: usize, concurrency: &Concurrency) {
        match concurrency {
            Concurrency::Exclusive => {
                self.barriers.insert(index, true);
                if let Some(mark) = self.exclusive.get_mut(index)
                    && !*mark
                {
                    *mark = true;
                    self.exclusive_uncommitted += 1;
                }
            }
            Concurrency::Shared(claims) if claims.is_empty() => {
                self.barriers.remove(&index);
            }
            Concurrency::Shared(_) => {
                self.barriers.insert(index, false);
            }
        }
    }

    /// The call at `index` started: it still blocks others until it settles.
    pub(crate) fn started(&mut self, index: usize) {
        self.ready.remove(&index);
    }

    /// The call at `index` settled (or was lost): it blocks no one any more.
    pub(crate) fn settled(&mut self, index: usize) {
        self.ready.remove(&index);
        self.barriers.remove(&index);
    }

    /// The call at `index` committed: it leaves the window.
    pub(crate) fn committed(&mut self, index: usize) {
        if self.exclusive.get(index).copied().unwrap_or(false) {
            self.exclusive_uncommitted = self.exclusive_uncommitted.saturating_sub(1);
        }
    }

    /// How many calls found exclusive have not committed (while any has, preparation
    /// pauses: [`crate::admission::may_prepare`]).
    pub(crate) fn exclusive_uncommitted(&self) -> usize {
        self.exclusive_uncommitted
    }

    /// How many prepared calls wait to start.
    pub(crate) fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// The first ready call at or after `from` that may be worth trying: none after an
    /// exclusive call that has not settled, which nothing later may overtake.
    pub(crate) fn next_candidate(&self, from: usize) -> Option<usize> {
        let candidate = self.ready.range(from..).next().copied()?;
        let blocked_after = self
            .barriers
            .range(..candidate)
            .find(|(_, exclusive)| **exclusive)
            .map(|(index, _)| *index);
        match blocked_after {
            Some(_) => None,
            None => Some(candidate),
        }
    }

    /// Ready or running calls before `index` that may block it (exclusive or claiming).
    pub(crate) fn barriers_before(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        self.barriers.range(..index).map(|(index, _)| *index)
    }

    /// Every ready call, in model order (a stopped batch settles them all).
    pub(crate) fn take_ready(&mut self) -> Vec<usize> {
        let ready: Vec<usize> = std::mem::take(&mut self.ready).into_iter().collect();
        for index in &ready {
            self.barriers.remove(index);
        }
        ready
    }
}
