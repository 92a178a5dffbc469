//! `AgentBuilder`: a configuration, what the embedder adds in code, and where the session
//! lives; `build` starts a new session, `resume` continues one.

use std::path::PathBuf;
use std::sync::Arc;

use toolrail_agent_loop::{Live, ModelClient};
use toolrail_interaction::QuestionService;
use toolrail_session_log::{EventData, SessionId};
use toolrail_tools_core::{
    ApprovalService, CancellationToken, ExecuteLayer, Guard, PostExecuteHook, PreExecuteHook,
    ResultObserver, Tool,
};

use super::assemble::{Additions, Source, assemble};
use super::{Agent, Resumed};
use crate::config::{ConfigError, ModelConfig, PresetName, RuleEntry, SessionConfig};
use crate::store::{Store, StoreOpenError};

/// Why an agent could not be built or resumed. Nothing has run; for a new session nothing
/// was written.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The configuration cannot be used; the error names the field and the fix.
    #[error("the configuration cannot be used: {0}")]
    Config(#[from] ConfigError),
    /// The store could not be opened, or it refused the session (not there, or held by
    /// another process).
    #[error(transparent)]
    Store(#[from] StoreOpenError),
    /// No model: neither `[model]` in the configuration nor a client given in code.
    #[error(
        "no model: add a `[model]` section (provider, model) to the configuration, or give the builder a client with `.model_client(...)`"
    )]
    NoModel,
    /// The model client could not be made (its TLS setup failed).
    #[error("the model client could not be made: {0}")]
    Model(String),
    /// The tools break a registry rule (a name given twice, a reserved name).
    #[error("the tools could not be registered: {0}")]
    Registry(String),
    /// The session could not be started or recovered.
    #[error("the session could not be started or recovered: {0}")]
    Session(String),
    /// Recovery could not write its repairs to the session's log: the store failed, or
    /// the session's lease was taken over (the log's error says which). Nothing after the
    /// repairs was written; opening the session again recovers it again.
    #[error("recovery could not write its repairs: {0}; nothing after them was written")]
    Recovery(#[source] toolrail_session_log::SinkError),
    /// The configuration asks for a part this build leaves out.
    #[error("{what} needs the `{feature}` feature of toolrail, which this build does not have")]
    NotBuilt {
        /// The part of the configuration that asks for it (`` `[mcp_servers]` ``).
        what: &'static str,
        /// The cargo feature that builds it in (`mcp`, `code-js`).
        feature: &'static str,
    },
}

