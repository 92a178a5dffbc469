//! The other way round from the client: toolrail's tools served to any MCP client, each
//! `tools/call` a call of a toolrail session — recorded, judged by the rules and guards,
//! asked where a rule says ask, confined, logged — answered with the committed record.
//!
//! This crate speaks the protocol; the session is a [`ToolHost`] (the runtime's agent, or
//! anything that commits calls). Calls are handed to the host one at a time, in the order
//! they arrived (`arrivals.rs`): each is one batch of its own, so results commit in arrival
//! order, and a slow call holds the ones behind it (a cancelled one gives its place up).
//! When serving ends, every call still running is cancelled and waited for, so each has an
//! honest outcome in the log before the host goes.

mod approvals;
mod arrivals;
mod convert;
mod http;
mod parked;

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, InputRequest, InputRequiredResult,
        ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, RequestParamsMeta as _,
        ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolrail_session_log::{BoxFuture, ToolResultRecord, TraceRef};
use toolrail_tools_core::ToolSet;

pub use approvals::ElicitedApprovals;
use approvals::{Asking, Question};
use arrivals::{Arrivals, Stamping};
pub use http::{HttpServeError, serve_http};
use parked::{Flight, Parked, ParkedCalls};

/// How long a stopping server waits for its running calls to commit their outcomes (the
/// cancellation grace is 5 s by default).
const SETTLE_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// What [`McpServe`] serves: a session that lists its tools and commits calls.
///
/// Implementors run each call through their whole pipeline and return its committed
/// record — refusals included, as error records — or an error when the call could not be
/// run or recorded at all. A call whose `cancel` fires must still end with an honest
/// outcome (the record of an aborted call), never a made-up success.
pub trait ToolHost: Send + Sync + 'static {
    /// The tools to offer, as they are now.
    fn tools(&self) -> ToolSet;

    /// Runs one call to its committed result, reporting progress text to `progress`.
    fn call(
        &self,
        call: HostedCall,
        progress: mpsc::UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Arc<ToolResultRecord>, String>>;
}

/// One `tools/call`, as the host receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostedCall {
    /// Who called: the client's name and version from its `initialize`.
    pub client: String,
    /// An id for the log, from the request's id (`mcp-<id>`).
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Its arguments (`{}` when the client sent none).
    pub arguments: Value,
    /// The client's span, when its request carried a W3C trace context
    /// (`params._meta.traceparent`): the call's turn continues the client's trace.
    pub caller: Option<TraceRef>,
}

/// An MCP server over a [`ToolHost`]: `tools/list` from its tools, `tools/call` through
/// it, with progress notifications and cancellation.
///
/// ```no_run
/// # async fn demo(host: std::sync::Arc<dyn toolrail_mcp::serve::ToolHost>) -> Result<(), Box<dyn std::error::Error>> {
/// use toolrail_mcp::serve::McpServe;
/// let server = McpServe::new(host);
/// server.serve_stdio().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpServe {
    host: Arc<dyn ToolHost>,
    /// Calls take their turn here, in the order they arrived.
    arrivals: Arc<Arrivals>,
    approvals: Option<Arc<ElicitedApprovals>>,
    /// Calls whose question went back to their client (stateless revision).
    parked: ParkedCalls,
    /// Every call's task, waited for when serving ends.
    calls: TaskTracker,
}

impl std::fmt::Debug for McpServe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServe").finish_non_exhaustive()
    }
}

/// Why serving over stdio ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client's `initialize` failed or the connection broke before it.
    #[error("the MCP client did not complete its initialize: {0}")]
    Initialize(String),
    /// The connection ended abnormally.
    #[error("the MCP connection failed: {0}")]
    Connection(String),
}

impl McpServe {
    /// A server over `host`.
    pub fn new(host: Arc<dyn ToolHost>) -> Self {
        Self {
            host,
            arrivals: Arc::default(),
            approvals: None,
            parked: ParkedCalls::default(),
            calls: TaskTracker::new(),
        }
    }

    /// Asks approvals through the client (MCP elicitation) on whatever connection calls:
    /// `approvals` must be the service the host's session asks (see
    /// [`ElicitedApprovals`]).
    #[must_use]
    pub fn asking_through(mut self, approvals: Arc<ElicitedApprovals>) -> Self {
        self.approvals = Some(approvals);
        self
    }

