//! A recorded session exported after the fact (`toolrail replay --otlp`): its events are
//! fed, in the log's order and at their recorded times, through the very channel and
//! `SessionSpans` a live session uses (`feed.rs`), so the tree, names, kinds and attributes
//! are the live export's; a replay waits for room in the channel rather than drop.
//!
//! The ids: the SDK draws a span's ids from its provider's `IdGenerator` and ignores ids
//! set on a builder, so every provider gets [`RecordedIds`], which hands out the ids a
//! `turn/start` or `tool/call` carries while that one span is built ([`with_ids`]) and
//! random ones otherwise — a live session's ids too, written into the event before it is
//! stored and handed to the telemetry thread. Building `SpanData` by hand instead would
//! have meant a second span tree beside `spans.rs` — the duplicate this module exists to
//! avoid. The ids pass through a thread-local rather than a shared slot: the span is built
//! on the thread that sets it (each session's telemetry thread), a session's builds never
//! see another's, and nothing is threaded through the exporter.

use std::cell::Cell;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use toolrail_session_log::{Event, EventData, EventDraft, SessionId, TraceRef};
use toolrail_tools_core::Registry;

use super::feed::SpanFeed;
use super::spans::{ResumptionScan, SessionSpans};
use super::{ExportReport, Telemetry, TelemetryError};
use crate::config::{SessionConfig, TelemetryConfig};

/// Events fed between two flushes at most: a log's spans are made much faster than a
/// collector takes them, and the queue's bound is for a live session's bursts.
const FLUSH_EVERY: usize = 256;

/// The recorded ids the span being built on this thread has yet to take.
#[derive(Clone, Copy, Default)]
struct Pending {
    trace: Option<[u8; 16]>,
    span: Option<[u8; 8]>,
}

thread_local! {
    static NEXT: Cell<Pending> = const { Cell::new(Pending { trace: None, span: None }) };
}

/// Builds one span with `recorded`'s ids, when there are some (a root span takes the trace
/// id too; a child keeps its parent's trace).
pub(crate) fn with_ids<T>(recorded: Option<TraceRef>, build: impl FnOnce() -> T) -> T {
    let Some(recorded) = recorded else {
        return build();
    };
    NEXT.set(Pending {
        trace: Some(recorded.trace_id),
        span: Some(recorded.span_id),
    });
    let built = build();
    NEXT.set(Pending::default());
    built
}

/// The id generator of every provider: the ids [`with_ids`] hands to the span being built,
/// else the SDK's random ones.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecordedIds {
    random: RandomIdGenerator,
}

impl IdGenerator for RecordedIds {
    fn new_trace_id(&self) -> TraceId {
        let pending = NEXT.get();
        match pending.trace {
            Some(trace) => {
                NEXT.set(Pending {
                    trace: None,
                    ..pending
                });
                TraceId::from_bytes(trace)
            }
            None => self.random.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        let pending = NEXT.get();
        match pending.span {
            Some(span) => {
                NEXT.set(Pending {
                    span: None,
                    ..pending
                });
                SpanId::from_bytes(span)
            }
            None => self.random.new_span_id(),
        }
    }
}

/// Exports a recorded session's spans over OTLP as `config` and the `OTEL_*` variables
/// say (content capture only with `capture_content`, as live), at the times its log
/// recorded and with the span ids it recorded (fresh ones for a log written before they
/// were), then flushes and reports what became of them. The model's name and provider come
/// from the configuration the session recorded, and so do the tools whose descriptions the
/// spans carry (the log keeps none): this toolrail's built-in tools as that configuration
/// makes them, without starting its MCP servers — an MCP tool's span has no description.
pub fn export_recorded(
    config: &TelemetryConfig,
    events: &[Event],
) -> Result<ExportReport, TelemetryError> {
    let telemetry = Telemetry::otlp(config)?;
    let mut session = None;
    let mut recorded = None;
    for event in events {
        if let EventData::SessionStart(start) = &event.data {
            session = Some(start.session_id.clone());
            recorded = recorded_config(start.meta.as_ref());
        }
    }
    let session = session.unwrap_or_else(|| SessionId::new("unrecorded"));
    let settings = recorded
        .as_ref()
        .map(crate::agent::chat_settings)
        .unwrap_or_default();
    // A configuration this machine cannot make tools from (its workspace is elsewhere)
    // leaves the descriptions out, nothing else.
    let registry = recorded
        .and_then(|config| crate::agent::tool_registry(config, Vec::new()).ok())
        .unwrap_or_else(Registry::empty);
    let spans = SessionSpans::new(&telemetry, session, settings, registry);
    // The live session's path: its telemetry thread, fed through the same channel.
    let feed = SpanFeed::start(&telemetry, spans)
        .map_err(|error| TelemetryError::Thread(error.to_string()))?;
    // What the events so far were interrupted in, kept as they are read.
    let mut scan = ResumptionScan::default();
    for (index, event) in events.iter().enumerate() {
        let turn_start = matches!(event.data, EventData::TurnStart(_));
        // A turn after an interruption links to the interrupted one, as a resumed live
        // session's does (nothing happens after a turn that ended).
        if turn_start && let Some(before) = index.checked_sub(1).and_then(|at| events.get(at)) {
            feed.resume_from(scan.resumption(), before.ts.to_system_time());
        }
        scan.step(event);
        feed.observe_recorded(EventDraft {
            ts: event.ts,
            turn: event.turn,
            step: event.step,
            call_id: event.call_id.clone(),
            data: event.data.clone(),
        });
        if (index + 1) % FLUSH_EVERY == 0 || matches!(event.data, EventData::TurnEnd(_)) {
            telemetry.flush();
        }
    }
    // Spans still open (a log that ends mid-turn) are dropped unended, as a crashed live
    // session's are; the thread has made every span before it is joined.
    drop(feed);
    Ok(telemetry.shutdown())
}

/// The configuration a session recorded (`session/start`'s `meta.config`); none when it
/// recorded none or one this version cannot read.
fn recorded_config(meta: Option<&serde_json::Value>) -> Option<SessionConfig> {
    let config = meta?.get("config")?.clone();
    SessionConfig::from_json_value(config, "the recorded configuration").ok()
}