/// Builds an [`Agent`]: a configuration (or its defaults), tools and stages of your own,
/// and optionally a model client, an approval service and a question service.
///
/// The policy is installed whole, always: the permission rules as the first pre-execute
/// hook, their denies again as a guard (no hook, approval or session key undoes a deny),
/// the workspace path guard, approvals remembered for the session, and plan mode's guard
/// when it is on. Without an approval service nothing that asks is ever allowed
/// (`APPROVAL_UNAVAILABLE`). `bash` needs no setup: its sandbox is made in-process, and a
/// sandbox that cannot be made runs nothing and says why.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use toolrail_runtime::{Agent, ModelConfig, ProviderName};
/// let agent = Agent::builder()
///     .workspace(["."])
///     .tools(["read", "grep", "edit", "bash"])
///     .deny("bash(curl *)")
///     .model(ModelConfig::new(ProviderName::Openai, "qwen3").at("http://127.0.0.1:8000/v1"))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct AgentBuilder {
    config: SessionConfig,
    additions: Additions,
    session_id: Option<SessionId>,
    store: Option<Store>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("config", &self.config)
            .field("tools", &self.additions.tools.len())
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl AgentBuilder {
    /// A builder with the default configuration and nothing added; the same as
    /// [`Agent::builder`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The session's description (default: [`SessionConfig::default`]). Later calls
    /// (`workspace`, `deny`, …) change it further.
    pub fn config(mut self, config: SessionConfig) -> Self {
        self.config = config;
        self
    }

    /// The workspace roots, replacing the configuration's.
    pub fn workspace(mut self, roots: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.config.workspace.roots = roots.into_iter().map(Into::into).collect();
        self
    }

    /// The shipped tools the session has, by catalog name (replacing `tools.enabled`).
    pub fn tools(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.config.tools.enabled = names.into_iter().map(Into::into).collect();
        self
    }

    /// A tool of your own, beside the shipped ones. A typed tool:
    /// `.tool(Typed::new(MyTool))`.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.additions.tools.push(Arc::new(tool));
        self
    }

    /// The permission preset (replacing the configuration's).
    pub fn preset(mut self, preset: PresetName) -> Self {
        self.config.permissions.preset = Some(preset);
        self
    }

    /// A rule that allows what it matches (`read`, `bash(git status*)`).
    pub fn allow(mut self, rule: impl Into<String>) -> Self {
        self.config
            .permissions
            .allow
            .push(RuleEntry::Pattern(rule.into()));
        self
    }

    /// A rule that makes what it matches ask.
    pub fn ask(mut self, rule: impl Into<String>) -> Self {
        self.config
            .permissions
            .ask
            .push(RuleEntry::Pattern(rule.into()));
        self
    }

    /// A rule that denies what it matches, whatever else allows it.
    pub fn deny(mut self, rule: impl Into<String>) -> Self {
        self.config
            .permissions
            .deny
            .push(RuleEntry::Pattern(rule.into()));
        self
    }

    /// The model to ask (replacing `[model]`).
    pub fn model(mut self, model: ModelConfig) -> Self {
        self.config.model = Some(model);
        self
    }

    /// A model client of your own, instead of the configuration's `[model]`.
    pub fn model_client(mut self, model: Arc<dyn ModelClient>) -> Self {
        self.additions.model = Some(model);
        self
    }

    /// The system prompt (over `model.system`; also for a model client of your own).
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.additions.system = Some(system.into());
        self
    }

    /// Who answers approvals. Without one, every call that must ask is
    /// `APPROVAL_UNAVAILABLE`: nothing is ever approved by default.
    pub fn approvals(mut self, approvals: Arc<dyn ApprovalService>) -> Self {
        self.additions.approvals = Some(approvals);
        self
    }

    /// Who answers `ask_user`. Without one, questions expire unanswered.
    pub fn questions(mut self, questions: Arc<dyn QuestionService>) -> Self {
        self.additions.questions = Some(questions);
        self
    }

    /// A pre-execute hook of your own, consulted after the permission rules.
    pub fn pre_hook(mut self, hook: Arc<dyn PreExecuteHook>) -> Self {
        self.additions.stages.pre_hooks.push(hook);
        self
    }

    /// A guard of your own, beside the runtime's (guards can only refuse).
    pub fn guard(mut self, guard: Arc<dyn Guard>) -> Self {
        self.additions.stages.guards.push(guard);
        self
    }

    /// An execute layer of your own, around every body.
    pub fn layer(mut self, layer: Arc<dyn ExecuteLayer>) -> Self {
        self.additions.stages.layers.push(layer);
        self
    }

    /// A post-execute hook of your own.
    pub fn post_hook(mut self, hook: Arc<dyn PostExecuteHook>) -> Self {
        self.additions.stages.post_hooks.push(hook);
        self
    }

    /// A result observer of your own (told of every committed result).
    pub fn observer(mut self, observer: Arc<dyn ResultObserver>) -> Self {
        self.additions.stages.observers.push(observer);
        self
    }

    /// The scheduler's live events as they happen, beside the agent's own streams.
    pub fn live(mut self, live: Live) -> Self {
        self.additions.live = Some(live);
        self
    }

    /// Exports the session's turns, model requests and tool calls as OpenTelemetry spans
    /// and metrics through `telemetry` (one [`Telemetry`](crate::telemetry::Telemetry) per
    /// process, shared by its sessions), and records the span ids in the log.
    #[cfg(feature = "otlp")]
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.additions.telemetry = Some(telemetry);
        self
    }

    /// Cancels what [`resume`](Self::resume) waits for: a call a restart left waiting for
    /// its approval, asked again, stops waiting when `cancel` fires and is refused
    /// `APPROVAL_CANCELLED`, never run (give the token that stops the session's turns: a
    /// lost lease, a client's cancel). Without it a question with no deadline waits for
    /// its answer as long as the approver takes.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use toolrail_runtime::{Agent, Store};
    /// use toolrail_tools_core::CancellationToken;
    /// let stop = CancellationToken::new();
    /// let store = Store::jsonl(".toolrail/sessions")?;
    /// let resumed = Agent::builder().cancel(stop.clone()).resume(&store, &"s1".into()).await?;
    /// # Ok(()) }
    /// ```
    pub fn cancel(mut self, cancel: CancellationToken) -> Self {
        self.additions.resume_cancel = Some(cancel);
        self
    }

    /// The new session's id (default: made from the time and this process).
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(SessionId::new(id.into()));
        self
    }

    /// A store opened already, instead of the configuration's `[store]`.
    pub fn store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    /// Makes every piece and starts a new session in the store.
    pub async fn build(self) -> Result<Agent, BuildError> {
        let store = match self.store {
            Some(store) => store,
            None => Store::from_config(&self.config.store)?,
        };
        let id = self.session_id.unwrap_or_else(new_session_id);
        let built = assemble(self.config, self.additions, Source::New { store, id }).await?;
        Ok(built.agent)
    }

    /// Opens session `id` in `store`, recovers it (every call a crash left without a
    /// result gets an honest one: not started, or outcome unknown unless the file tools'
    /// probe can tell; a call left waiting for its approval is asked again through this
    /// builder's approval service — so `resume` waits for that answer — or recorded
    /// `APPROVAL_EXPIRED` past its question's deadline, never allowed unasked), and returns
    /// an agent whose next prompt continues the conversation,
    /// with file observations, session approvals, the todo board, plan mode and loaded
    /// tools as the log left them.
    ///
    /// A PostgreSQL session is resumed under a lease of this process's, renewed while the
    /// agent lives and released when it is dropped: no worker claims it meanwhile, and a
    /// session someone else holds is refused (`BuildError::Store`, naming the holder).
    pub async fn resume(self, store: &Store, id: &SessionId) -> Result<Resumed, BuildError> {
        #[cfg(feature = "postgres")]
        if let Some(postgres) = store.postgres() {
            return crate::fleet::resume_leased(self, store, postgres, id).await;
        }
        let built = assemble(
            self.config,
            self.additions,
            Source::Existing {
                store: store.clone(),
                id: id.clone(),
            },
        )
        .await?;
        Ok(Resumed {
            agent: built.agent,
            recovery: built.recovery.unwrap_or_default(),
        })
    }

    /// The tools a session built from this would have, without starting one (no store,
    /// log, model or MCP server is touched): for listings.
    pub fn tool_set(self) -> Result<toolrail_tools_core::Registry, BuildError> {
        super::assemble::tool_registry(self.config, self.additions.tools)
    }

    /// Builds into `source` (the scenario runner and the fleet worker).
    pub(crate) async fn build_in(
        self,
        source: Source,
    ) -> Result<super::assemble::Assembled, BuildError> {
        assemble(self.config, self.additions, source).await
    }
}

