//! One `tools/call`, and the honest outcome of each way it can end (DESIGN §3, *honest
//! outcomes at the seams*):
//!
//! | what happened | outcome |
//! |---|---|
//! | the server answered | its result; `isError` → `TOOL_FAILED` with its words |
//! | it answered with a JSON-RPC error | `TOOL_FAILED`: it said the call failed |
//! | no answer and no progress for `callTimeoutMs` | `TOOL_TIMEOUT`, the request cancelled |
//! | the call was cancelled | cancelled on the server too; the pipeline says `ABORTED` |
//! | never wholly written (not connected, stdin closed) | `MCP_UNAVAILABLE`: it did not run |
//! | written, then the answer lost (the server ended, an answer too large or unreadable) | `TOOL_OUTCOME_UNKNOWN`; for a read-only tool, `TOOL_FAILED` (it changed nothing) |

use std::time::Duration;

use futures_util::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, NumberOrString, Request,
    RequestId, RequestParamsMeta as _, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{Value, json};
use toolrail_session_log::event::McpRequest;
use toolrail_session_log::{AppendUrgency, Timestamp, TraceRef};
use toolrail_tools_core::{ToolContext, ToolFailure, ToolSpec, tool_code};

use crate::server::Server;
use crate::wire::Book;

/// How long a call whose connection ended waits for the server's last words on stderr.
const LAST_WORDS: Duration = Duration::from_millis(500);

/// The call was not sent (or not wholly): it did not run.
const UNAVAILABLE: toolrail_tools_core::ToolCode = tool_code!("MCP_UNAVAILABLE");

/// Calls `tool` with `args` on `server`: progress goes to the call's progress sink (and
/// starts the wait for an answer again), cancellation of the call cancels the request (the
/// connection stays), and the server's call timeout bounds each wait.
pub(crate) async fn call(
    server: &Server,
    tool: &str,
    args: &Value,
    ctx: &ToolContext,
    spec: &ToolSpec,
) -> Result<Value, ToolFailure> {
    let not_sent = |why: String| {
        ToolFailure::with_code(
            UNAVAILABLE,
            format!(
                "the MCP server `{}` {why}; the call was not sent, so it did not run",
                server.name
            ),
        )
    };
    let (peer, book) = server
        .link
        .lock()
        .as_ref()
        .map(|link| (link.peer.clone(), std::sync::Arc::clone(&link.book)))
        .ok_or_else(|| not_sent("is not connected".to_owned()))?;
    let mut params = CallToolRequestParams::new(tool.to_owned());
    if let Some(arguments) = args.as_object() {
        params = params.with_arguments(arguments.clone());
    }
    // A traced call's request is a client span under its `execute_tool` span, and the
    // server is told of it (W3C trace context in `_meta`), so its spans join the trace.
    let span = ctx.trace().and_then(|call| {
        Some(TraceRef {
            trace_id: call.trace_id,
            span_id: fresh_span_id()?,
        })
    });
    if let Some(span) = span {
        params.set_traceparent(&span.to_string());
    }
    // The request's span starts as it is written, before the server can answer it.
    let sending = Timestamp::now();
    let handle = peer
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .map_err(|error| not_sent(format!("could not take the call ({error})")))?;
    let id = handle.id.clone();
    let sent = McpRequest {
        server: server.name.clone(),
        method: "tools/call".to_owned(),
        tool: tool.to_owned(),
        request_id: request_id_text(&id),
        protocol: peer
            .peer_info()
            .map(|info| info.protocol_version.to_string())
            .unwrap_or_default(),
        trace: span,
    };
    if let Err(error) = ctx.record_at(sent, sending, AppendUrgency::Buffered).await {
        // The request is out: the call goes on, and its outcome is what the log must hold.
        tracing::warn!(server = %server.name, %error, "the MCP request was sent but not recorded");
    }
    let _forget = Forget(&book, id.clone());
    let noted_before = book.noted();
    let mut progress = server
        .progress
        .subscribe(handle.progress_token.clone())
        .await;
    let cancel = |reason: &'static str| {
        let peer = peer.clone();
        let id = id.clone();
        async move {
            let param = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            // A server that stopped reading must not hold the call past its end.
            let _ =
                tokio::time::timeout(Duration::from_secs(1), peer.notify_cancelled(param)).await;
        }
    };
    let wait = server.config.call_timeout();
    let idle = tokio::time::sleep(wait);
    tokio::pin!(idle);
    let answer = handle.await_response();
    tokio::pin!(answer);
    let mut reports = 0u64;
    loop {
        tokio::select! {
            answer = &mut answer => {
                return Outcome { server, book: &book, id: &id, spec }.of(answer).await;
            }
            Some(update) = progress.next() => {
                reports += 1;
                ctx.progress(json!({
                    "progress": update.progress,
                    "total": update.total,
                    "message": update.message,
                }));
                idle.as_mut().reset(tokio::time::Instant::now() + wait);
            }
            () = &mut idle => {
                cancel("timed out").await;
                let heard = if reports == 0 {
                    String::new()
                } else {
                    format!(" since its last of {reports} progress reports")
                };
                let new = book.notes_since(noted_before);
                let noted = if new.is_empty() {
                    String::new()
                } else {
                    format!(" Meanwhile it sent: {}.", new.join("; "))
                };
                return Err(ToolFailure::timed_out(format!(
                    "the MCP server `{}` sent no answer{heard} within {} ms (`callTimeoutMs`); the request was cancelled. {}{noted}",
                    server.name,
                    server.config.call_timeout_ms,
                    may_have_acted(spec),
                )));
            }
            () = ctx.cancellation().cancelled() => {
                cancel("cancelled").await;
                return Err(ToolFailure::new("cancelled; the MCP request was cancelled on the server"));
            }
        }
    }
}

