//! Stage 3: pre-execute hooks, a waterfall in which each hook may call `next` and wrap
//! its decision.
//!
//! Wrapping can only add restrictions. The pipeline remembers every decision returned along
//! the chain: a `Deny` from any hook that ran stands (the innermost deny is reported), an
//! `Ask` anywhere requires an approval, a `Rewrite` anywhere is applied, two different
//! rewrites fail closed, and a hook that errors or panics fails the call with `HOOK_FAILED`
//! even if an outer hook swallowed the error. A hook that does not call `next` ends the chain
//! early. Hooks judge the arguments the model sent; a rewrite is seen by the approver and the
//! guards, which run after the chain.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use serde_json::Value;
use toolrail_session_log::BoxFuture;

use crate::unwind::CatchUnwind;
use crate::view::{CallView, HookError};

/// What a pre-execute hook decides.
#[derive(Clone, Debug, PartialEq)]
pub enum PreExecuteDecision {
    /// Go on.
    Allow,
    /// Refuse: `POLICY_DENIED`.
    Deny {
        /// Why, for the model; the pipeline appends the hook's name.
        reason: String,
    },
    /// Ask the approval service; `session_key` is what an "approve for session" answer
    /// would cover.
    Ask {
        /// Why the call needs an approval, shown to the approver.
        reason: String,
        /// `None` when no "approve for session" answer may cover the call: the approver can
        /// allow it once only.
        session_key: Option<String>,
    },
    /// Run with these arguments instead. They are re-validated against the input schema and
    /// logged as `tool/args-rewritten` before anything runs.
    Rewrite {
        /// The whole new arguments object, in place of the model's.
        arguments: Value,
        /// Why, recorded in `tool/args-rewritten`.
        reason: String,
    },
}

/// A hook that runs before a call may start.
///
/// Implementors guarantee: `decide` does not act on the world (the call has not started);
/// it either returns a decision, or calls `next.run()` and returns a decision derived from
/// it. Errors and panics are caught and fail the call closed.
pub trait PreExecuteHook: Send + Sync {
    /// A stable name, recorded as `by` in rewrites and in failure messages.
    fn name(&self) -> &str;

    /// Decides about `call`, optionally consulting the rest of the chain through `next`.
    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>>;
}

/// The rest of the chain after the current hook.
pub struct PreNext<'a> {
    rest: &'a [Arc<dyn PreExecuteHook>],
    call: &'a CallView<'a>,
    trail: &'a DecisionTrail,
}

impl<'a> PreNext<'a> {
    /// Runs the remaining hooks; with none left the answer is `Allow`.
    pub fn run(self) -> PreNextFuture<'a> {
        run_chain(self.rest, self.call, self.trail)
    }
}

/// The decision of the rest of the chain. Not boxed: a chain of `n` hooks costs the `n`
/// boxes of the hooks' own futures and nothing more.
pub struct PreNextFuture<'a> {
    state: ChainState<'a>,
}

enum ChainState<'a> {
    /// No hook left: allow.
    End,
    Running {
        hook: &'a str,
        decision: CatchUnwind<BoxFuture<'a, Result<PreExecuteDecision, HookError>>>,
        trail: &'a DecisionTrail,
    },
    Finished,
}

impl Future for PreNextFuture<'_> {
    type Output = Result<PreExecuteDecision, HookError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            ChainState::End => {
                this.state = ChainState::Finished;
                Poll::Ready(Ok(PreExecuteDecision::Allow))
            }
            ChainState::Running {
                hook,
                decision,
                trail,
            } => {
                let outcome = match Pin::new(decision).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(outcome)) => outcome,
                    Poll::Ready(Err(panic)) => Err(HookError::new(format!("panicked: {panic}"))),
                };
                trail.record(hook, &outcome);
                this.state = ChainState::Finished;
                Poll::Ready(outcome)
            }
            ChainState::Finished => Poll::Ready(Err(HookError::new(
                "the hook chain was polled after it finished",
            ))),
        }
    }
}

pub(crate) fn run_chain<'a>(
    hooks: &'a [Arc<dyn PreExecuteHook>],
    call: &'a CallView<'a>,
    trail: &'a DecisionTrail,
) -> PreNextFuture<'a> {
    let state = match hooks.split_first() {
        None => ChainState::End,
        Some((hook, rest)) => {
            let next = PreNext { rest, call, trail };
            ChainState::Running {
                hook: hook.name(),
                decision: CatchUnwind::start(|| hook.decide(call, next)),
                trail,
            }
        }
    };
    PreNextFuture { state }
}

/// Everything the chain decided, so no wrapper can hide a deny, an ask, a rewrite or a failure.
#[derive(Default)]
pub(crate) struct DecisionTrail {
    state: Mutex<TrailState>,
}

#[derive(Default)]
pub(crate) struct TrailState {
    pub failure: Option<(String, String)>,
    pub deny: Option<(String, String)>,
    pub ask: Option<(String, String, Option<String>)>,
    pub rewrite: Option<(String, Value, String)>,
}

impl DecisionTrail {
    fn record(&self, by: &str, outcome: &Result<PreExecuteDecision, HookError>) {
        let mut state = self.state.lock();
        match outcome {
            Err(error) => {
                state
                    .failure
                    .get_or_insert_with(|| (by.to_owned(), error.0.clone()));
            }
            Ok(PreExecuteDecision::Allow) => {}
            Ok(PreExecuteDecision::Deny { reason }) => {
                state
                    .deny
                    .get_or_insert_with(|| (by.to_owned(), reason.clone()));
            }
            Ok(PreExecuteDecision::Ask {
                reason,
                session_key,
            }) => {
                state
                    .ask
                    .get_or_insert_with(|| (by.to_owned(), reason.clone(), session_key.clone()));
            }
            Ok(PreExecuteDecision::Rewrite { arguments, reason }) => {
                match &state.rewrite {
                    None => {
                        state.rewrite = Some((by.to_owned(), arguments.clone(), reason.clone()))
                    }
                    // An outer hook passing an inner rewrite through keeps the inner's name.
                    Some((_, args, _)) if args == arguments => {}
                    // Two hooks want different arguments: neither may silently undo the other.
                    Some((first, _, _)) => {
                        let conflict = format!(
                            "rewrote the arguments differently from `{first}`; conflicting rewrites fail closed"
                        );
                        state
                            .failure
                            .get_or_insert_with(|| (by.to_owned(), conflict));
                    }
                }
            }
        }
    }

    pub(crate) fn into_state(self) -> TrailState {
        self.state.into_inner()
    }
}