impl SessionConfig {
    /// The configuration session `id` of `store` recorded when it started: what
    /// [`Agent::resume`](super::Agent::resume) reopens it with. Lay services given in code
    /// over it and resume with [`AgentBuilder::resume`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use toolrail_runtime::{Agent, SessionConfig, Store};
    /// # let approvals: Arc<dyn toolrail_tools_core::ApprovalService> = todo!();
    /// let store = Store::jsonl(".toolrail/sessions")?;
    /// let id = "20261202-085512-3fa1".into();
    /// let config = SessionConfig::recorded_in(&store, &id)?;
    /// let resumed = Agent::builder().config(config).approvals(approvals).resume(&store, &id).await?;
    /// # Ok(()) }
    /// ```
    pub fn recorded_in(store: &Store, id: &SessionId) -> Result<Self, BuildError> {
        recorded_config(store, id)
    }
}

/// The configuration session `id` recorded when it started.
pub(crate) fn recorded_config(store: &Store, id: &SessionId) -> Result<SessionConfig, BuildError> {
    let events = store.read(id)?;
    let meta = events.first().and_then(|event| {
        if let EventData::SessionStart(start) = &event.data {
            start.meta.clone()
        } else {
            None
        }
    });
    let Some(meta) = meta else {
        return Err(BuildError::Session(format!(
            "session `{id}` recorded no configuration (it was started by an older toolrail or by hand); resume it with `Agent::builder().config(...).resume(...)`"
        )));
    };
    let withheld: Vec<String> = meta
        .get("withheld_env")
        .and_then(|names| serde_json::from_value(names.clone()).ok())
        .unwrap_or_default();
    if !withheld.is_empty() {
        return Err(BuildError::Session(format!(
            "session `{id}` started with MCP servers whose `env` the log does not keep (it holds no secrets): {}; resume it with `Agent::builder().config(...).resume(...)`",
            withheld.join(", ")
        )));
    }
    let config = meta.get("config").cloned().unwrap_or_default();
    Ok(SessionConfig::from_json_value(
        config,
        &format!("session `{id}`'s recorded configuration"),
    )?)
}

/// A new session's id: the time, this process, and a counter.
pub(crate) fn new_session_id() -> SessionId {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis())
        .unwrap_or_default();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    SessionId::new(format!("s{millis}-{}-{n}", std::process::id()))
}