/// A request id as the server's log shows it: a number's digits, a string's text.
pub(crate) fn request_id_text(id: &RequestId) -> String {
    match id {
        NumberOrString::Number(number) => number.to_string(),
        NumberOrString::String(text) => text.to_string(),
    }
}

/// A random W3C span id, never all zeros; `None` when the system has no randomness to give
/// (the call then goes untraced rather than under a guessable id).
fn fresh_span_id() -> Option<[u8; 8]> {
    let mut id = [0_u8; 8];
    while id == [0; 8] {
        getrandom::fill(&mut id).ok()?;
    }
    Some(id)
}

/// What a call that may have run can have done, for the model.
fn may_have_acted(spec: &ToolSpec) -> &'static str {
    if spec.is_read_only() {
        "The tool is read-only: nothing changed; it is safe to call again."
    } else if spec.is_idempotent() {
        "It may have acted; the tool is idempotent, so it is safe to call again."
    } else {
        "It may have acted: check before calling it again."
    }
}

/// Forgets the request in the link's book when the call is over, however it ends.
struct Forget<'a>(&'a Book, RequestId);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(&self.1);
    }
}

/// How an answer (or its absence) becomes the call's outcome.
struct Outcome<'a> {
    server: &'a Server,
    book: &'a Book,
    id: &'a RequestId,
    spec: &'a ToolSpec,
}

impl Outcome<'_> {
    async fn of(&self, answer: Result<ServerResult, ServiceError>) -> Result<Value, ToolFailure> {
        let name = &self.server.name;
        match answer {
            Ok(ServerResult::CallToolResult(result)) => serde_json::to_value(result)
                .map_err(|error| self.lost(&format!("its answer could not be kept ({error})"))),
            Ok(other) => {
                let shown = serde_json::to_string(&other).unwrap_or_default();
                let shown = &shown[..shown.floor_char_boundary(200)];
                Err(self.lost(&format!(
                    "it answered with something that is not a tool result: {shown}"
                )))
            }
            Err(ServiceError::McpError(error)) => match self.book.take_lost(self.id) {
                Some(why) => Err(self.lost(&why)),
                None => Err(ToolFailure::new(format!(
                    "the MCP server `{name}` refused the call: {} (JSON-RPC error {})",
                    error.message, error.code.0
                ))),
            },
            Err(
                error @ (ServiceError::TransportClosed
                | ServiceError::TransportSend(_)
                | ServiceError::Cancelled { .. }
                | ServiceError::Timeout { .. }
                | ServiceError::UnexpectedResponse
                | ServiceError::SubscriptionLagged { .. }
                | ServiceError::InputRequiredRoundsExceeded { .. }),
            ) => {
                let said = self.server.stderr.quoted_after_end(LAST_WORDS).await;
                if !self.book.delivered(self.id) {
                    return Err(ToolFailure::with_code(
                        UNAVAILABLE,
                        format!(
                            "the call could not be sent to the MCP server `{name}` ({error}), so it did not run{said}"
                        ),
                    ));
                }
                Err(self.lost(&format!(
                    "the connection ended before it answered ({error}){said}"
                )))
            }
            Err(other) => Err(self.lost(&format!("the call failed in the MCP client: {other}"))),
        }
    }

    /// The answer to a call that reached the server was lost: `TOOL_OUTCOME_UNKNOWN`, or
    /// `TOOL_FAILED` for a read-only tool, which changed nothing either way.
    fn lost(&self, why: &str) -> ToolFailure {
        let message = format!(
            "the call was sent to the MCP server `{}`, but its answer was lost: {why}. {}",
            self.server.name,
            may_have_acted(self.spec)
        );
        if self.spec.is_read_only() {
            ToolFailure::new(message)
        } else {
            ToolFailure::outcome_unknown(message)
        }
    }
}
