//! Commits of one batch share the log's syncs: a result is handed to the log as soon as its
//! turn comes, without waiting for the previous result's sync, and it is reported committed
//! only once durable, still in model order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use toolrail_tools_core::CallArgs;

use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{LiveEvent, Scheduler, SchedulerConfig};
use toolrail_session_log::{
    AppendFuture, AppendUrgency, BoxFuture, EventData, EventDraft, EventSink, MemorySink,
    ToolSource,
};
use toolrail_tools_core::{
    CallRequest, Concurrency, Pipeline, RegistryBuilder, Tool, ToolContext, ToolOutput, ToolResult,
    ToolSpec,
};

/// A memory log whose durable `tool/result` appends take their place at once but are answered
/// only when the test releases the sync.
struct HeldSync {
    log: MemorySink,
    released: watch::Sender<bool>,
}

impl EventSink for HeldSync {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        let held =
            urgency == AppendUrgency::Durable && matches!(draft.data, EventData::ToolResult(_));
        let appended = self.log.append(draft, urgency);
        if !held {
            return appended;
        }
        let mut released = self.released.subscribe();
        AppendFuture::Waiting(Box::pin(async move {
            let seq = appended.await?;
            let _ = released.wait_for(|released| *released).await;
            Ok(seq)
        }))
    }
}

struct Instant;

impl Tool for Instant {
    fn spec(&self) -> &ToolSpec {
        static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| {
            ToolSpec::builder("instant", "returns at once", json!({"type": "object"})).build()
        })
    }
    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        Concurrency::shared()
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async { Ok(ToolOutput::text("ok")) })
    }
}

#[tokio::test(flavor = "current_thread")]
async fn later_commits_do_not_wait_for_an_earlier_sync_and_report_in_model_order() {
    let (released, _) = watch::channel(false);
    let sink = Arc::new(HeldSync {
        log: MemorySink::new(),
        released,
    });
    let (registry, _) = RegistryBuilder::new()
        .external(ToolSource::Extension("test".into()), Arc::new(Instant))
        .build()
        .unwrap();
    let tools = registry.snapshot();
    let pipeline = Arc::new(Pipeline::builder(sink.clone()).build());
    let scheduler = Scheduler::new(pipeline, SchedulerConfig::default());
    let calls: Vec<CallRequest> = (1..=3)
        .map(|n| CallRequest::new(format!("c{n}"), n, "instant", "{}"))
        .collect();
    let (live_tx, mut live) = mpsc::unbounded_channel();
    let batch = tokio::spawn(async move {
        scheduler
            .run_batch(
                &tools,
                calls,
                CancellationToken::new(),
                Some(std::sync::Arc::new(live_tx)),
            )
            .await
    });

    // Every result reaches the log while the first one's sync is still held.
    let results_in_log = || {
        sink.log
            .events()
            .iter()
            .filter(|event| matches!(event.data, EventData::ToolResult(_)))
            .count()
    };
    for _ in 0..10_000 {
        if results_in_log() == 3 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        results_in_log(),
        3,
        "later results waited for an earlier sync"
    );
    let mut before_sync = Vec::new();
    while let Ok(event) = live.try_recv() {
        before_sync.push(event);
    }
    assert!(
        !before_sync
            .iter()
            .any(|event| matches!(event, LiveEvent::Committed { .. })),
        "a result was reported committed before it was durable: {before_sync:?}"
    );
    assert!(
        !batch.is_finished(),
        "the batch ended before its results were durable"
    );

    sink.released.send_replace(true);
    let outcome = batch.await.unwrap().unwrap();
    let live_records: Vec<LiveEvent> = std::iter::from_fn(|| live.try_recv().ok()).collect();
    let committed: Vec<(String, u64)> = live_records
        .iter()
        .cloned()
        .filter_map(|event| match event {
            LiveEvent::Committed { call_id, seq, .. } => Some((call_id.to_string(), seq)),
            LiveEvent::Prepared { .. }
            | LiveEvent::Started { .. }
            | LiveEvent::Progress { .. }
            | LiveEvent::Finished { .. }
            | LiveEvent::Model(_) => None,
        })
        .collect();
    let from_results: Vec<(String, u64)> = outcome
        .results
        .iter()
        .map(|result| (result.identity().call_id.to_string(), result.seq()))
        .collect();
    assert_eq!(committed, from_results);
    // The live event carries the very record the batch committed (one record, DESIGN §3).
    let records: Vec<_> = live_records
        .iter()
        .filter_map(|event| {
            if let LiveEvent::Committed { record, .. } = event {
                Some(record)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(records.len(), outcome.results.len());
    for (live_record, result) in records.iter().zip(&outcome.results) {
        assert!(std::sync::Arc::ptr_eq(live_record, result.record()));
    }
    let ids: Vec<&str> = committed.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert!(committed.windows(2).all(|pair| pair[0].1 < pair[1].1));
}
