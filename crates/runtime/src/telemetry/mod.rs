//! OpenTelemetry for sessions (feature `otlp`): every turn, model request, batch and tool
//! call as a GenAI span, the GenAI histograms, exported over OTLP/HTTP (protobuf).
//!
//! Spans are made from the session's own records (`spans.rs`), with the `opentelemetry` API
//! directly rather than `tracing` spans: a phase's times come from the record's timing, a
//! call's parent is its batch or its program's `run_code` call whatever task runs it, and
//! the span ids go into the log; `genai.rs` holds the names and the mapping from records.
//! As each event is appended, the session only writes the span ids into it and hands a
//! copy to a bounded channel; a thread of the session's own makes the spans (`feed.rs`),
//! and a replay feeds its log through the same channel. A session without telemetry pays
//! one branch per appended event.

mod export;
pub(crate) mod feed;
pub mod genai;
pub mod mcp;
mod replay;
pub(crate) mod spans;
#[cfg(test)]
mod tests;

pub use replay::export_recorded;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::config::TelemetryConfig;
use genai::{Capture, Semconv, metric};

/// Why telemetry could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be made (a malformed endpoint or header variable).
    #[error(
        "the OTLP exporter could not be made: {0}; check [telemetry] endpoint, OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS"
    )]
    Exporter(String),
    /// The thread that makes the spans could not be started.
    #[error("the telemetry thread could not be started: {0}")]
    Thread(String),
}

/// The GenAI histograms.
#[derive(Clone)]
pub(crate) struct Instruments {
    pub operation_duration: Histogram<f64>,
    pub token_usage: Histogram<u64>,
    pub execute_tool_duration: Histogram<f64>,
    pub mcp_client_duration: Histogram<f64>,
}

/// What became of the spans by the end: how many the bounded queue dropped, how many the
/// collector did not take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Spans the collector took.
    pub sent: u64,
    /// Spans dropped because the queue was full (the collector did not keep up).
    pub dropped: u64,
    /// Spans sent in batches the collector refused or never answered.
    pub failed: u64,
    /// Events whose spans were not made: dropped because a session's telemetry thread fell
    /// more than `max_queue` events behind it, or skipped after such a drop until the next
    /// turn (so no broken tree is exported).
    pub events_dropped: u64,
}

#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub sent: AtomicU64,
    pub dropped: AtomicU64,
    pub failed: AtomicU64,
    pub events_dropped: AtomicU64,
}

