//! `Agent`: a session put together whole — tools, permissions (hook, deny guard, workspace
//! guard, session approvals), sandbox, store, model — that answers prompts, streams what
//! happens, can be cancelled and steered, and resumes after a crash in one call.
//!
//! A turn runs on a task of its own: a caller that stops waiting (drops the future or the
//! stream) cancels the turn, and the task still gives every call an honest outcome.

mod assemble;
#[cfg(feature = "otlp")]
pub(crate) use assemble::{chat_settings, tool_registry};
mod builder;
mod client_call;
mod events;
mod shell_input;
mod stream;

use std::future::Future as _;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use toolrail_agent_loop::{AgentLoop, Live, LoopError, Steering};
use toolrail_session_log::{
    ContentBlock, SessionId, ToolResultRecord,
    event::{AssistantMessage, TurnEndKind},
};
use toolrail_tools_core::{CancellationToken, Registry};

pub(crate) use assemble::{Source, probe_for, repair};
pub use builder::{AgentBuilder, BuildError};
pub use client_call::ClientCall;
pub use events::AgentEvent;
pub use stream::AgentStream;

use crate::recovery::Recovery;
use crate::store::Store;
use events::{Kept, Tap};

/// An agent session.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use toolrail_runtime::{Agent, SessionConfig};
/// let config = SessionConfig::from_toml(r#"
///     [model]
///     provider = "openai"
///     base_url = "http://127.0.0.1:8000/v1"
///     model = "qwen3"
/// "#)?;
/// let agent = Agent::builder().config(config).build().await?;
/// let answer = agent.prompt("What does src/main.rs do?").await?;
/// println!("{} ({:?})", answer.text, answer.end);
/// # Ok(()) }
/// ```
pub struct Agent {
    shared: Arc<Shared>,
}

/// What the agent's handle and its running turn share.
struct Shared {
    session: SessionId,
    store: Store,
    /// Held by the running turn; a second prompt meanwhile is refused.
    turns: Arc<tokio::sync::Mutex<AgentLoop>>,
    tap: Arc<Tap>,
    live: Live,
    /// The running turn's token (a fresh one per turn).
    cancel: Mutex<CancellationToken>,
    steering: Steering,
    registry: Registry,
    /// Whatever must live as long as the session (a lease held for it).
    _keep: Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
    /// How the session's helpers are stopped gracefully ([`Agent::shutdown`]); each holds
    /// its helper, which lives as long as the session (its MCP servers and their processes).
    stops: Mutex<Vec<Stop>>,
}

/// Stops one of the session's helpers gracefully (its MCP servers), and holds it.
pub(crate) type Stop = Box<dyn Fn() -> toolrail_session_log::BoxFuture<'static, ()> + Send + Sync>;

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("session", &self.shared.session)
            .field("store", &self.shared.store)
            .finish()
    }
}

/// What a turn came to.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The text of the turn's last assistant message (empty when it had none).
    pub text: String,
    /// Every assistant message of the turn, in order.
    pub messages: Vec<AssistantMessage>,
    /// Every committed result of the turn, in order: the same records the log holds.
    pub results: Vec<Arc<ToolResultRecord>>,
    /// What the server said about token usage, per model request.
    pub usage: Vec<Value>,
    /// How the turn ended.
    pub end: TurnEndKind,
}

/// Why a prompt did not come to an answer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The model failed, the log refused a write, or the scheduler failed inside; the turn
    /// was ended in the log with what happened, and recovery classifies any call left open.
    #[error("the turn failed: {0}")]
    Turn(#[from] LoopError),
    /// A turn is running already: wait for it, steer it, or cancel it.
    #[error(
        "a turn is already running in this session; wait for it to end, steer it with `steer`, or `cancel` it"
    )]
    Busy,
    /// The turn's task ended without an outcome (it panicked, or the runtime is shutting
    /// down); the log keeps what happened, and resuming the session recovers it.
    #[error("the turn's task ended without an outcome: {0}")]
    Lost(String),
}

/// Cancels the turn running now (and only it); clone it into another task.
#[derive(Clone, Debug)]
pub struct Canceller {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("session", &self.session)
            .finish()
    }
}

impl Canceller {
    /// See [`Agent::cancel`].
    pub fn cancel(&self) {
        self.shared.cancel.lock().cancel();
    }
}

/// A session resumed: the agent, and what recovery repaired.
#[derive(Debug)]
pub struct Resumed {
    /// The reopened session; its next prompt continues the conversation.
    pub agent: Agent,
    /// What recovery did, for the person: its `Display` names each call's outcome.
    pub recovery: Recovery,
}

impl Agent {
    /// Puts a session together: see [`AgentBuilder`].
    pub fn builder() -> AgentBuilder {
        AgentBuilder::new()
    }

