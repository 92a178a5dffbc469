//! The OTLP/HTTP exporters and the bounded queue in front of them: the SDK's batch
//! processor exports on a thread of its own; the count of spans queued or being sent is
//! ours, so a span past the bound is dropped here — counted, and reported once — before
//! it could queue up behind a collector that does not keep up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter,
    SpanProcessor,
};
use rustls_platform_verifier::BuilderVerifierExt as _;

use super::replay::RecordedIds;
use super::{Counters, TelemetryError};
use crate::config::TelemetryConfig;

/// The tracer and meter providers `config` describes.
pub(super) fn providers(
    config: &TelemetryConfig,
    counters: &Arc<Counters>,
) -> Result<(SdkTracerProvider, SdkMeterProvider), TelemetryError> {
    let resource = resource();
    let client = http_client()?;
    let endpoint = config
        .endpoint
        .as_deref()
        .map(|base| base.trim_end_matches('/').to_owned());
    let mut spans = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client.clone())
        .with_protocol(Protocol::HttpBinary);
    if let Some(base) = &endpoint {
        spans = spans.with_endpoint(format!("{base}/v1/traces"));
    }
    let spans = spans
        .build()
        .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
    let mut metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary);
    if let Some(base) = &endpoint {
        metrics = metrics.with_endpoint(format!("{base}/v1/metrics"));
    }
    let metrics = metrics
        .build()
        .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
    let tracers = bounded_tracers(spans, config, counters, resource.clone());
    let meters = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_periodic_exporter(metrics)
        .build();
    Ok((tracers, meters))
}

/// A tracer provider exporting through `exporter` behind the bounded queue `config`
/// describes (tests give an in-memory exporter).
pub(super) fn bounded_tracers(
    exporter: impl SpanExporter + 'static,
    config: &TelemetryConfig,
    counters: &Arc<Counters>,
    resource: Resource,
) -> SdkTracerProvider {
    let bound = config.max_queue.max(1);
    let pending = Arc::new(AtomicUsize::new(0));
    let batch = BatchSpanProcessor::builder(Counted {
        inner: exporter,
        pending: Arc::clone(&pending),
        counters: Arc::clone(counters),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(bound)
            .with_max_export_batch_size(bound.min(512))
            .with_scheduled_delay(Duration::from_millis(500))
            .build(),
    )
    .build();
    SdkTracerProvider::builder()
        .with_resource(resource)
        .with_id_generator(RecordedIds::default())
        .with_span_processor(Bounded {
            inner: batch,
            pending,
            bound,
            counters: Arc::clone(counters),
        })
        .build()
}

/// The exporters' HTTP client: TLS through ring and the system's trust store, as the model
/// providers connect; each export bounded by `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds,
/// default 10 s), so a collector that never answers holds only the export thread.
fn http_client() -> Result<reqwest::blocking::Client, TelemetryError> {
    let failed = |error: &dyn std::fmt::Display| TelemetryError::Exporter(error.to_string());
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| failed(&error))?
    .with_platform_verifier()
    .map_err(|error| failed(&error))?
    .with_no_client_auth();
    let timeout = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT")
        .ok()
        .and_then(|millis| millis.trim().parse().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    // Built on a thread of its own: reqwest's blocking client makes (and on a failure
    // drops) a runtime, which tokio refuses inside an async context such as the caller's.
    let build = move || {
        reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(timeout)
            .build()
    };
    std::thread::scope(|scope| scope.spawn(build).join())
        .map_err(|_| failed(&"the thread making the HTTP client panicked"))?
        .map_err(|error| failed(&error))
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), named `toolrail`
/// when neither names the service.
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("toolrail").build()
    }
}

/// The batch processor behind a bound on the spans queued or being sent.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    pending: Arc<AtomicUsize>,
    bound: usize,
    counters: Arc<Counters>,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.bound {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            if self.counters.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    bound = self.bound,
                    "the OTLP collector is not keeping up: spans past the queue's bound are dropped (counted; the total is reported at exit)"
                );
            }
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, giving back each batch's place in the bound once it is sent (or
/// failed).
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
    counters: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let sent = self.inner.export(batch).await;
        self.pending.fetch_sub(spans, Ordering::AcqRel);
        let spans = u64::try_from(spans).unwrap_or(u64::MAX);
        let outcome = if sent.is_ok() {
            &self.counters.sent
        } else {
            &self.counters.failed
        };
        outcome.fetch_add(spans, Ordering::Relaxed);
        sent
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
