//! The HTTP side: one streamed request per model request, tried again on 429, 5xx,
//! connection failures and broken-off streams, with the server's words (and its request id)
//! in every error. Every try is bounded by a deadline of its own and the whole request by
//! the step's (`deadline.rs`); cancellation is honoured at every wait.

use std::time::Duration;

use futures_util::StreamExt;
use rustls_platform_verifier::BuilderVerifierExt;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{
    DeltaSink, ModelClient, ModelDelta, ModelError, ModelFailure, ModelRequest, ModelResponse,
    NoDeltas,
};
use toolrail_session_log::BoxFuture;
use toolrail_session_log::error_chain;

use crate::anthropic::{self, AnthropicStream};
use crate::config::{ProviderConfig, Wire, parse_retry_after};
use crate::deadline::{Clock, Deadline, Progress, spoken};
use crate::draft::StreamError;
use crate::openai::{self, OpenAiStream};
use crate::sse::{SseEvent, SseParser};

/// Why a provider client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// TLS (the system's trust store, say) or the HTTP client could not be set up; the
    /// text says why.
    #[error("the HTTP client could not be built: {0}")]
    Http(String),
}

/// A model on a server, as the agent loop's [`ModelClient`].
#[derive(Clone, Debug)]
pub struct ProviderClient {
    config: ProviderConfig,
    http: reqwest::Client,
}

/// One failed try, and whether another may follow.
enum Failure {
    Retry {
        failure: ModelFailure,
        retry_after: Option<Duration>,
    },
    Fatal(ModelFailure),
}

/// How the wait for one try ended.
enum Ended {
    Answered(Result<ModelResponse, Failure>),
    Cancelled,
    OutOfTime,
}

/// Bytes of an error answer kept for its message.
const ERROR_BODY_KEPT: usize = 4 << 10;

/// Bytes of an answer, whole or streamed, read at most.
const WHOLE_BODY_KEPT: usize = 64 << 20;

