//! The HTTP side: one streamed request per model request, tried again on 429, 5xx,
//! connection failures and broken-off streams, with the server's words (and its request id)
//! in every error. Cancellation is honoured at every wait.

use std::time::Duration;

use futures_util::StreamExt;
use rustls_platform_verifier::BuilderVerifierExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{
    DeltaSink, ModelClient, ModelDelta, ModelError, ModelFailure, ModelRequest, ModelResponse,
    NoDeltas,
};
use toolrail_session_log::BoxFuture;
use toolrail_session_log::error_chain;

use crate::anthropic::{self, AnthropicStream};
use crate::config::{ProviderConfig, Wire, parse_retry_after};
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
    Cancelled,
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
        let mut last = ModelFailure::new("no try was made");
        for attempt in 1..=attempts {
            let mut streamed = false;
            let outcome = self
                .attempt(&body, key.as_deref(), cancel, deltas, &mut streamed)
                .await;
            match outcome {
                Ok(response) => return Ok(response),
                Err(Failure::Cancelled) => return Err(ModelError::Cancelled),
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
                    if streamed {
                        // What was shown of the broken answer is void: the next try starts
                        // it anew.
                        deltas.delta(ModelDelta::Restarted {
                            attempt: attempt + 1,
                            why: last.message.clone(),
                        });
                    }
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = cancel.cancelled() => return Err(ModelError::Cancelled),
                    }
                }
            }
        }
        // Only a failure that may pass is tried again: the one given up on may pass later.
        last.message = format!("{} (gave up after {attempts} tries)", last.message);
        last.retryable = true;
        Err(ModelError::Failed(last))
    }

    async fn attempt(
        &self,
        body: &str,
        key: Option<&str>,
        cancel: &CancellationToken,
        deltas: &dyn DeltaSink,
        streamed: &mut bool,
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
        let response = tokio::select! {
            response = post.send() => response,
            () = cancel.cancelled() => return Err(Failure::Cancelled),
        };
        let response = response.map_err(|error| {
            let failure = ModelFailure::new(format!(
                "{endpoint} could not be reached: {}",
                error_chain(&error)
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
            let text = tokio::select! {
                text = read_some(response, ERROR_BODY_KEPT) => text,
                () = cancel.cancelled() => return Err(Failure::Cancelled),
            };
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
            let text = tokio::select! {
                text = read_some(response, WHOLE_BODY_KEPT) => text,
                () = cancel.cancelled() => return Err(Failure::Cancelled),
            };
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
            *streamed = true;
            return Ok(response);
        }
        let mut assembler = match self.config.wire {
            Wire::OpenAi => Assembler::OpenAi(OpenAiStream::new()),
            Wire::Anthropic => Assembler::Anthropic(AnthropicStream::new()),
        };
        let mut parser = SseParser::default();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut stream = response.bytes_stream();
        let mut received = 0usize;
        loop {
            let chunk = tokio::select! {
                chunk = stream.next() => chunk,
                () = cancel.cancelled() => return Err(Failure::Cancelled),
            };
            match chunk {
                Some(Ok(bytes)) => {
                    received = received.saturating_add(bytes.len());
                    if received > WHOLE_BODY_KEPT {
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
                            *streamed = true;
                            deltas.delta(delta);
                        }
                        taken.map_err(stream_failed)?;
                    }
                }
                Some(Err(error)) => {
                    return Err(Failure::Retry {
                        failure: failed(format!(
                            "{endpoint}: the answer broke off: {}{id_note}",
                            error_chain(&error)
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

/// Up to `limit` bytes of an answer's body, as text.
async fn read_some(response: reqwest::Response, limit: usize) -> String {
    let mut kept = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(bytes)) = stream.next().await {
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
