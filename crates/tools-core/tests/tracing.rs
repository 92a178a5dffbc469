//! What the pipeline reports through `tracing`: isolated failures are logged, not lost, and
//! the tracing layer opens one `execute_tool` span per call with the GenAI attributes.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::fmt::Write as _;

use parking_lot::Mutex;
use support::prelude::*;
use support::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Remembers every event and span as text: `span <name> k=v ...` or `event <LEVEL> k=v ...`.
#[derive(Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next_id: Mutex<u64>,
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _metadata: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut Fields(&mut line));
        self.lines.lock().push(line);
        let mut next = self.next_id.lock();
        *next += 1;
        Id::from_u64(*next)
    }

    fn record(&self, _span: &Id, values: &Record<'_>) {
        let mut line = "record".to_owned();
        values.record(&mut Fields(&mut line));
        self.lines.lock().push(line);
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = format!("event {}", event.metadata().level());
        event.record(&mut Fields(&mut line));
        self.lines.lock().push(line);
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

fn capture() -> (Arc<Mutex<Vec<String>>>, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let lines = Arc::clone(&capture.lines);
    (lines, tracing::subscriber::set_default(capture))
}

#[tokio::test]
async fn observer_failures_are_logged_with_the_observer_and_the_call() {
    let (lines, _guard) = capture();
    let h = Harness::new(vec![Probe::new("probe", Behaviour::Succeed)]);
    let pipeline = h
        .pipeline()
        .observer(CountingObserver::new("metrics", Some(false)))
        .observer(CountingObserver::new("audit", Some(true)))
        .build();
    let result = h.run(&pipeline, "probe", "{}").await;
    assert!(!result.record().is_error());
    let lines = lines.lock().clone();
    let warnings: Vec<&String> = lines
        .iter()
        .filter(|line| line.starts_with("event WARN"))
        .collect();
    assert_eq!(warnings.len(), 2, "{lines:#?}");
    assert!(
        warnings[0].contains("observer=\"metrics\"") || warnings[0].contains("observer=metrics"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[0].contains("metrics backend down") && warnings[0].contains("c1"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1].contains("panicked") && warnings[1].contains("observer panicked on purpose"),
        "{}",
        warnings[1]
    );
}

#[tokio::test]
async fn the_tracing_layer_opens_one_execute_tool_span_per_call() {
    let (lines, _guard) = capture();
    let h = Harness::new(vec![Probe::new("probe", Behaviour::Fail("boom".into()))]);
    let pipeline = h
        .pipeline()
        .layer(Arc::new(toolrail_tools_core::TracingLayer))
        .build();
    h.run(&pipeline, "probe", "{}").await;
    let lines = lines.lock().clone();
    let spans: Vec<&String> = lines
        .iter()
        .filter(|line| line.starts_with("span execute_tool"))
        .collect();
    assert_eq!(spans.len(), 1, "{lines:#?}");
    assert!(spans[0].contains("gen_ai.tool.name=probe"), "{}", spans[0]);
    assert!(spans[0].contains("gen_ai.tool.call.id=c1"), "{}", spans[0]);
    assert!(
        lines
            .iter()
            .any(|line| line == "record error.type=TOOL_FAILED"),
        "{lines:#?}"
    );
}
