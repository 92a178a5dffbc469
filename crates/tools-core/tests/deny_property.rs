//! Property: for any sequence of pre-execute hooks (allow, deny, ask, error, rewrite; deciding
//! before or after the rest of the chain), any guards and any approval answer, a call for
//! which any stage produced a deny, a failure, conflicting rewrites or an unapproved ask never
//! reaches its body; otherwise it runs exactly when no guard denies, with the rewritten
//! arguments.
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
    ApprovalAnswer, CallRequest, CallView, Guard, GuardVerdict, HookError, Pipeline,
    PreExecuteDecision, PreExecuteHook, PreNext, RegistryBuilder, pipeline::BatchControl,
};

#[derive(Clone, Copy, Debug)]
enum Returns {
    Allow,
    Deny,
    Ask,
    Error,
    /// Rewrites the path to `r<n>`.
    Rewrite(u8),
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
    rewrote_to: parking_lot::Mutex<Option<serde_json::Value>>,
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
        Returns::Rewrite(n) => Ok(PreExecuteDecision::Rewrite {
            arguments: serde_json::json!({ "path": format!("r{n}") }),
            reason: "r".into(),
        }),
    }
}

impl RecordingHook {
    fn note(&self, outcome: &Result<PreExecuteDecision, HookError>) {
        match outcome {
            Ok(PreExecuteDecision::Deny { .. }) | Err(_) => {
                self.denied.store(true, Ordering::SeqCst)
            }
            Ok(PreExecuteDecision::Ask { .. }) => self.objected.store(true, Ordering::SeqCst),
            Ok(PreExecuteDecision::Rewrite { arguments, .. }) => {
                *self.rewrote_to.lock() = Some(arguments.clone());
            }
            Ok(PreExecuteDecision::Allow) => {}
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
        Just(Returns::Error),
        (0u8..2).prop_map(Returns::Rewrite),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        returns().prop_map(Shape::Direct),
        returns().prop_map(Shape::AfterNext),
        Just(Shape::PassThrough)
    ]
}

fn answer() -> impl Strategy<Value = ApprovalAnswer> {
    prop_oneof![
        Just(ApprovalAnswer::AllowedOnce),
        Just(ApprovalAnswer::AllowedForSession {
            key: "probe:*".into()
        }),
        Just(ApprovalAnswer::Rejected { reason: None }),
        Just(ApprovalAnswer::Cancelled),
        Just(ApprovalAnswer::Expired),
        Just(ApprovalAnswer::Unavailable),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_call_with_a_deny_reaches_its_body(
        shapes in proptest::collection::vec(shape(), 0..6),
        guards in proptest::collection::vec(any::<bool>(), 0..4),
        answer in answer(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let probe = Probe::new("probe", Behaviour::Succeed);
        let (registry, _) = RegistryBuilder::new().external(ToolSource::Extension("t".into()), probe.clone()).build().unwrap();
        let hooks: Vec<Arc<RecordingHook>> = shapes
            .iter()
            .map(|&shape| Arc::new(RecordingHook {
                shape,
                denied: AtomicBool::new(false),
                objected: AtomicBool::new(false),
                rewrote_to: parking_lot::Mutex::new(None),
            }))
            .collect();
        let guards: Vec<Arc<RecordingGuard>> = guards.iter().map(|&deny| Arc::new(RecordingGuard { deny, ran: AtomicBool::new(false) })).collect();
        let approved = matches!(answer, ApprovalAnswer::AllowedOnce | ApprovalAnswer::AllowedForSession { .. });
        let mut builder = Pipeline::builder(sink()).approval(FixedApprover::new(Some(answer)));
        for hook in &hooks {
            builder = builder.pre_hook(hook.clone());
        }
        for guard in &guards {
            builder = builder.guard(guard.clone());
        }
        let pipeline = builder.build();
        let result = runtime.block_on(pipeline.execute_one(&registry.snapshot(), CallRequest::new("c1", 0, "probe", "{}"), &BatchControl::default())).unwrap();

        // What the hooks that ran decided (short-circuiting is a hook's right).
        let hook_denied = hooks.iter().any(|hook| hook.denied.load(Ordering::SeqCst));
        let asked = hooks.iter().any(|hook| hook.objected.load(Ordering::SeqCst));
        let mut rewrites: Vec<serde_json::Value> = hooks.iter().filter_map(|hook| hook.rewrote_to.lock().clone()).collect();
        rewrites.dedup();
        let conflicting_rewrites = rewrites.len() > 1;
        let refused_before_guards = hook_denied || conflicting_rewrites || (asked && !approved);
        // Guards are judged by configuration, not by what ran: once the hooks and the
        // approver let a call through, every guard must have had its say.
        let any_guard_denies = guards.iter().any(|guard| guard.deny);
        let ran = probe.runs() == 1;
        if refused_before_guards {
            prop_assert!(!ran, "a refused call ran: {:?} -> {:?}", shapes, result.record().error);
            prop_assert!(result.record().is_error());
        } else {
            prop_assert_eq!(ran, !any_guard_denies, "guards {:?} -> {:?}", guards.iter().map(|g| g.deny).collect::<Vec<_>>(), result.record().error);
            if let (true, Some(effective)) = (ran, rewrites.first()) {
                prop_assert_eq!(&probe.seen_args.lock()[0], effective, "the body got the rewritten arguments");
            }
        }
    }
}