/// A process's OpenTelemetry export: give it to [`AgentBuilder::telemetry`] for every
/// session that should be traced, and [`Telemetry::shutdown`] it before the process ends
/// (spans are exported in batches: what is queued goes out then).
///
/// The exporter is OTLP over HTTP with protobuf bodies. The collector is
/// `[telemetry] endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT` (signal paths `/v1/traces`,
/// `/v1/metrics` appended), else `http://localhost:4318`; headers from
/// `OTEL_EXPORTER_OTLP_HEADERS`; the service is `OTEL_SERVICE_NAME`, else `toolrail`.
/// A session's calls do not make spans: each session hands its events to a thread of its
/// own through a bounded channel (`max_queue` events), which makes them. Spans wait in a
/// bounded queue (`max_queue`) exported on another thread, so a slow or dead collector
/// never slows a call nor grows memory: past either bound, events or spans are dropped,
/// counted, and reported once.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use toolrail_runtime::{Agent, TelemetryConfig, telemetry::Telemetry};
/// let telemetry = Telemetry::otlp(&TelemetryConfig { otlp: true, ..TelemetryConfig::default() })?;
/// let agent = Agent::builder()
///     .workspace(["."])
///     .telemetry(telemetry.clone())
///     .build()
///     .await?;
/// agent.prompt("What does this project do?").await?;
/// let report = telemetry.shutdown();
/// assert_eq!(report.dropped, 0);
/// # Ok(()) }
/// ```
///
/// [`AgentBuilder::telemetry`]: crate::AgentBuilder::telemetry
#[derive(Clone)]
pub struct Telemetry {
    pub(crate) tracer: SdkTracer,
    pub(crate) instruments: Instruments,
    pub(crate) capture: Capture,
    pub(crate) semconv: Semconv,
    /// Calls shorter than this get no phase spans (`[telemetry] phase_spans_min_ms`).
    pub(crate) phase_min: Duration,
    /// Events a session's telemetry thread may be behind at most (`[telemetry] max_queue`).
    queue: usize,
    /// Every live session's channel to its telemetry thread, drained before a flush.
    feeds: Arc<feed::Feeds>,
    tracers: SdkTracerProvider,
    meters: SdkMeterProvider,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("capture", &self.capture)
            .field("semconv", &self.semconv)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts the OTLP export `config` describes (whether or not `config.otlp` is set: the
    /// caller decided to export). Reads the standard `OTEL_*` variables.
    pub fn otlp(config: &TelemetryConfig) -> Result<Self, TelemetryError> {
        let counters = Arc::new(Counters::default());
        let (tracers, meters) = export::providers(config, &counters)?;
        let semconv = Semconv::from_opt_in(
            std::env::var("OTEL_SEMCONV_STABILITY_OPT_IN")
                .ok()
                .as_deref(),
        );
        Ok(Self::with_providers(
            tracers, meters, config, semconv, counters,
        ))
    }

    /// Telemetry over providers made elsewhere (tests read spans from an in-memory
    /// exporter).
    pub(crate) fn with_providers(
        tracers: SdkTracerProvider,
        meters: SdkMeterProvider,
        config: &TelemetryConfig,
        semconv: Semconv,
        counters: Arc<Counters>,
    ) -> Self {
        let tracer = tracers.tracer(genai::SCOPE);
        let meter = meters.meter(genai::SCOPE);
        // The conventions' advised buckets: seconds from 10 ms to 80 s; tokens 1 to 4^13.
        let seconds = vec![
            0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
        ];
        let tokens = (0..14).map(|power| 4f64.powi(power)).collect();
        let instruments = Instruments {
            operation_duration: meter
                .f64_histogram(metric::OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(seconds.clone())
                .build(),
            token_usage: meter
                .u64_histogram(metric::TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Measures number of input and output tokens used")
                .with_boundaries(tokens)
                .build(),
            execute_tool_duration: meter
                .f64_histogram(metric::EXECUTE_TOOL_DURATION)
                .with_unit("s")
                .with_description("Tool call duration, from record to commit")
                .with_boundaries(seconds.clone())
                .build(),
            mcp_client_duration: meter
                .f64_histogram(mcp::CLIENT_OPERATION_DURATION)
                .with_unit("s")
                .with_description(
                    "The duration of the MCP request as observed on the sender from the time it was sent until the response or ack is received",
                )
                .with_boundaries(seconds)
                .build(),
        };
        let capture = if config.capture_content {
            Capture::Content
        } else {
            Capture::Off
        };
        Self {
            tracer,
            instruments,
            capture,
            semconv,
            phase_min: Duration::from_millis(config.phase_spans_min_ms),
            queue: config.max_queue.max(1),
            feeds: Arc::default(),
            tracers,
            meters,
            counters,
        }
    }

    /// What became of the spans so far.
    pub fn report(&self) -> ExportReport {
        ExportReport {
            sent: self.counters.sent.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            events_dropped: self.counters.events_dropped.load(Ordering::Relaxed),
        }
    }

    /// Makes the spans of every event handed over so far, then exports what is queued,
    /// waiting for it (at most about the export timeout for a collector that does not
    /// answer). A replay keeps its queue short with it (a log's spans are made faster than
    /// any collector takes them); `toolrail mcp serve` sends its spans with it as soon as
    /// its client leaves, before it stops its own MCP servers, since a client may follow
    /// with SIGTERM. It blocks: call it off the async workers.
    ///
    /// ```no_run
    /// # fn demo(telemetry: toolrail_runtime::telemetry::Telemetry) {
    /// telemetry.flush();
    /// assert_eq!(telemetry.report().dropped, 0);
    /// # }
    /// ```
    pub fn flush(&self) {
        feed::drain(&self.feeds);
        // What a failed export lost is counted by the exporter.
        let _ = self.tracers.force_flush();
    }

    /// Makes the spans of what every live session handed over, exports what is queued
    /// (waiting at most about `OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s by default, for a collector
    /// that does not answer) and stops the export threads. Spans ended later are dropped.
    pub fn shutdown(&self) -> ExportReport {
        // The spans of what live sessions handed over are made first.
        feed::drain(&self.feeds);
        let timeout = Duration::from_secs(10);
        // A collector that is gone is what the report says; there is nothing else to do.
        let _ = self.tracers.shutdown_with_timeout(timeout);
        let _ = self.meters.shutdown_with_timeout(timeout);
        self.report()
    }
}