    /// An agent as `config` describes it, with nothing added in code.
    pub async fn from_config(config: crate::SessionConfig) -> Result<Self, BuildError> {
        Self::builder().config(config).build().await
    }

    /// Reopens session `id` of `store` as it was configured when it started (its
    /// configuration is recorded in the log), recovers it, and returns an agent whose next
    /// prompt continues the conversation. Tools, models and services given in code are not
    /// recorded: give them again with [`AgentBuilder::resume`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use toolrail_runtime::{Agent, Store};
    /// let store = Store::jsonl(".toolrail/sessions")?;
    /// let resumed = Agent::resume(&store, &"s1".into()).await?;
    /// println!("{}", resumed.recovery);
    /// let answer = resumed.agent.prompt("Go on where you stopped.").await?;
    /// # Ok(()) }
    /// ```
    pub async fn resume(store: &Store, id: &SessionId) -> Result<Resumed, BuildError> {
        let config = builder::recorded_config(store, id)?;
        Self::builder().config(config).resume(store, id).await
    }

    /// Keeps `thing` for as long as the session lives (a lease held for it).
    #[cfg(feature = "postgres")]
    pub(crate) fn keep(&self, thing: Box<dyn std::any::Any + Send + Sync>) {
        self.shared._keep.lock().push(thing);
    }

    /// Stops the session's MCP servers the way MCP asks of a stdio client — each one's
    /// stdin closed, 2 s to end by itself, SIGTERM, 1 s, then SIGKILL — so a server can
    /// finish what it keeps (its own log, its telemetry). Call it once the session's last
    /// turn is over; an agent dropped without it kills its servers at once. Their tools
    /// leave the registry.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = toolrail_runtime::Agent::builder().workspace(["."]).build().await?;
    /// agent.prompt("Summarise the open issues.").await?;
    /// agent.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) {
        let stopping: Vec<_> = self.shared.stops.lock().iter().map(|stop| stop()).collect();
        futures_util::future::join_all(stopping).await;
    }

    /// The session's id in its store.
    pub fn session_id(&self) -> &SessionId {
        &self.shared.session
    }

    /// The store the session is kept in.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The session's tools as they are now (MCP tools join and leave; found deferred tools
    /// join from the next request).
    pub fn tools(&self) -> &Registry {
        &self.shared.registry
    }

    /// Cancels the running turn: nothing new starts, running calls are stopped, every call
    /// gets an honest outcome, and the turn ends `aborted`. Nothing happens when no turn
    /// runs.
    pub fn cancel(&self) {
        self.shared.cancel.lock().cancel();
    }

    /// A handle that cancels the running turn from elsewhere.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Sends the user's words into the running turn: they join the conversation after the
    /// current batch, before the next model request. `false` if the session is gone.
    pub fn steer(&self, text: impl Into<String>) -> bool {
        self.shared
            .steering
            .send(vec![ContentBlock::text(text.into())])
    }

    /// Runs one user turn to its end.
    pub async fn prompt(&self, text: impl Into<String>) -> Result<Answer, AgentError> {
        self.prompt_blocks(vec![ContentBlock::text(text.into())])
            .await
    }

    /// Runs one user turn of content blocks (text, images) to its end.
    pub async fn prompt_blocks(&self, user: Vec<ContentBlock>) -> Result<Answer, AgentError> {
        let turn = self.start(user, None, None)?;
        turn.outcome().await
    }

    /// Runs one turn whose cancellation follows `parent` (the scenario runner's timers and
    /// a fleet worker's lost lease).
    pub(crate) async fn run_turn(
        &self,
        user: Vec<ContentBlock>,
        parent: &CancellationToken,
    ) -> Result<Answer, AgentError> {
        let turn = self.start(user, None, Some(parent))?;
        turn.outcome().await
    }

    /// Runs one user turn, showing what happens as it happens; the last event is
    /// [`AgentEvent::TurnEnded`] with the answer.
    ///
    /// ```no_run
    /// # async fn demo(agent: toolrail_runtime::Agent) -> Result<(), Box<dyn std::error::Error>> {
    /// use toolrail_runtime::AgentEvent;
    /// let mut events = agent.stream("Fix the failing test.");
    /// while let Some(event) = events.next().await {
    ///     match event? {
    ///         AgentEvent::TextDelta(text) => print!("{text}"),
    ///         AgentEvent::CallCommitted { name, record, .. } => {
    ///             println!("\n[{name}: {}]", if record.is_error() { "failed" } else { "ok" });
    ///         }
    ///         AgentEvent::TurnEnded(answer) => println!("\n({:?})", answer.end),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream(&self, text: impl Into<String>) -> AgentStream {
        self.stream_turn(Turn::Model(vec![ContentBlock::text(text.into())]))
    }

    /// Runs one tool call a client sent directly (an MCP client, an editor) as a turn of
    /// its own, showing what happens as it happens: the same pipeline, rules, approvals,
    /// sandbox and log as a model's call, and no model request. The last event is
    /// [`AgentEvent::TurnEnded`], whose answer's `results` hold the call's one committed
    /// result. Like a prompt, it is refused with [`AgentError::Busy`] while a turn runs,
    /// and [`Agent::cancel`] (or dropping the stream) ends it with an honest outcome.
    ///
    /// ```no_run
    /// # async fn demo(agent: toolrail_runtime::Agent) -> Result<(), Box<dyn std::error::Error>> {
    /// use toolrail_runtime::{AgentEvent, ClientCall};
    /// let call = ClientCall::new("my-editor", "grep", &serde_json::json!({"pattern": "TODO"}));
    /// let mut events = agent.stream_call(call);
    /// while let Some(event) = events.next().await {
    ///     if let AgentEvent::TurnEnded(answer) = event? {
    ///         println!("{}", answer.results[0].text());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream_call(&self, call: ClientCall) -> AgentStream {
        self.stream_turn(Turn::Client(call))
    }

    /// Starts `turn` with its events sent to the returned stream.
    fn stream_turn(&self, turn: Turn) -> AgentStream {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        match self.start_turn(turn, Some(sender), None) {
            Ok(turn) => AgentStream::running(turn, receiver),
            Err(error) => AgentStream::refused(error),
        }
    }

    /// Starts a turn on a task of its own.
    fn start(
        &self,
        user: Vec<ContentBlock>,
        events: Option<tokio::sync::mpsc::UnboundedSender<AgentEvent>>,
        parent: Option<&CancellationToken>,
    ) -> Result<RunningTurn, AgentError> {
        self.start_turn(Turn::Model(user), events, parent)
    }

    /// Starts a turn of either kind on a task of its own.
    fn start_turn(
        &self,
        turn: Turn,
        events: Option<tokio::sync::mpsc::UnboundedSender<AgentEvent>>,
        parent: Option<&CancellationToken>,
    ) -> Result<RunningTurn, AgentError> {
        // Owned: the turn holds the loop for as long as its task runs, which may outlive
        // the caller's borrow of the agent.
        let mut turns = Arc::clone(&self.shared.turns)
            .try_lock_owned()
            .map_err(|_| AgentError::Busy)?;
        let cancel = parent.map_or_else(CancellationToken::new, CancellationToken::child_token);
        *self.shared.cancel.lock() = cancel.clone();
        let shared = Arc::clone(&self.shared);
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            shared.tap.begin(events);
            let live = Some(Arc::clone(&shared.live));
            let ended = match turn {
                Turn::Model(user) => turns.run_turn(user, token, live).await,
                Turn::Client(call) => {
                    turns
                        .run_client_turn(call.user(), call.message(), call.caller(), token, live)
                        .await
                }
            };
            let kept = shared.tap.end();
            drop(turns);
            ended.map(|end| answer_of(kept, end))
        });
        Ok(RunningTurn { task, cancel })
    }
}

