//! Property: for any sequence of pre-execute hooks and guards with any verdicts, a call for
//! which any stage produced a deny (or failed) never reaches its body; and a call nobody
//! objected to always does.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use proptest::prelude::*;
use support::{Behaviour, FixedApprover, Probe, sink};
use toolrail_session_log::{BoxFuture, ToolSource};
use toolrail_tools_core::{
    ApprovalAnswer, BatchControl, CallRequest, CallView, Guard, GuardVerdict, HookError, Pipeline,
    PreExecuteDecision, PreExecuteHook, PreNext, RegistryBuilder,
};

#[derive(Clone, Copy, Debug)]
enum Returns {
    Allow,
    Deny,
    Ask,
    Error,
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Decides without consulting the rest of the chain.
    Direct(Returns),
    /// Calls next, then returns its own decision regardless.
    AfterNext(Returns),
    /// Calls next and returns what it said.
    PassThrough,
}

struct RecordingHook {
    shape: Shape,
    denied: AtomicBool,
    objected: AtomicBool,
}

fn decision(returns: Returns) -> Result<PreExecuteDecision, HookError> {
    match returns {
        Returns::Allow => Ok(PreExecuteDecision::Allow),
        Returns::Deny => Ok(PreExecuteDecision::Deny {
            reason: "no".into(),
        }),
        Returns::Ask => Ok(PreExecuteDecision::Ask {
            reason: "?".into(),
            session_key: None,
        }),
        Returns::Error => Err(HookError::new("broken")),
    }
}

impl RecordingHook {
    fn note(&self, outcome: &Result<PreExecuteDecision, HookError>) {
        match outcome {
            Ok(PreExecuteDecision::Deny { .. }) | Err(_) => {
                self.denied.store(true, Ordering::SeqCst)
            }
            Ok(PreExecuteDecision::Ask { .. }) => self.objected.store(true, Ordering::SeqCst),
            Ok(PreExecuteDecision::Allow | PreExecuteDecision::Rewrite { .. }) => {}
        }
    }
}

impl PreExecuteHook for RecordingHook {
    fn name(&self) -> &str {
        "recording"
    }

    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            let outcome = match self.shape {
                Shape::Direct(returns) => decision(returns),
                Shape::AfterNext(returns) => {
                    let _ = next.run().await;
                    decision(returns)
                }
                Shape::PassThrough => next.run().await,
            };
            self.note(&outcome);
            outcome
        })
    }
}

struct RecordingGuard {
    deny: bool,
    ran: AtomicBool,
}

impl Guard for RecordingGuard {
    fn name(&self) -> &str {
        "recording"
    }

    fn check(&self, _call: &CallView<'_>) -> GuardVerdict {
        self.ran.store(true, Ordering::SeqCst);
        if self.deny {
            GuardVerdict::Deny {
                reason: "no".into(),
            }
        } else {
            GuardVerdict::Abstain
        }
    }
}

fn returns() -> impl Strategy<Value = Returns> {
    prop_oneof![
        Just(Returns::Allow),
        Just(Returns::Deny),
        Just(Returns::Ask),
        Just(Returns::Error)
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        returns().prop_map(Shape::Direct),
        returns().prop_map(Shape::AfterNext),
        Just(Shape::PassThrough)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_call_with_a_deny_reaches_its_body(
        shapes in proptest::collection::vec(shape(), 0..6),
        guards in proptest::collection::vec(any::<bool>(), 0..4),
        approve in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let probe = Probe::new("probe", Behaviour::Succeed);
        let (registry, _) = RegistryBuilder::new().external(ToolSource::Extension("t".into()), probe.clone()).build().unwrap();
        let hooks: Vec<Arc<RecordingHook>> = shapes
            .iter()
            .map(|&shape| Arc::new(RecordingHook { shape, denied: AtomicBool::new(false), objected: AtomicBool::new(false) }))
            .collect();
        let guards: Vec<Arc<RecordingGuard>> = guards.iter().map(|&deny| Arc::new(RecordingGuard { deny, ran: AtomicBool::new(false) })).collect();
        let answer = if approve { ApprovalAnswer::AllowedOnce } else { ApprovalAnswer::Rejected { reason: None } };
        let mut builder = Pipeline::builder(sink()).approval(FixedApprover::new(Some(answer)));
        for hook in &hooks {
            builder = builder.pre_hook(hook.clone());
        }
        for guard in &guards {
            builder = builder.guard(guard.clone());
        }
        let pipeline = builder.build();
        let result = runtime.block_on(pipeline.execute_one(&registry.snapshot(), CallRequest::new("c1", 0, "probe", "{}"), &BatchControl::default())).unwrap();

        let hook_denied = hooks.iter().any(|hook| hook.denied.load(Ordering::SeqCst));
        let asked = hooks.iter().any(|hook| hook.objected.load(Ordering::SeqCst));
        let guard_denied = guards.iter().any(|guard| guard.deny && guard.ran.load(Ordering::SeqCst));
        let ran = probe.runs() == 1;
        if hook_denied || guard_denied || (asked && !approve) {
            prop_assert!(!ran, "a denied call ran: {:?} -> {:?}", shapes, result.record.error);
            prop_assert!(result.record.is_error);
        } else {
            prop_assert!(ran, "a call nobody refused did not run: {:?} -> {:?}", shapes, result.record.error);
        }
    }
}
