//! A traced log names each call's span before the call is recorded
//! (`EventSink::next_call_span`): the pipeline writes it into the `tool/call` and hands it
//! to the tool (`ToolContext::trace`), which passes it on (an MCP call sends it to its
//! server). A call asked again after a restart keeps the span it was first recorded with.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use parking_lot::Mutex;
use support::FixedApprover;
use support::prelude::*;
use toolrail_session_log::{
    AppendFuture, AppendUrgency, EventDraft, EventSink, Timestamp, TraceRef,
};
use toolrail_tools_core::pipeline::{PendingAsk, Preparation};
use toolrail_tools_core::{ToolContext, ToolOutput, ToolResult, Typed, TypedTool};

/// A memory log whose session is traced: every call it records opens `span`.
struct Traced {
    log: MemorySink,
    span: TraceRef,
}

impl EventSink for Traced {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        self.log.append(draft, urgency)
    }

    fn next_call_span(&self) -> Option<TraceRef> {
        Some(self.span)
    }
}

/// Remembers the span each of its calls was handed.
#[derive(Clone, Default)]
struct Witness(Arc<Mutex<Vec<Option<TraceRef>>>>);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

impl TypedTool for Witness {
    type Args = NoArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<NoArgs>("witness", "Remembers its span.").build()
    }

    async fn run(&self, ctx: &ToolContext, _args: NoArgs) -> ToolResult {
        self.0.lock().push(ctx.trace());
        Ok(ToolOutput::text("seen"))
    }
}

/// A registry of one [`Witness`], and the witness.
fn witnessed() -> (Witness, Registry) {
    let witness = Witness::default();
    let registry = RegistryBuilder::new()
        .builtin(Typed::new(witness.clone()))
        .build()
        .unwrap()
        .0;
    (witness, registry)
}

fn span(byte: u8) -> TraceRef {
    TraceRef {
        trace_id: [byte; 16],
        span_id: [byte; 8],
    }
}

#[tokio::test]
async fn a_traced_call_records_its_span_and_its_tool_is_handed_the_same() {
    let (witness, registry) = witnessed();
    let log = Arc::new(Traced {
        log: MemorySink::new(),
        span: span(3),
    });
    let pipeline = Pipeline::builder(log.clone()).build();
    let done = pipeline
        .execute_one(
            &registry.snapshot(),
            CallRequest::new("c1", 0, "witness", "{}"),
            &BatchControl::default(),
        )
        .await
        .unwrap();
    assert!(!done.record().is_error(), "{:?}", done.record());
    assert_eq!(*witness.0.lock(), [Some(span(3))]);
    let recorded: Vec<Option<TraceRef>> = log
        .log
        .events()
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolCall(call) => Some(call.trace),
            _ => None,
        })
        .collect();
    assert_eq!(recorded, [Some(span(3))]);
}

#[tokio::test]
async fn a_call_asked_again_after_a_restart_keeps_its_recorded_span() {
    let (witness, registry) = witnessed();
    // The session now traces with another span: the call keeps the one it was recorded with.
    let log = Arc::new(Traced {
        log: MemorySink::new(),
        span: span(3),
    });
    let pipeline = Pipeline::builder(log.clone())
        .approval(FixedApprover::new(Some(ApprovalAnswer::AllowedOnce)))
        .build();
    let pending = PendingAsk {
        asked_at: Timestamp::now(),
        expires_at: None,
        trace: Some(span(5)),
    };
    let control = BatchControl::default();
    let (prepared, _) = pipeline
        .prepare_pending(
            &registry.snapshot(),
            CallRequest::new("c1", 0, "witness", "{}"),
            pending,
            &control,
        )
        .await
        .unwrap();
    let Preparation::Ready(ready) = prepared else {
        panic!("the approval allowed it")
    };
    let settled = pipeline.dispatch(ready, &control).await.unwrap();
    pipeline.finish(settled).await.unwrap();
    assert_eq!(*witness.0.lock(), [Some(span(5))]);
}