    /// Serves one client on stdin and stdout until it closes them, then waits (bounded)
    /// for the calls still running to commit their outcomes.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        self.serve_stdio_until(CancellationToken::new()).await
    }

    /// As [`McpServe::serve_stdio`], also ending when `stop` fires (a SIGTERM from the
    /// client that started the server, say): the connection is closed, running calls are
    /// cancelled and commit their honest outcomes (bounded), as when the client leaves.
    ///
    /// ```no_run
    /// # async fn demo(server: toolrail_mcp::serve::McpServe) -> Result<(), Box<dyn std::error::Error>> {
    /// let stop = tokio_util::sync::CancellationToken::new();
    /// let on_term = stop.clone();
    /// tokio::spawn(async move {
    ///     let _ = tokio::signal::ctrl_c().await;
    ///     on_term.cancel();
    /// });
    /// server.serve_stdio_until(stop).await?;
    /// # Ok(()) }
    /// ```
    pub async fn serve_stdio_until(self, stop: CancellationToken) -> Result<(), ServeError> {
        let transport = Stamping::new(
            rmcp::transport::async_rw::AsyncRwTransport::new_server(
                tokio::io::stdin(),
                tokio::io::stdout(),
            ),
            Arc::clone(&self.arrivals),
        );
        let stopping = self.clone();
        let served = match rmcp::serve_server(self, transport).await {
            Ok(running) => {
                let closer = running.cancellation_token();
                let waiting = running.waiting();
                tokio::pin!(waiting);
                let ended = tokio::select! {
                    ended = &mut waiting => ended,
                    () = stop.cancelled() => {
                        closer.cancel();
                        waiting.await
                    }
                };
                ended
                    .map(|_| ())
                    .map_err(|error| ServeError::Connection(error.to_string()))
            }
            Err(error) => Err(ServeError::Initialize(error.to_string())),
        };
        stopping.settle().await;
        served
    }

    /// Ends the wait of every parked call and waits for every running call to commit.
    pub(crate) async fn settle(&self) {
        self.parked.cancel_all();
        self.calls.close();
        if tokio::time::timeout(SETTLE_FOR, self.calls.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "calls were still running {} s after serving ended; their outcomes are the session's recovery's to tell",
                SETTLE_FOR.as_secs()
            );
        }
    }

    async fn run_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(handle) = &request.request_state {
            return self.answer_parked(handle, &request, context).await;
        }
        let client = context
            .client_info()
            .map(|client| format!("MCP client {} {}", client.name, client.version))
            .unwrap_or_else(|| "an MCP client".to_owned());
        let call = HostedCall {
            client,
            id: format!("mcp-{}", crate::call::request_id_text(&context.id)),
            tool: request.name.to_string(),
            // The SDK moves a request's `_meta` into its context.
            caller: context
                .meta
                .get_traceparent()
                .or_else(|| request.traceparent())
                .and_then(TraceRef::from_traceparent),
            arguments: arguments_of(request.arguments),
        };
        // Waiting for its turn ends when the client cancels: nothing was recorded yet.
        let ticket = self.arrivals.claim(&context.id);
        tokio::select! {
            biased;
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the call was cancelled before it started", None));
            }
            () = self.arrivals.turn(&ticket) => {}
        }
        let (questions_to, questions) = mpsc::unbounded_channel();
        if let Some(approvals) = &self.approvals {
            let stateless = context
                .protocol_version()
                .is_some_and(|version| !version.has_initialize());
            // A form is what is sent; an empty `elicitation` capability means forms.
            let can_answer = context
                .client_capabilities()
                .and_then(|capabilities| capabilities.elicitation)
                .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none());
            approvals.asking(match (stateless, can_answer) {
                (true, true) => Asking::Returned(questions_to),
                (false, true) => Asking::Request(context.peer.clone()),
                // A client that cannot answer a form is asked nothing: no yes.
                (_, false) => Asking::Nobody,
            });
        }
        let (progress_to, progress) = mpsc::unbounded_channel::<String>();
        let cancel = CancellationToken::new();
        let ended = CancellationToken::new();
        let (call_id, tool, arguments) =
            (call.id.clone(), call.tool.clone(), call.arguments.clone());
        let running = self.host.call(call, progress_to, cancel.clone());
        let on_end = ended.clone();
        let flight = Flight {
            call_id,
            tool,
            arguments,
            task: self.calls.spawn(async move {
                let outcome = running.await;
                on_end.cancel();
                outcome
            }),
            ended,
            questions,
            progress,
            _cancel_on_drop: cancel.clone().drop_guard(),
            cancel,
            _turn: ticket,
        };
        self.drive(flight, &context).await
    }

    /// The retry of a call whose question went back to the client: its answer to the
    /// parked call, which then goes on.
    async fn answer_parked(
        &self,
        handle: &str,
        request: &CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(parked) = self.parked.take(handle) else {
            return Err(ErrorData::invalid_params(
                "no call waits for this requestState: it was answered already, or its question expired; call the tool again",
                None,
            ));
        };
        // The retry must be of the same call: an answer given for one call never lets
        // another run.
        if request.name != parked.flight.tool
            || arguments_of(request.arguments.clone()) != parked.flight.arguments
        {
            self.parked.put_back(handle, parked);
            return Err(ErrorData::invalid_params(
                "this requestState belongs to another call: retry with the tool and arguments of the call that asked",
                None,
            ));
        }
        let answered = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get(QUESTION_KEY))
            .and_then(|response| {
                serde_json::from_value::<rmcp::model::ElicitResult>(response.clone()).ok()
            });
        let answer = match answered {
            Some(answered) => approvals::answer_of(
                &answered.action,
                answered.content.as_ref(),
                parked.session_key.as_ref(),
            ),
            // A retry without a readable answer is no yes.
            None => toolrail_tools_core::ApprovalAnswer::Rejected {
                reason: Some("the MCP client's retry carried no answer to the approval".to_owned()),
            },
        };
        let _ = parked.answer.send(answer);
        self.drive(parked.flight, &context).await
    }

    /// Follows a call to its result: progress to the client, the client's cancellation to
    /// the call, and a question for the client (stateless revision) back as the
    /// `input_required` result, the call parked until the retry.
    async fn drive(
        &self,
        mut flight: Flight,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let token = context.meta.get_progress_token();
        let mut reported = 0_u32;
        let mut cancelled = false;
        loop {
            tokio::select! {
                biased;
                joined = &mut flight.task => {
                    return match joined {
                        Ok(Ok(record)) => Ok(convert::result_of(&record, &flight.call_id).into()),
                        Ok(Err(why)) => Err(ErrorData::internal_error(
                            format!("toolrail could not run or record the call: {why}"),
                            None,
                        )),
                        Err(error) => Err(ErrorData::internal_error(
                            format!("the call's task ended without an outcome: {error}"),
                            None,
                        )),
                    };
                }
                () = context.ct.cancelled(), if !cancelled => {
                    // The call still commits an honest outcome; its result is the answer.
                    cancelled = true;
                    flight.cancel.cancel();
                }
                Some(question) = flight.questions.recv() => {
                    let Question { form, session_key, answer } = question;
                    // A client that cancelled will not read the question; without
                    // randomness no handle can be made safely: neither is a yes.
                    let handle = match (cancelled, parked::fresh_handle()) {
                        (false, Some(handle)) => handle,
                        (true, _) => {
                            let _ = answer.send(toolrail_tools_core::ApprovalAnswer::Cancelled);
                            continue;
                        }
                        (false, None) => {
                            let _ = answer.send(toolrail_tools_core::ApprovalAnswer::Unavailable);
                            continue;
                        }
                    };
                    let mut asked = rmcp::model::InputRequests::new();
                    asked.insert(
                        QUESTION_KEY.to_owned(),
                        InputRequest::Elicitation(rmcp::model::ElicitRequest::new(form)),
                    );
                    self.parked.park(handle.clone(), Parked { flight, session_key, answer });
                    return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                        Some(asked),
                        Some(handle),
                    )));
                }
                Some(note) = flight.progress.recv() => {
                    if let Some(token) = &token {
                        reported += 1;
                        let note = ProgressNotificationParam::new(token.clone(), f64::from(reported))
                            .with_message(note);
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        }
    }
}

/// The key of the one question an `input_required` result carries.
const QUESTION_KEY: &str = "toolrail_approval";

/// A call's arguments as the host takes them: `{}` when the client sent none.
fn arguments_of(arguments: Option<rmcp::model::JsonObject>) -> Value {
    arguments.map_or_else(|| Value::Object(Default::default()), Value::Object)
}

impl ServerHandler for McpServe {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolrail", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toolrail's tools. Every call is recorded in a session log, judged by the \
                 workspace's rules and run confined; a refused call comes back as an error \
                 result saying why.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.host.tools();
        Ok(ListToolsResult::with_all_items(
            tools
                .offered()
                .map(|entry| convert::tool_of(entry.spec()))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.run_call(request, context).await
    }
}