impl ProviderClient {
    /// A client for `config`'s server. Nothing is sent and the key is not read until a
    /// request is made.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        // ring, not reqwest's default aws-lc (a C build with cmake); the same provider for
        // every connection, installed nowhere globally.
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| ProviderError::Http(error.to_string()))?
        // The system's trust store, as every other program on the machine uses it.
        .with_platform_verifier()
        .map_err(|error| ProviderError::Http(error.to_string()))?
        .with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            // A model API does not redirect; following one could carry the key (an
            // `x-api-key` header is not stripped on a change of host) somewhere else.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.idle_timeout)
            .build()
            .map_err(|error| ProviderError::Http(error.to_string()))?;
        Ok(Self { config, http })
    }

    /// Names the idle timeout when it is what ended a wait (reqwest's own words are "operation
    /// timed out").
    fn idle_note(&self, error: &reqwest::Error) -> String {
        if error.is_timeout() && !error.is_connect() {
            format!(
                " (nothing arrived for {}, the idle timeout)",
                spoken(self.config.idle_timeout)
            )
        } else {
            String::new()
        }
    }

    /// The configuration the client was made with.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// The request body this client sends for `request`.
    pub fn body(&self, request: &ModelRequest) -> Value {
        match self.config.wire {
            Wire::OpenAi => openai::request_body(request, &self.config),
            Wire::Anthropic => anthropic::request_body(request, &self.config),
        }
    }

    async fn complete_now(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
        deltas: &dyn DeltaSink,
    ) -> Result<ModelResponse, ModelError> {
        let key = self.config.key().map_err(ModelError::failed)?;
        let body = self.body(request).to_string();
        let attempts = self.config.retry.attempts.max(1);
        let clock = Clock::start(self.config.request_timeout, self.config.step_timeout);
        let mut last = ModelFailure::new("no try was made");
        for attempt in 1..=attempts {
            let mut progress = Progress::new();
            let (ends, deadline) = clock.try_ends();
            // Every wait of a try — sending, the head, an error's body, a whole answer, the
            // stream — is inside this one future, so one deadline bounds them all; and
            // cancellation is looked at first whenever anything wakes.
            let ended = tokio::select! {
                biased;
                () = cancel.cancelled() => Ended::Cancelled,
                outcome = self.attempt(&body, key.as_deref(), deltas, &mut progress) => {
                    Ended::Answered(outcome)
                }
                () = tokio::time::sleep_until(ends) => Ended::OutOfTime,
            };
            let outcome = match ended {
                Ended::Answered(outcome) => outcome,
                Ended::Cancelled => return Err(ModelError::Cancelled),
                Ended::OutOfTime => {
                    Err(self.out_of_time(deadline, &clock, &progress, attempt, &last))
                }
            };
            match outcome {
                Ok(response) => return Ok(response),
                Err(Failure::Fatal(failure)) => return Err(ModelError::Failed(failure)),
                Err(Failure::Retry {
                    failure,
                    retry_after,
                }) => {
                    last = failure;
                    if attempt == attempts {
                        break;
                    }
                    let Some(wait) = self.config.retry.delay(attempt, retry_after) else {
                        // The server asked for a longer wait than we keep a request open for.
                        last.message = format!(
                            "{} (the server asked to wait {:.0} s before trying again, longer than the {:.0} s this client waits; try later)",
                            last.message,
                            retry_after.unwrap_or_default().as_secs_f64(),
                            self.config.retry.max_retry_after.as_secs_f64()
                        );
                        last.retryable = true;
                        return Err(ModelError::Failed(last));
                    };
                    if wait >= clock.left() {
                        // The next try could not begin before the step's deadline: say so
                        // now rather than wait for it.
                        last.message = format!(
                            "{} (gave up after {}: the step deadline of {} leaves {}, less than the {} wait before another try)",
                            last.message,
                            tries(attempt),
                            spoken(clock.of(Deadline::Step)),
                            spoken(clock.left()),
                            spoken(wait)
                        );
                        last.retryable = true;
                        return Err(ModelError::Failed(last));
                    }
                    if progress.streamed() {
                        // What was shown of the broken answer is void: the next try starts
                        // it anew.
                        deltas.delta(ModelDelta::Restarted {
                            attempt: attempt + 1,
                            why: last.message.clone(),
                        });
                    }
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return Err(ModelError::Cancelled),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        // Only a failure that may pass is tried again: the one given up on may pass later.
        last.message = format!("{} (gave up after {})", last.message, tries(attempts));
        last.retryable = true;
        Err(ModelError::Failed(last))
    }

    /// The failure of a try that `deadline` ended. The step's ends the request; the
    /// request's is a broken stream when the answer had stalled (another try may find a
    /// server that answers) and final when it was still coming (another would be cut too).
    fn out_of_time(
        &self,
        deadline: Deadline,
        clock: &Clock,
        progress: &Progress,
        attempt: u32,
        last: &ModelFailure,
    ) -> Failure {
        let endpoint = self.config.endpoint();
        let length = spoken(clock.of(deadline));
        let id_note = progress
            .request_id
            .as_deref()
            .map(|id| format!(" (request id {id})"))
            .unwrap_or_default();
        let mut failure = ModelFailure::new(String::new());
        failure.status = progress.status;
        failure.request_id.clone_from(&progress.request_id);
        let stalled = progress.stalled(self.config.idle_timeout);
        match deadline {
            Deadline::Step => {
                let before = if attempt > 1 {
                    format!("; the try before failed: {}", last.message)
                } else {
                    String::new()
                };
                failure.message = format!(
                    "{endpoint}: the step deadline of {length} passed during try {attempt}, before the answer was whole: {}{id_note}{before}. The server may answer another time; a longer step timeout gives it more time",
                    progress.said()
                );
                // A server that was slow, limited or stalled this time may not be next time.
                failure.retryable = true;
                Failure::Fatal(failure)
            }
            Deadline::Request if stalled => {
                failure.message = format!(
                    "{endpoint}: the request deadline of {length} passed with the answer stalled (keepalives and other bytes do not extend it): {}{id_note}",
                    progress.said()
                );
                Failure::Retry {
                    failure,
                    retry_after: None,
                }
            }
            Deadline::Request => {
                failure.message = format!(
                    "{endpoint}: the request deadline of {length} passed before the answer was whole: {}{id_note}. Not tried again: the answer had not stalled (less than the idle timeout of {} since its last part, or since sending), so another try would likely be cut the same way; if answers take this long, raise the request timeout",
                    progress.said(),
                    spoken(self.config.idle_timeout)
                );
                Failure::Fatal(failure)
            }
        }
    }

    async fn attempt(
        &self,
        body: &str,
        key: Option<&str>,
        deltas: &dyn DeltaSink,
        progress: &mut Progress,
    ) -> Result<ModelResponse, Failure> {
        let endpoint = self.config.endpoint();
        let mut post = self
            .http
            .post(&endpoint)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.to_owned());
        post = match (self.config.wire, key) {
            (Wire::OpenAi, Some(key)) => post.bearer_auth(key),
            (Wire::Anthropic, Some(key)) => post.header("x-api-key", key),
            (Wire::OpenAi | Wire::Anthropic, None) => post,
        };
        if self.config.wire == Wire::Anthropic {
            post = post.header("anthropic-version", anthropic::VERSION);
        }
        let response = post.send().await.map_err(|error| {
            let failure = ModelFailure::new(format!(
                "{endpoint} could not be reached: {}{}",
                error_chain(&error),
                self.idle_note(&error)
            ));
            if error.is_builder() {
                // The request itself is wrong (a key with a line break, a bad URL).
                Failure::Fatal(failure)
            } else {
                Failure::Retry {
                    failure,
                    retry_after: None,
                }
            }
        })?;
        let status = response.status();
        let request_id = ["x-request-id", "request-id"]
            .iter()
            .find_map(|name| response.headers().get(*name)?.to_str().ok())
            .map(str::to_owned);
        progress.status = Some(status.as_u16());
        progress.request_id.clone_from(&request_id);
        let id_note = request_id
            .as_deref()
            .map(|id| format!(" (request id {id})"))
            .unwrap_or_default();
        // Every failure of this try carries the status and the server's request id.
        let failed = |message: String| {
            let mut failure = ModelFailure::new(message).with_status(status.as_u16());
            failure.request_id.clone_from(&request_id);
            failure
        };
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| parse_retry_after(value, std::time::SystemTime::now()));
            let text = read_some(response, ERROR_BODY_KEPT, progress).await;
            let why = failed(format!(
                "{endpoint} answered {status}: {}{id_note}",
                server_message(&text)
            ));
            if status.is_redirection() {
                return Err(Failure::Fatal(failed(format!(
                    "{endpoint} answered {status}, a redirect, which is not followed (the key must not travel to another address); give the final URL as the base URL{id_note}"
                ))));
            }
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                Failure::Retry {
                    failure: why,
                    retry_after,
                }
            } else {
                Failure::Fatal(why)
            });
        }
        let stream_failed = |error: StreamError| match error {
            StreamError::Ended | StreamError::Transient(_) => Failure::Retry {
                failure: failed(format!("{endpoint}: {error}{id_note}")),
                retry_after: None,
            },
            StreamError::Malformed(_) | StreamError::Server(_) => {
                Failure::Fatal(failed(format!("{endpoint}: {error}{id_note}")))
            }
        };
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .map(|value| value.trim().to_ascii_lowercase());
        let whole = content_type
            .as_deref()
            .is_some_and(|value| value.starts_with("application/json"));
        // An answer that is neither a stream nor JSON (a proxy's or a login page's HTML) is
        // not the API: trying again would get the same page.
        if let Some(other) = content_type
            .as_deref()
            .filter(|value| !whole && !value.starts_with("text/event-stream") && !value.is_empty())
        {
            return Err(Failure::Fatal(failed(format!(
                "{endpoint} answered {status} with content type `{other}`, neither an event stream nor JSON: is the base URL the API's?{id_note}"
            ))));
        }
        if whole {
            // A server that answers a streamed request with the whole message at once.
            let text = read_some(response, WHOLE_BODY_KEPT, progress).await;
            let body: Value = serde_json::from_str(&text).map_err(|error| {
                Failure::Fatal(failed(format!(
                    "{endpoint} answered with JSON that could not be read ({error}){id_note}"
                )))
            })?;
            let response = match self.config.wire {
                Wire::OpenAi => openai::whole_response(&body),
                Wire::Anthropic => anthropic::whole_response(&body),
            }
            .map_err(stream_failed)?;
            toolrail_agent_loop::deltas_of(&response.message, deltas);
            progress.last_part = Some(Instant::now());
            return Ok(response);
        }
        let mut assembler = match self.config.wire {
            Wire::OpenAi => Assembler::OpenAi(OpenAiStream::new()),
            Wire::Anthropic => Assembler::Anthropic(AnthropicStream::new()),
        };
        let mut parser = SseParser::default();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut stream = response.bytes_stream();
        loop {
            match stream.next().await {
                Some(Ok(bytes)) => {
                    progress.received = progress.received.saturating_add(bytes.len());
                    if progress.received > WHOLE_BODY_KEPT {
                        return Err(Failure::Fatal(failed(format!(
                            "{endpoint}: the answer grew past {WHOLE_BODY_KEPT} bytes and was cut off{id_note}"
                        ))));
                    }
                    parser.feed(&bytes, &mut events).map_err(|error| {
                        Failure::Fatal(failed(format!("{endpoint}: {error}{id_note}")))
                    })?;
                    for event in events.drain(..) {
                        let taken = assembler.event(&event);
                        for delta in assembler.take_deltas() {
                            progress.last_part = Some(Instant::now());
                            deltas.delta(delta);
                        }
                        taken.map_err(stream_failed)?;
                    }
                }
                Some(Err(error)) => {
                    return Err(Failure::Retry {
                        failure: failed(format!(
                            "{endpoint}: the answer broke off: {}{}{id_note}",
                            error_chain(&error),
                            self.idle_note(&error)
                        )),
                        retry_after: None,
                    });
                }
                None => return assembler.finish().map_err(stream_failed),
            }
        }
    }
}

