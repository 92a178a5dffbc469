//! Randomized schedules (fixed seeds, 1,000 batches): whatever the mix of exclusive calls,
//! read and write claims, durations and cap, the scheduler commits in model order, never
//! runs more than the cap, never overlaps conflicting claims, runs exclusive calls alone
//! after everything before them, and answers every call.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use toolrail_tools_core::CallArgs;

use parking_lot::Mutex;
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{Scheduler, SchedulerConfig};
use toolrail_session_log::{BoxFuture, MemorySink, ToolSource};
use toolrail_tools_core::{
    CallRequest, ClaimMode, Concurrency, Pipeline, RegistryBuilder, ResourceClaim, ResourceKey,
    Tool, ToolContext, ToolOutput, ToolResult, ToolSpec,
};

/// Records when (on a logical clock) each body started and ended.
struct Timed {
    spec: ToolSpec,
    clock: AtomicU64,
    spans: Mutex<Vec<(u32, u64, u64)>>,
}

fn concurrency_of(args: &Value) -> Concurrency {
    if args["exclusive"].as_bool() == Some(true) {
        return Concurrency::Exclusive;
    }
    let claims = args["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|claim| ResourceClaim {
            key: ResourceKey::Custom(claim["key"].as_str().unwrap_or_default().to_owned()),
            mode: if claim["write"].as_bool() == Some(true) {
                ClaimMode::Write
            } else {
                ClaimMode::Read
            },
        })
        .collect();
    Concurrency::Shared(claims)
}

impl Tool for Timed {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, args: &CallArgs) -> Concurrency {
        concurrency_of(args)
    }

    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let index = u32::try_from(args["index"].as_u64().unwrap_or(0)).unwrap_or(0);
            let start = self.clock.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(
                args["sleep_ms"].as_u64().unwrap_or(0),
            ))
            .await;
            let end = self.clock.fetch_add(1, Ordering::SeqCst);
            self.spans.lock().push((index, start, end));
            Ok(ToolOutput::text("ok"))
        })
    }
}

#[derive(Clone, Debug)]
struct PlannedCall {
    exclusive: bool,
    claims: Vec<(u8, bool)>,
    sleep_ms: u64,
}

fn planned_call() -> impl Strategy<Value = PlannedCall> {
    (
        proptest::bool::weighted(0.2),
        proptest::collection::vec((0u8..3, any::<bool>()), 0..3),
        0u64..6,
    )
        .prop_map(|(exclusive, claims, sleep_ms)| PlannedCall {
            exclusive,
            claims,
            sleep_ms,
        })
}

fn args(index: usize, call: &PlannedCall) -> Value {
    let claims: Vec<Value> = call
        .claims
        .iter()
        .map(|(key, write)| {
            let key = ["A", "B", "C"][usize::from(*key)];
            json!({"key": key, "write": write})
        })
        .collect();
    json!({"index": index, "exclusive": call.exclusive, "claims": claims, "sleep_ms": call.sleep_ms})
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn every_schedule_keeps_the_rules(
        calls in proptest::collection::vec(planned_call(), 1..8),
        cap in 1usize..4,
        cancel_after_ms in proptest::option::weighted(0.3, 0u64..8),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        let tool = Arc::new(Timed { spec: ToolSpec::builder("timed", "t", json!({"type": "object"})).build(), clock: AtomicU64::new(0), spans: Mutex::new(Vec::new()) });
        let (registry, _) = RegistryBuilder::new().external(ToolSource::Extension("t".into()), tool.clone()).build().unwrap();
        let sink = Arc::new(MemorySink::new());
        let pipeline = Arc::new(Pipeline::builder(sink.clone()).build());
        let scheduler = Scheduler::new(pipeline, SchedulerConfig { max_parallel: std::num::NonZeroUsize::new(cap).unwrap(), ..SchedulerConfig::default() });
        let requests: Vec<CallRequest> = calls
            .iter()
            .enumerate()
            .map(|(index, call)| CallRequest::new(format!("c{index}"), index as u32, "timed", args(index, call).to_string()))
            .collect();
        let tools = registry.snapshot();
        let cancel = CancellationToken::new();
        let outcome = runtime.block_on(async {
            if let Some(ms) = cancel_after_ms {
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    cancel.cancel();
                });
            }
            scheduler.run_batch(&tools, requests.clone(), cancel.clone(), None).await
        }).unwrap();

        // Every call answered, in model order.
        let order: Vec<String> = outcome.results.iter().map(|r| r.identity().call_id.to_string()).collect();
        prop_assert_eq!(order, (0..calls.len()).map(|i| format!("c{i}")).collect::<Vec<_>>());
        let mut spans = tool.spans.lock().clone();
        spans.sort();
        // Exactly one tool/result per call, after its tool/call.
        let events = sink.events();
        for index in 0..calls.len() {
            let id = format!("c{index}");
            let of = |kind: &str| events.iter().filter(|e| e.data.kind() == kind && e.call_id.as_ref().map(|c| c.as_str()) == Some(id.as_str())).map(|e| e.seq).collect::<Vec<_>>();
            let (recorded, results) = (of("tool/call"), of("tool/result"));
            prop_assert_eq!(results.len(), 1, "{} has {} results", id, results.len());
            prop_assert!(recorded.len() == 1 && recorded[0] < results[0]);
            // A call reported as not executed never ran; one that ran is not reported so.
            let not_executed = outcome.results[index].record().error_code() == Some(&toolrail_session_log::ErrorCode::NotExecuted);
            let ran = !of("tool/start").is_empty() || spans.iter().any(|span| span.0 as usize == index);
            prop_assert!(!(not_executed && ran), "{} is NOT_EXECUTED but started", id);
            if cancel_after_ms.is_none() {
                prop_assert!(!outcome.results[index].record().is_error());
            }
        }
        if cancel_after_ms.is_none() {
            prop_assert_eq!(spans.len(), calls.len());
        }

        // Bodies that were abandoned or stopped early have no span; the rules hold for the rest.
        let overlap = |a: &(u32, u64, u64), b: &(u32, u64, u64)| a.1 < b.2 && b.1 < a.2;
        for a in &spans {
            // The cap: how many bodies were running at this one's start.
            let running = spans.iter().filter(|b| b.1 <= a.1 && a.1 < b.2).count();
            prop_assert!(running <= cap, "{} bodies ran at once with a cap of {}", running, cap);
            for b in &spans {
                if a.0 >= b.0 {
                    continue;
                }
                let (first, second) = (&calls[a.0 as usize], &calls[b.0 as usize]);
                let conflict = first.exclusive
                    || second.exclusive
                    || cap == 1
                    || first.claims.iter().any(|(key, write)| second.claims.iter().any(|(their_key, their_write)| key == their_key && (*write || *their_write)));
                if conflict {
                    prop_assert!(a.2 < b.1, "c{} and c{} conflict but overlapped: {:?} {:?}", a.0, b.0, a, b);
                }
                if second.exclusive {
                    prop_assert!(!overlap(a, b));
                }
            }
        }
    }
}