/// What a turn starts from: the user's words for the model, or a client's call.
enum Turn {
    Model(Vec<ContentBlock>),
    Client(ClientCall),
}

/// A turn running on its task; dropping it before the end cancels the turn.
pub(crate) struct RunningTurn {
    task: tokio::task::JoinHandle<Result<Answer, LoopError>>,
    cancel: CancellationToken,
}

impl RunningTurn {
    pub(crate) async fn outcome(mut self) -> Result<Answer, AgentError> {
        std::future::poll_fn(|cx| self.poll_outcome(cx)).await
    }

    pub(crate) fn poll_outcome(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Answer, AgentError>> {
        std::pin::Pin::new(&mut self.task).poll(cx).map(|joined| {
            // Ended: nothing to cancel any more.
            self.cancel = CancellationToken::new();
            match joined {
                Ok(outcome) => outcome.map_err(AgentError::Turn),
                Err(error) => Err(AgentError::Lost(error.to_string())),
            }
        })
    }
}

impl Drop for RunningTurn {
    fn drop(&mut self) {
        // The caller stopped waiting: the turn is cancelled, and its task still commits an
        // honest outcome for every call (the session stays busy until it has).
        self.cancel.cancel();
    }
}

/// The answer, from what the turn appended.
fn answer_of(kept: Kept, end: TurnEndKind) -> Answer {
    let text = kept
        .messages
        .last()
        .map(AssistantMessage::text)
        .unwrap_or_default();
    Answer {
        text,
        messages: kept.messages,
        results: kept.results,
        usage: kept.usage,
        end,
    }
}