enum Assembler {
    OpenAi(OpenAiStream),
    Anthropic(AnthropicStream),
}

impl Assembler {
    fn event(&mut self, event: &SseEvent) -> Result<(), StreamError> {
        match self {
            Self::OpenAi(stream) => stream.event(event),
            Self::Anthropic(stream) => stream.event(event),
        }
    }

    fn take_deltas(&mut self) -> Vec<ModelDelta> {
        match self {
            Self::OpenAi(stream) => stream.take_deltas(),
            Self::Anthropic(stream) => stream.take_deltas(),
        }
    }

    fn finish(self) -> Result<ModelResponse, StreamError> {
        match self {
            Self::OpenAi(stream) => stream.finish(),
            Self::Anthropic(stream) => stream.finish(),
        }
    }
}

impl ModelClient for ProviderClient {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.complete_now(request, cancel, &NoDeltas))
    }

    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
        deltas: &'a dyn DeltaSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.complete_now(request, cancel, deltas))
    }
}

/// `1 try`, `3 tries`.
fn tries(count: u32) -> String {
    match count {
        1 => "1 try".to_owned(),
        count => format!("{count} tries"),
    }
}

/// Up to `limit` bytes of an answer's body, as text; what is read counts in `progress`.
async fn read_some(response: reqwest::Response, limit: usize, progress: &mut Progress) -> String {
    let mut kept = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(bytes)) = stream.next().await {
        progress.received = progress.received.saturating_add(bytes.len());
        kept.extend_from_slice(&bytes);
        if kept.len() >= limit {
            kept.truncate(limit);
            break;
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// What an error answer says: the `message` of either format's error object, or the text.
fn server_message(text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let message = parsed.as_ref().and_then(|body| {
        body.pointer("/error/message")
            .or_else(|| body.get("message"))
            .or_else(|| body.get("detail"))
            .and_then(Value::as_str)
    });
    match message {
        Some(message) => message.to_owned(),
        None if text.trim().is_empty() => "(no message)".to_owned(),
        None => text.trim().to_owned(),
    }
}
