//! The one rule for what may run beside what (DESIGN §5), as pure functions of where the
//! calls stand. The batch scheduler and code mode's gate drive calls with mechanics of their
//! own (slots and a window; tickets and waiters) and ask these two questions alone, so a
//! change to the rule is a change here, tested here.
//!
//! The rule: calls are prepared one at a time in order, and none while an earlier exclusive
//! call has not committed (it may change what later calls see); a shared call starts when a
//! slot is free and no earlier call that has not settled is exclusive or holds a claim that
//! conflicts with one of its own; an exclusive call starts alone, once every earlier call
//! committed. Commits are in order.

use toolrail_tools_core::Concurrency;

/// Where a prepared call stands when it asks to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartTurn {
    /// Every earlier call of its batch (or program) has committed.
    pub next_to_commit: bool,
    /// Calls running now.
    pub running: usize,
    /// The most that may run at once (at least 1).
    pub max_parallel: usize,
}

/// Whether the next call may be prepared, given how many earlier calls found exclusive
/// have not committed yet.
pub fn may_prepare(exclusive_uncommitted: usize) -> bool {
    exclusive_uncommitted == 0
}

/// Whether a prepared call of concurrency `mine` may start now, given `turn` and the
/// concurrency of every earlier call that has not settled (prepared and waiting, or
/// running).
///
/// ```
/// use toolrail_agent_loop::admission::{StartTurn, may_start};
/// use toolrail_tools_core::{Concurrency, ResourceClaim, ResourceKey};
///
/// let write = |key: &str| Concurrency::Shared(vec![ResourceClaim::write(ResourceKey::Custom(key.into()))]);
/// let turn = StartTurn { next_to_commit: false, running: 1, max_parallel: 4 };
/// assert!(may_start(&write("a"), turn, [&write("b")]));
/// assert!(!may_start(&write("a"), turn, [&write("a")]));
/// assert!(!may_start(&Concurrency::Exclusive, turn, []));
/// ```
pub fn may_start<'a>(
    mine: &Concurrency,
    turn: StartTurn,
    earlier_unsettled: impl IntoIterator<Item = &'a Concurrency>,
) -> bool {
    if turn.running >= turn.max_parallel.max(1) {
        return false;
    }
    match mine {
        Concurrency::Exclusive => turn.next_to_commit && turn.running == 0,
        Concurrency::Shared(_) => earlier_unsettled
            .into_iter()
            .all(|theirs| mine.may_overlap(theirs)),
    }
}

#[cfg(test)]
mod tests {
    //! The rule driven by a model of a batch that takes, at each step, any action the rule
    //! allows (proptest picks which): whatever the order, no two conflicting calls run
    //! together, an exclusive call runs alone after every earlier call committed, the cap
    //! holds, and every batch finishes.
    use super::*;
    use proptest::prelude::*;
    use toolrail_tools_core::{ResourceClaim, ResourceKey};

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Stage {
        Unprepared,
        Ready,
        Running,
        Settled,
        Committed,
    }

    fn concurrency() -> impl Strategy<Value = Concurrency> {
        let key =
            prop_oneof![Just("a"), Just("b")].prop_map(|key| ResourceKey::Custom(key.to_owned()));
        prop_oneof![
            Just(Concurrency::Exclusive),
            Just(Concurrency::Shared(Vec::new())),
            key.clone()
                .prop_map(|key| Concurrency::Shared(vec![ResourceClaim::read(key)])),
            key.prop_map(|key| Concurrency::Shared(vec![ResourceClaim::write(key)])),
        ]
    }

    /// Every action the rule allows in this state, as (call, next stage).
    fn allowed(
        calls: &[Concurrency],
        stages: &[Stage],
        max_parallel: usize,
    ) -> Vec<(usize, Stage)> {
        let mut actions = Vec::new();
        let next_prepare = stages.iter().position(|stage| *stage == Stage::Unprepared);
        let exclusive_uncommitted = stages
            .iter()
            .zip(calls)
            .filter(|(stage, concurrency)| {
                matches!(stage, Stage::Ready | Stage::Running | Stage::Settled)
                    && **concurrency == Concurrency::Exclusive
            })
            .count();
        if let Some(index) = next_prepare
            && may_prepare(exclusive_uncommitted)
        {
            actions.push((index, Stage::Ready));
        }
        let next_commit = stages.iter().position(|stage| *stage != Stage::Committed);
        let running = stages
            .iter()
            .filter(|stage| **stage == Stage::Running)
            .count();
        for (index, stage) in stages.iter().enumerate() {
            match stage {
                Stage::Ready => {
                    let turn = StartTurn {
                        next_to_commit: next_commit == Some(index),
                        running,
                        max_parallel,
                    };
                    let in_way = (0..index)
                        .filter(|earlier| matches!(stages[*earlier], Stage::Ready | Stage::Running))
                        .map(|earlier| &calls[earlier]);
                    if may_start(&calls[index], turn, in_way) {
                        actions.push((index, Stage::Running));
                    }
                }
                Stage::Running => actions.push((index, Stage::Settled)),
                Stage::Settled if next_commit == Some(index) => {
                    actions.push((index, Stage::Committed));
                }
                Stage::Unprepared | Stage::Settled | Stage::Committed => {}
            }
        }
        actions
    }

    proptest! {
        #[test]
        fn any_order_the_rule_allows_is_safe_and_finishes(
            calls in proptest::collection::vec(concurrency(), 1..8),
            max_parallel in 1usize..4,
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 64),
        ) {
            let mut stages = vec![Stage::Unprepared; calls.len()];
            let mut steps = 0;
            while stages.iter().any(|stage| *stage != Stage::Committed) {
                let actions = allowed(&calls, &stages, max_parallel);
                prop_assert!(!actions.is_empty(), "stuck: {:?} {:?}", calls, stages);
                let pick = picks[steps % picks.len()].index(actions.len());
                let (index, stage) = actions[pick];
                stages[index] = stage;
                steps += 1;
                prop_assert!(steps <= calls.len() * 4, "no progress");

                let running: Vec<usize> = (0..calls.len())
                    .filter(|index| stages[*index] == Stage::Running)
                    .collect();
                prop_assert!(running.len() <= max_parallel);
                for (at, first) in running.iter().enumerate() {
                    for second in &running[at + 1..] {
                        prop_assert!(
                            calls[*first].may_overlap(&calls[*second]),
                            "{first} and {second} run together: {:?}", calls
                        );
                    }
                    if calls[*first] == Concurrency::Exclusive {
                        prop_assert_eq!(running.len(), 1);
                        prop_assert!(stages[..*first].iter().all(|s| *s == Stage::Committed));
                    }
                }
            }
        }
    }
}
