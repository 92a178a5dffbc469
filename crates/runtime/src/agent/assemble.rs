//! The wiring, in one place: every piece of a session made from its configuration, the
//! policy installed whole, the tools registered, and the log created, opened or taken
//! under a lease. `AgentBuilder` is the only way in.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolrail_agent_loop::{
    AgentLoop, Live, LoopConfig, ModelClient, Scheduler, SchedulerConfig, ToolSearch,
};
use toolrail_fs_tools::{FileTools, FsEffectProbe};
use toolrail_interaction::{PlanMode, QuestionService, ScriptedQuestions, TodoBoard};
use toolrail_permissions::{
    Permissions, Preset, RememberApprovals, Rule, RuleEffect, RuleFile, RuleOrigin,
    SessionApprovals,
};
use toolrail_policy_guards::{PlanModeGuard, WorkspacePathGuard};
use toolrail_session_log::{
    AppendUrgency, Event, EventData, EventDraft, SessionId, SessionLog, Timestamp,
    event::{ContextMessage, FORMAT_VERSION, SessionStart},
    recover,
    recovery::{EffectProbe, recover_asking_again},
};
use toolrail_session_store::Durability;
use toolrail_shell_tool::{ModeRule, SandboxMode, SandboxTier, ShellConfig, Shells};
use toolrail_tools_core::{
    ApprovalService, CancellationToken, ExecuteLayer, Guard, Pipeline, PipelineConfig,
    PlanModeSwitch, PostExecuteHook, PreExecuteHook, ProtectedPaths, Registry, RegistryBuilder,
    ResultObserver, Tool, Typed, WorkspaceRoots,
};

use super::builder::BuildError;
use super::events::{Tap, TapLive};
use super::shell_input::{ShellInputGuard, ShellInputHook, ShellInputRules};
use super::{Agent, Shared};
use crate::catalog::{self, CatalogContext};
use crate::config::{ConfigError, PresetName, SandboxModeName, SandboxTierName, SessionConfig};
use crate::recovery::{PipelineResumer, Recovery};
use crate::store::Store;

/// What the embedder added in code, beside the configuration.
#[derive(Default)]
pub(super) struct Additions {
    pub tools: Vec<Arc<dyn Tool>>,
    pub model: Option<Arc<dyn ModelClient>>,
    pub approvals: Option<Arc<dyn ApprovalService>>,
    pub questions: Option<Arc<dyn QuestionService>>,
    pub live: Option<Live>,
    /// The system prompt, over `model.system`.
    pub system: Option<String>,
    pub stages: Stages,
    /// Stops what opening a session waits for: a pending approval asked again.
    pub resume_cancel: Option<CancellationToken>,
    #[cfg(feature = "otlp")]
    pub telemetry: Option<crate::telemetry::Telemetry>,
}

/// The embedder's stages, installed after the runtime's own.
#[derive(Default)]
pub(super) struct Stages {
    pub pre_hooks: Vec<Arc<dyn PreExecuteHook>>,
    pub guards: Vec<Arc<dyn Guard>>,
    pub layers: Vec<Arc<dyn ExecuteLayer>>,
    pub post_hooks: Vec<Arc<dyn PostExecuteHook>>,
    pub observers: Vec<Arc<dyn ResultObserver>>,
}

/// Where the session's log comes from.
pub(crate) enum Source {
    /// A new session in a store.
    New { store: Store, id: SessionId },
    /// A session the store holds: opened and recovered.
    Existing { store: Store, id: SessionId },
    /// A session of a PostgreSQL store under a lease (new when the store holds none of
    /// its events yet); every append is fenced by the lease's token.
    #[cfg(feature = "postgres")]
    Leased {
        store: Store,
        lease: toolrail_session_store::Lease,
    },
}

impl Source {
    pub(crate) fn store(&self) -> &Store {
        match self {
            Self::New { store, .. } | Self::Existing { store, .. } => store,
            #[cfg(feature = "postgres")]
            Self::Leased { store, .. } => store,
        }
    }

    pub(crate) fn id(&self) -> &SessionId {
        match self {
            Self::New { id, .. } | Self::Existing { id, .. } => id,
            #[cfg(feature = "postgres")]
            Self::Leased { lease, .. } => &lease.session,
        }
    }
}

/// A session put together: the agent, what recovery did (for a session that held
/// events), and the events it held before (repairs included).
pub(crate) struct Assembled {
    pub agent: Agent,
    pub recovery: Option<Recovery>,
    pub earlier: Vec<Event>,
}

/// A session's log as found, before anything is written to it.
enum Found {
    /// No events yet: the log is created once the tool set is known.
    Nothing,
    /// The session's log, open, and its events as read (a crash's repairs not yet made).
    Events {
        log: Arc<dyn SessionLog>,
        events: Vec<Event>,
        torn_bytes_dropped: u64,
    },
}

/// The session's log, and for a session that held events, what it held (not yet recovered).
struct Opened {
    log: Arc<dyn SessionLog>,
    reopened: Option<Reopened>,
}

/// A reopened session's events as read, and the bytes of a torn last line cut off.
struct Reopened {
    events: Vec<Event>,
    torn_bytes_dropped: u64,
}

/// Makes every piece and opens the session; nothing is written before every piece is made.
pub(crate) async fn assemble(
    mut config: SessionConfig,
    additions: Additions,
    source: Source,
) -> Result<Assembled, BuildError> {
    config.validate()?;
    let roots = resolve_roots(&config)?;
    config.workspace.roots = roots.as_slice().to_vec();
    let store = source.store().clone();
    // The session's log, opened before anything is written: approvals, observations, the
    // todo board and plan mode are rebuilt from the events it holds.
    let found = find(&source)?;
    let before: &[Event] = match &found {
        Found::Nothing => &[],
        Found::Events { events, .. } => events,
    };
    let pieces = Pieces::make(&config, &roots, store.folder(), before, &additions)?;
    let registry = pieces.registry(&config, additions.tools)?;
    let model = match additions.model {
        Some(model) => model,
        None => model_client(&config)?,
    };
    let mcp = mcp_config(&config)?;
    let opened = open(&source, found, &config, &registry).await?;
    let tap = Tap::new(Arc::clone(&opened.log));
    #[cfg(feature = "otlp")]
    let tap = match &additions.telemetry {
        Some(telemetry) => {
            let spans = crate::telemetry::spans::SessionSpans::new(
                telemetry,
                source.id().clone(),
                chat_settings(&config),
                registry.clone(),
            );
            match crate::telemetry::feed::SpanFeed::start(telemetry, spans) {
                Ok(feed) => tap.with_spans(feed),
                // The session runs untraced rather than not at all.
                Err(error) => {
                    tracing::warn!(%error, "the session's telemetry thread could not be started: it is not traced");
                    tap
                }
            }
        }
        None => tap,
    };
    let tap = Arc::new(tap);
    let pipeline = Arc::new(pipeline(
        &config,
        &roots,
        &tap,
        &pieces,
        additions.approvals,
        additions.stages,
    ));
    let mut loop_config = LoopConfig {
        system: additions
            .system
            .clone()
            .or_else(|| config.model.as_ref().and_then(|model| model.system.clone())),
        max_steps: config.limits.max_steps,
        ..LoopConfig::default()
    };
    if let Some(code) = &pieces.code {
        loop_config.presentation = Some(code.presentation());
        code.attach(Arc::clone(&pipeline), registry.clone(), tap.clone());
    }
    let mcp_stderr = session_folder(store.folder().as_deref(), &roots)
        .join("mcp")
        .join(source.id().as_str());
    let stops: Vec<super::Stop> = start_mcp(mcp, &registry, mcp_stderr)
        .await
        .into_iter()
        .collect();
    let scheduler_config = SchedulerConfig {
        stop_batch_on_reject: config.limits.stop_batch_on_reject,
        ..SchedulerConfig::default()
    }
    .with_max_parallel(config.limits.max_parallel)
    .map_err(|error| ConfigError::invalid("limits.max_parallel", error.to_string()))?;
    // Recovery runs once every piece is made: a call a restart left waiting for its
    // approval is asked again through this session's own pipeline and approval service.
    let (earlier, recovery) = match opened.reopened {
        None => (Vec::new(), None),
        Some(reopened) => {
            let resumer = PipelineResumer {
                pipeline: Arc::clone(&pipeline),
                registry: registry.clone(),
                cancel: additions.resume_cancel.clone().unwrap_or_default(),
            };
            let probe = probe_for(store.durability());
            let recovery = repair_asking_again(&reopened, probe, &opened.log, &resumer).await?;
            report_ended_shells(&reopened.events, &opened.log).await?;
            // Read again, repairs included: the next request carries them.
            drop(reopened);
            let earlier = store.read(source.id())?;
            #[cfg(feature = "otlp")]
            tap.resumed(&earlier);
            (earlier, Some(recovery))
        }
    };
    let scheduler = Scheduler::new(Arc::clone(&pipeline), scheduler_config);
    let mut turns = AgentLoop::new(registry.clone(), scheduler, tap.clone(), model, loop_config);
    if earlier.is_empty() {
        if config.permissions.plan_mode {
            pieces
                .plan
                .enter(tap.as_ref())
                .await
                .map_err(|error| BuildError::Session(format!("entering plan mode: {error}")))?;
        }
    } else {
        turns = turns.resume(&earlier);
    }
    let live: Live = Arc::new(TapLive {
        tap: Arc::clone(&tap),
        also: additions.live,
    });
    let steering = turns.steering();
    let agent = Agent {
        shared: Arc::new(Shared {
            session: source.id().clone(),
            store,
            turns: Arc::new(tokio::sync::Mutex::new(turns)),
            tap,
            live,
            cancel: parking_lot::Mutex::new(CancellationToken::new()),
            steering,
            registry,
            _keep: parking_lot::Mutex::new(Vec::new()),
            stops: parking_lot::Mutex::new(stops),
        }),
    };
    Ok(Assembled {
        agent,
        recovery,
        earlier,
    })
}

/// The model settings a `chat` span names.
#[cfg(feature = "otlp")]
pub(crate) fn chat_settings(config: &SessionConfig) -> crate::telemetry::genai::ChatSettings {
    let Some(model) = &config.model else {
        return crate::telemetry::genai::ChatSettings::default();
    };
    let provider = match model.provider {
        crate::config::ProviderName::Openai => "openai",
        crate::config::ProviderName::Anthropic => "anthropic",
    };
    crate::telemetry::genai::ChatSettings {
        provider: Some(provider.to_owned()),
        model: Some(model.model.clone()),
        temperature: model.temperature,
        top_p: model.top_p,
        max_tokens: model.max_tokens,
    }
}

/// The session's tools as `config` and `tools` make them, without a store, a log or a
/// model: for listings. MCP servers are not started.
pub(crate) fn tool_registry(
    config: SessionConfig,
    tools: Vec<Arc<dyn Tool>>,
) -> Result<Registry, BuildError> {
    config.validate()?;
    let roots = resolve_roots(&config)?;
    let store_folder = match crate::store::StoreUrl::parse(&config.store.url)? {
        crate::store::StoreUrl::Jsonl(folder) => {
            Some(std::path::absolute(&folder).unwrap_or(folder))
        }
        crate::store::StoreUrl::Sqlite(_) | crate::store::StoreUrl::Postgres(_) => None,
    };
    let pieces = Pieces::make(&config, &roots, store_folder, &[], &Additions::default())?;
    pieces.registry(&config, tools)
}

/// Every root, made absolute and resolved (a session works in real folders).
fn resolve_roots(config: &SessionConfig) -> Result<WorkspaceRoots, ConfigError> {
    let mut resolved = Vec::new();
    for (at, root) in config.workspace.roots.iter().enumerate() {
        let real = std::fs::canonicalize(root).map_err(|error| {
            ConfigError::invalid(
                format!("workspace.roots[{at}]"),
                format!(
                    "`{}` cannot be used: {error}; give a folder that exists",
                    root.display()
                ),
            )
        })?;
        if !real.is_dir() {
            return Err(ConfigError::invalid(
                format!("workspace.roots[{at}]"),
                format!("`{}` is not a folder", root.display()),
            ));
        }
        resolved.push(real);
    }
    WorkspaceRoots::new(&resolved)
        .map_err(|error| ConfigError::invalid("workspace.roots", error.to_string()))
}

/// The pieces tools are made from, and the policy.
struct Pieces {
    permissions: Arc<Permissions>,
    context: CatalogContext,
    plan: PlanMode,
    switch: PlanModeSwitch,
    code: Option<CodePiece>,
}

impl Pieces {
    fn make(
        config: &SessionConfig,
        roots: &WorkspaceRoots,
        store_folder: Option<PathBuf>,
        before: &[Event],
        additions: &Additions,
    ) -> Result<Self, BuildError> {
        let session_folder = session_folder(store_folder.as_deref(), roots);
        let spill_dir = session_folder.join("outputs");
        let permissions = permissions(config, roots, before)?;
        let protected = protected_paths(config, store_folder.as_deref(), &spill_dir, &permissions)?;
        let switch = PlanModeSwitch::new();
        let plan = if before.is_empty() {
            PlanMode::new(switch.clone())
        } else {
            PlanMode::from_events(switch.clone(), before)
        };
        let files = if before.is_empty() {
            FileTools::new(roots.clone())
        } else {
            FileTools::resumed(roots.clone(), before)
        }
        .with_limits(file_limits(config))
        .with_protected(protected.clone());
        let todo = if before.is_empty() {
            TodoBoard::new()
        } else {
            TodoBoard::from_events(before)
        };
        // Nobody to answer: every question expires unanswered (never an answer made up).
        let questions = additions
            .questions
            .clone()
            .unwrap_or_else(|| Arc::new(ScriptedQuestions::new([])));
        let shell = shell_config(config, roots, &spill_dir, protected)?;
        let shells = if before.is_empty() {
            Shells::new(shell.background.clone())
        } else {
            Shells::resumed(shell.background.clone(), before)
        };
        let background = config
            .tools
            .enabled
            .iter()
            .any(|name| name == "shell_output");
        let code = CodePiece::make(config, roots, &session_folder)?;
        Ok(Self {
            permissions,
            context: CatalogContext {
                files,
                shell,
                shells,
                background,
                todo,
                questions,
                plan: plan.clone(),
            },
            plan,
            switch,
            code,
        })
    }

    /// The catalog's tools the configuration names, the embedder's own, and the runtime's
    /// (`exit_plan_mode` in plan mode, `run_code`, `tool_search` for deferred tools).
    fn registry(
        &self,
        config: &SessionConfig,
        given: Vec<Arc<dyn Tool>>,
    ) -> Result<Registry, BuildError> {
        let given_names: Vec<String> = given
            .iter()
            .map(|tool| tool.spec().name().to_owned())
            .collect();
        let mut builder = RESERVED
            .iter()
            .fold(RegistryBuilder::new(), |builder, name| {
                builder.reserve(*name)
            });
        for name in &config.tools.deferred {
            builder = builder.defer(name.clone());
        }
        let mut plan_exit_named = false;
        for name in &config.tools.enabled {
            let given = given_names.contains(name);
            let Some(entry) = catalog::entry(name) else {
                if given {
                    // A tool of the embedder's, named so it may be deferred or listed.
                    continue;
                }
                return Err(ConfigError::invalid(
                    "tools.enabled",
                    format!(
                        "`{name}` is neither a shipped tool nor one given to the builder; the catalog has {}",
                        catalog::names().collect::<Vec<_>>().join(", ")
                    ),
                )
                .into());
            };
            if given {
                // Never a silent replacement: the shipped tool stays unless it is left out.
                return Err(BuildError::Registry(format!(
                    "a tool given to the builder is named `{name}`, like the shipped tool `tools.enabled` names; leave `{name}` out of `tools.enabled` to use yours instead, or name yours otherwise"
                )));
            }
            plan_exit_named |= entry.name == catalog::EXIT_PLAN_MODE;
            if let Some(tool) = entry.make(&self.context) {
                builder = builder.builtin(tool);
            }
        }
        if config.permissions.plan_mode && !plan_exit_named {
            builder = builder.builtin(self.context.plan.exit_tool());
        }
        for tool in given {
            builder = builder.builtin(tool);
        }
        if let Some(code) = &self.code {
            builder = builder.runtime_tool(code.tool());
        }
        let (registry, warnings) = builder
            .build()
            .map_err(|error| BuildError::Registry(error.to_string()))?;
        for warning in warnings {
            tracing::warn!(?warning, "a tool was left out");
        }
        if !config.tools.deferred.is_empty() {
            registry
                .install_runtime_tool(Arc::new(Typed::new(ToolSearch::new(registry.clone()))))
                .map_err(|error| BuildError::Registry(error.to_string()))?;
        }
        Ok(registry)
    }
}

/// The names kept for the runtime's own tools, whether or not a session has them: code
/// mode's entry point and `tool_search`. No other tool (an MCP server's, an extension's)
/// may take them.
pub(crate) const RESERVED: [&str; 2] = ["run_code", toolrail_agent_loop::TOOL_SEARCH];

/// The pipeline, with the policy whole: rules as the first hook (so a hook of the
/// embedder's that allows early cannot skip them) and their denies again as a guard (so no
/// hook, approval or session key can undo a deny), the workspace guard, approvals
/// remembered for the session, and the plan-mode guard. Without an approval service nothing
/// that asks is ever allowed (`APPROVAL_UNAVAILABLE`).
fn pipeline(
    config: &SessionConfig,
    roots: &WorkspaceRoots,
    tap: &Arc<Tap>,
    pieces: &Pieces,
    approvals: Option<Arc<dyn ApprovalService>>,
    stages: Stages,
) -> Pipeline {
    let limits = &config.limits;
    let mut pipeline = Pipeline::builder(tap.clone())
        .config(PipelineConfig {
            cancel_grace: Duration::from_millis(limits.cancel_grace_ms),
            default_timeout: limits.call_timeout_ms.map(Duration::from_millis),
            approval_timeout: limits.approval_timeout_ms.map(Duration::from_millis),
            workspace: roots
                .as_slice()
                .first()
                .map(|root| Arc::from(root.as_path())),
            ..PipelineConfig::default()
        })
        .pre_hook(Arc::new(pieces.permissions.hook()));
    let shell_input = ShellInputRules::new(
        pieces.context.shells.clone(),
        Arc::clone(&pieces.permissions),
    );
    pipeline = pipeline.pre_hook(Arc::new(ShellInputHook(Arc::clone(&shell_input))));
    for hook in stages.pre_hooks {
        pipeline = pipeline.pre_hook(hook);
    }
    pipeline = pipeline
        .guard(Arc::new(pieces.permissions.deny_guard()))
        .guard(Arc::new(ShellInputGuard(shell_input)))
        .guard(Arc::new(WorkspacePathGuard::new(roots.clone())));
    if config.permissions.plan_mode {
        pipeline = pipeline.guard(Arc::new(PlanModeGuard::new(pieces.switch.clone())));
    }
    for guard in stages.guards {
        pipeline = pipeline.guard(guard);
    }
    if let Some(approvals) = approvals {
        pipeline = pipeline.approval(Arc::new(RememberApprovals::new(
            approvals,
            pieces.permissions.session().clone(),
        )));
    }
    for layer in stages.layers {
        pipeline = pipeline.layer(layer);
    }
    for hook in stages.post_hooks {
        pipeline = pipeline.post_hook(hook);
    }
    for observer in stages.observers {
        pipeline = pipeline.observer(observer);
    }
    pipeline.build()
}

/// The configuration as the log records it (in `session/start`), so the session can be
/// resumed as it was made. No secret goes in: MCP servers' `env` values are left out.
fn recorded(config: &SessionConfig, store: &Store) -> Value {
    let mut config = config.clone();
    config.store.url = store.url().to_owned();
    let mut withheld = Vec::new();
    for (name, server) in &mut config.mcp_servers {
        if withhold_env(server) {
            withheld.push(name.clone());
        }
    }
    serde_json::json!({
        "toolrail": env!("CARGO_PKG_VERSION"),
        "config": config,
        "withheld_env": withheld,
    })
}

#[cfg(feature = "mcp")]
fn withhold_env(server: &mut crate::config::McpServerConfig) -> bool {
    let had = !server.env.is_empty();
    for value in server.env.values_mut() {
        value.clear();
    }
    had
}

#[cfg(not(feature = "mcp"))]
fn withhold_env(server: &mut crate::config::McpServerConfig) -> bool {
    match server.get_mut("env") {
        Some(Value::Object(env)) if !env.is_empty() => {
            for value in env.values_mut() {
                *value = Value::String(String::new());
            }
            true
        }
        Some(_) | None => false,
    }
}

/// The session's log, opened without writing to it (a new session's is created later).
fn find(source: &Source) -> Result<Found, BuildError> {
    match source {
        Source::New { .. } => Ok(Found::Nothing),
        Source::Existing { store, id } => {
            let opened = store.open_session(id)?;
            Ok(Found::Events {
                log: opened.log,
                events: opened.events,
                torn_bytes_dropped: opened.torn_bytes_dropped,
            })
        }
        #[cfg(feature = "postgres")]
        Source::Leased { store, lease } => {
            let postgres = leased_store(store)?;
            let failed = |error| BuildError::Store(store.refused(error));
            if postgres.read(&lease.session).map_err(failed)?.is_empty() {
                return Ok(Found::Nothing);
            }
            let opened = postgres.open_leased(lease).map_err(failed)?;
            Ok(Found::Events {
                log: Arc::new(opened.log),
                events: opened.events,
                torn_bytes_dropped: 0,
            })
        }
    }
}

/// The PostgreSQL store of a leased session.
#[cfg(feature = "postgres")]
fn leased_store(store: &Store) -> Result<&toolrail_session_store::PostgresStore, BuildError> {
    store
        .postgres()
        .ok_or_else(|| BuildError::Session("a leased session needs a PostgreSQL store".to_owned()))
}

/// The session's log: created for a session with no events, or opened as it was for one
/// that holds some (recovered once the pipeline is made).
async fn open(
    source: &Source,
    found: Found,
    config: &SessionConfig,
    registry: &Registry,
) -> Result<Opened, BuildError> {
    let (log, events, torn_bytes_dropped) = match found {
        Found::Events {
            log,
            events,
            torn_bytes_dropped,
        } => (log, events, torn_bytes_dropped),
        Found::Nothing => {
            let start = SessionStart {
                format_version: FORMAT_VERSION,
                session_id: source.id().clone(),
                tools: registry.snapshot().manifest(),
                meta: Some(recorded(config, source.store())),
            };
            let log = match source {
                Source::New { store, .. } | Source::Existing { store, .. } => {
                    store.create(start)?
                }
                #[cfg(feature = "postgres")]
                Source::Leased { store, lease } => {
                    let created = leased_store(store)?.create_leased(start, lease);
                    Arc::new(created.map_err(|error| BuildError::Store(store.refused(error)))?)
                }
            };
            return Ok(Opened {
                log,
                reopened: None,
            });
        }
    };
    Ok(Opened {
        log,
        reopened: Some(Reopened {
            events,
            torn_bytes_dropped,
        }),
    })
}

/// Background shells the log shows running did not outlive the runtime that ran them: each
/// is recorded as ended (`shell/exited`) and the model is told once, with its output so
/// far (`context/message`), before the session goes on.
async fn report_ended_shells(
    events: &[Event],
    log: &Arc<dyn SessionLog>,
) -> Result<(), BuildError> {
    let Some(ended) = toolrail_shell_tool::ended_with_runtime(events) else {
        return Ok(());
    };
    let turn = events.iter().rev().find_map(|event| event.turn);
    // The message first: a crash between the two leaves the shells open in the log, so
    // the next opening tells the model again rather than never.
    let mut drafts = vec![EventData::ContextMessage(ContextMessage {
        source: "runtime".to_owned(),
        content: ended.message,
    })];
    drafts.extend(ended.exited.into_iter().map(EventData::ShellExited));
    for data in drafts {
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn,
            step: None,
            call_id: None,
            data,
        };
        log.append(draft, AppendUrgency::Durable)
            .await
            .map_err(|error| {
                BuildError::Session(format!(
                    "recording the shells that ended with the runtime: {error}"
                ))
            })?;
    }
    Ok(())
}

/// In strict mode a file write's intent is durable before the file is touched: the probe
/// may then read a missing intent as "did not happen".
pub(crate) fn probe_for(durability: Durability) -> Arc<dyn EffectProbe> {
    if durability == Durability::Strict {
        Arc::new(FsEffectProbe::for_strict_log())
    } else {
        Arc::new(FsEffectProbe::new())
    }
}

pub(crate) async fn repair(
    events: &[Event],
    torn_bytes_dropped: u64,
    probe: Arc<dyn EffectProbe>,
    log: &Arc<dyn SessionLog>,
) -> Result<Recovery, BuildError> {
    let report = recover(events, torn_bytes_dropped, &[probe], log.as_ref())
        .await
        .map_err(BuildError::Recovery)?;
    Ok(Recovery::new(&report, events))
}

/// [`repair`], with every pending approval asked again through `resumer`.
async fn repair_asking_again(
    reopened: &Reopened,
    probe: Arc<dyn EffectProbe>,
    log: &Arc<dyn SessionLog>,
    resumer: &PipelineResumer,
) -> Result<Recovery, BuildError> {
    let report = recover_asking_again(
        &reopened.events,
        reopened.torn_bytes_dropped,
        &[probe],
        resumer,
        log.as_ref(),
    )
    .await
    .map_err(BuildError::Recovery)?;
    Ok(Recovery::new(&report, &reopened.events))
}

/// Where a session's outputs go: beside a JSONL store's files, else in the first root's
/// `.toolrail` folder.
fn session_folder(store_folder: Option<&Path>, roots: &WorkspaceRoots) -> PathBuf {
    store_folder.map(Path::to_path_buf).unwrap_or_else(|| {
        roots
            .as_slice()
            .first()
            .map(|root| root.join(".toolrail"))
            .unwrap_or_else(std::env::temp_dir)
    })
}

fn rules_of(config: &SessionConfig) -> Result<(Option<Preset>, Vec<Rule>), ConfigError> {
    let section = &config.permissions;
    let mut preset = None;
    let mut rules = Vec::new();
    if let Some(file) = &section.file {
        let loaded = RuleFile::load(file)
            .map_err(|error| ConfigError::invalid("permissions.file", error.to_string()))?;
        preset = loaded.preset;
        rules.extend(loaded.rules);
    }
    if let Some(name) = section.preset {
        preset = Some(match name {
            PresetName::Untrusted => Preset::Untrusted,
            PresetName::Workspace => Preset::Workspace,
            PresetName::NeverAsk => Preset::NeverAsk,
            PresetName::FullAuto => Preset::FullAuto,
        });
    }
    for (effect, list, field) in [
        (RuleEffect::Allow, &section.allow, "allow"),
        (RuleEffect::Ask, &section.ask, "ask"),
        (RuleEffect::Deny, &section.deny, "deny"),
    ] {
        for (at, entry) in list.iter().enumerate() {
            let path = format!("permissions.{field}[{at}]");
            let (pattern, reason) = entry.parts();
            let mut rule = Rule::new(effect, pattern)
                .map_err(|error| ConfigError::invalid(&path, error.to_string()))?
                .with_origin(RuleOrigin {
                    source: path.clone(),
                    line: None,
                });
            if let Some(reason) = reason {
                rule = rule.with_reason(reason.to_owned());
            }
            rules.push(rule);
        }
    }
    Ok((preset, rules))
}

fn permissions(
    config: &SessionConfig,
    roots: &WorkspaceRoots,
    before: &[Event],
) -> Result<Arc<Permissions>, ConfigError> {
    let (preset, rules) = rules_of(config)?;
    let session = if before.is_empty() {
        SessionApprovals::new()
    } else {
        SessionApprovals::from_events(before)
    };
    let mut permissions =
        Permissions::new(preset.unwrap_or_default(), rules, roots).with_session(session);
    if config.permissions.unattended {
        permissions = permissions.unattended();
    }
    Ok(Arc::new(permissions))
}

/// What no tool reads or changes: the user's credentials (unless unhidden), the store's
/// folder (its outputs shown read-only), the configuration's own hidden paths, what the
/// deny rules name for reading, and every `.git` (unless allowed).
fn protected_paths(
    config: &SessionConfig,
    store_folder: Option<&Path>,
    spill_dir: &Path,
    permissions: &Permissions,
) -> Result<ProtectedPaths, ConfigError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut protected = ProtectedPaths::for_current_user();
    for path in &config.sandbox.unhide {
        let path = match (&home, path.is_relative()) {
            (Some(home), true) => home.join(path),
            _ => path.clone(),
        };
        protected = protected.unhide(path);
    }
    for path in &config.sandbox.hide {
        protected = protected.hide(path);
    }
    if let Some(folder) = store_folder {
        protected = protected.hide(folder);
    }
    protected = protected.show_read_only(spill_dir);
    if config.sandbox.allow_git_writes {
        protected = protected.allow_git_writes();
    }
    permissions
        .protect(protected)
        .map_err(|error| ConfigError::invalid("permissions.deny", error.to_string()))
}

fn sandbox_mode(name: SandboxModeName) -> SandboxMode {
    match name {
        SandboxModeName::ReadOnly => SandboxMode::ReadOnly,
        SandboxModeName::WorkspaceWrite => SandboxMode::WorkspaceWrite,
        SandboxModeName::FullAccess => SandboxMode::FullAccess,
    }
}

fn file_limits(config: &SessionConfig) -> toolrail_fs_tools::Limits {
    let files = &config.tools.files;
    let mut limits = toolrail_fs_tools::Limits::default();
    if let Some(lines) = files.read_lines {
        limits.read_lines = lines;
    }
    if let Some(bytes) = files.read_bytes {
        limits.read_bytes = bytes;
    }
    if let Some(results) = files.glob_results {
        limits.glob_results = results;
    }
    if let Some(results) = files.grep_results {
        limits.grep_results = results;
    }
    limits
}

fn shell_config(
    config: &SessionConfig,
    roots: &WorkspaceRoots,
    spill_dir: &Path,
    protected: ProtectedPaths,
) -> Result<ShellConfig, ConfigError> {
    let sandbox = &config.sandbox;
    let bash = &config.tools.bash;
    let mut shell = ShellConfig::new(roots.clone(), spill_dir);
    shell.mode = sandbox_mode(sandbox.mode);
    shell.tier = match sandbox.tier {
        SandboxTierName::Bubblewrap => SandboxTier::Bubblewrap(sandbox.bwrap.clone()),
        SandboxTierName::Namespaces => SandboxTier::Namespaces,
    };
    shell.network = sandbox.network;
    shell.mode_rules = sandbox
        .rules
        .iter()
        .enumerate()
        .map(|(at, rule)| {
            ModeRule::new(rule.command.clone(), sandbox_mode(rule.mode)).map_err(|error| {
                ConfigError::invalid(format!("sandbox.rules[{at}].command"), error.to_string())
            })
        })
        .collect::<Result<_, _>>()?;
    shell.protected = protected;
    shell.read_only_commands = bash.read_only_commands.clone();
    shell.default_timeout = Duration::from_millis(bash.timeout_ms);
    shell.output_cap = bash.output_cap_bytes;
    if let Some(allowed) = &bash.env_allow {
        shell.env_allow = allowed.clone();
    }
    shell.env_extra = bash
        .env
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    shell.grace = Duration::from_millis(config.limits.cancel_grace_ms.min(2_000));
    shell.background.max_live = bash.max_background_shells;
    shell.background.lifetime = Duration::from_secs(bash.background_lifetime_s);
    shell.background.auto_background_after =
        bash.auto_background_after_ms.map(Duration::from_millis);
    // Added to the defaults, never instead of them: a list that forgot `python3` must not
    // make its input data.
    if let Some(interpreters) = &bash.interpreters {
        shell
            .background
            .interpreters
            .extend(interpreters.iter().cloned());
    }
    Ok(shell)
}

/// Code mode, when the configuration turns it on.
#[cfg(any(feature = "code-js", feature = "code-python"))]
struct CodePiece {
    mode: toolrail_code_mode::CodeMode,
    presentation: toolrail_code_mode::PresentationMode,
}

#[cfg(any(feature = "code-js", feature = "code-python"))]
impl CodePiece {
    fn make(
        config: &SessionConfig,
        roots: &WorkspaceRoots,
        session_folder: &Path,
    ) -> Result<Option<Self>, BuildError> {
        use crate::config::{CodeLanguage, CodePresentation};
        use toolrail_code_mode::{CodeMode, Limits, PresentationMode, PythonRuntime};
        let code = &config.code;
        if code.languages.is_empty() {
            return Ok(None);
        }
        if code.languages.contains(&CodeLanguage::Javascript) && !cfg!(feature = "code-js") {
            return Err(BuildError::NotBuilt {
                what: "code.languages = [\"javascript\"]",
                feature: "code-js",
            });
        }
        let limits = Limits {
            memory_bytes: code.memory_mb.saturating_mul(1 << 20),
            wall: Duration::from_millis(code.wall_ms),
            binding_bytes: code.binding_bytes,
            output_bytes: code.output_bytes,
            max_parallel: config.limits.max_parallel,
            ..Limits::default()
        };
        let mut mode = CodeMode::new(limits);
        if code.languages.contains(&CodeLanguage::Python) {
            if !cfg!(feature = "code-python") {
                return Err(BuildError::NotBuilt {
                    what: "code.languages = [\"python\"]",
                    feature: "code-python",
                });
            }
            let mut python = PythonRuntime::new(
                roots.as_slice().to_vec(),
                session_folder.join("code-scratch"),
            );
            if config.sandbox.tier == SandboxTierName::Bubblewrap {
                python.tier = SandboxTier::Bubblewrap(config.sandbox.bwrap.clone());
            }
            mode = mode.with_python(python);
        }
        let presentation = match code.presentation {
            CodePresentation::Both => PresentationMode::Both,
            CodePresentation::Code => PresentationMode::Code,
        };
        Ok(Some(Self { mode, presentation }))
    }

    fn tool(&self) -> Arc<dyn Tool> {
        Arc::new(Typed::new(self.mode.tool()))
    }

    fn presentation(&self) -> toolrail_agent_loop::ToolPresentation {
        self.mode.presentation(self.presentation)
    }

    fn attach(&self, pipeline: Arc<Pipeline>, registry: Registry, log: Arc<Tap>) {
        self.mode.attach(pipeline, registry, log);
    }
}

/// Code mode is not in this build: there is never a piece.
#[cfg(not(any(feature = "code-js", feature = "code-python")))]
enum CodePiece {}

#[cfg(not(any(feature = "code-js", feature = "code-python")))]
impl CodePiece {
    fn make(
        config: &SessionConfig,
        _roots: &WorkspaceRoots,
        _session_folder: &Path,
    ) -> Result<Option<Self>, BuildError> {
        if config.code.languages.is_empty() {
            Ok(None)
        } else {
            Err(BuildError::NotBuilt {
                what: "`[code]` languages",
                feature: "code-js or code-python",
            })
        }
    }

    fn tool(&self) -> Arc<dyn Tool> {
        match *self {}
    }

    fn presentation(&self) -> toolrail_agent_loop::ToolPresentation {
        match *self {}
    }

    fn attach(&self, _pipeline: Arc<Pipeline>, _registry: Registry, _log: Arc<Tap>) {
        match *self {}
    }
}

/// The MCP servers to start, checked.
#[cfg(feature = "mcp")]
fn mcp_config(config: &SessionConfig) -> Result<Option<toolrail_mcp::McpConfig>, BuildError> {
    if config.mcp_servers.is_empty() {
        return Ok(None);
    }
    let servers = toolrail_mcp::McpConfig {
        servers: config.mcp_servers.clone(),
    };
    servers
        .check("mcp_servers")
        .map_err(|error| ConfigError::invalid("mcp_servers", error.message))?;
    Ok(Some(servers))
}

#[cfg(not(feature = "mcp"))]
fn mcp_config(config: &SessionConfig) -> Result<Option<()>, BuildError> {
    if config.mcp_servers.is_empty() {
        Ok(None)
    } else {
        Err(BuildError::NotBuilt {
            what: "`[mcp_servers]`",
            feature: "mcp",
        })
    }
}

/// Starts the servers; their tools join the registry as they are listed. Each server's
/// stderr is written whole to `stderr_dir` (the session folder's `mcp/<session>`). The way
/// to stop them gracefully holds them: kept for the session's life, and dropped with it,
/// which kills them.
#[cfg(feature = "mcp")]
async fn start_mcp(
    config: Option<toolrail_mcp::McpConfig>,
    registry: &Registry,
    stderr_dir: PathBuf,
) -> Option<super::Stop> {
    let config = config?;
    let options = toolrail_mcp::McpOptions {
        stderr_dir: Some(stderr_dir),
    };
    let servers = Arc::new(toolrail_mcp::McpServers::start_with(&config, registry, &options).await);
    Some(Box::new(move || {
        let servers = Arc::clone(&servers);
        Box::pin(async move { servers.shutdown().await })
    }))
}

#[cfg(not(feature = "mcp"))]
async fn start_mcp(
    _config: Option<()>,
    _registry: &Registry,
    _stderr_dir: PathBuf,
) -> Option<super::Stop> {
    None
}

#[cfg(feature = "providers")]
fn model_client(config: &SessionConfig) -> Result<Arc<dyn ModelClient>, BuildError> {
    use crate::config::ProviderName;
    use toolrail_providers::{
        ApiKey, ProviderClient, ProviderConfig, RetryPolicy, ToolChoice, Wire,
    };
    let Some(model) = &config.model else {
        return Err(BuildError::NoModel);
    };
    let wire = match model.provider {
        ProviderName::Openai => Wire::OpenAi,
        ProviderName::Anthropic => Wire::Anthropic,
    };
    let base_url = model.base_url.clone().unwrap_or_else(|| {
        match wire {
            Wire::OpenAi => "https://api.openai.com/v1",
            Wire::Anthropic => "https://api.anthropic.com",
        }
        .to_owned()
    });
    let mut provider = ProviderConfig::new(wire, base_url, model.model.clone());
    if let Some(variable) = &model.api_key_env {
        if std::env::var_os(variable).is_none_or(|key| key.is_empty()) {
            return Err(ConfigError::invalid(
                "model.api_key_env",
                format!("the variable `{variable}` is not set; export it with the key"),
            )
            .into());
        }
        provider.api_key = ApiKey::Env(variable.clone());
    }
    provider.max_tokens = model.max_tokens;
    provider.temperature = model.temperature;
    provider.top_p = model.top_p;
    provider.tool_choice = model
        .tool_choice
        .as_deref()
        .map_or(ToolChoice::Auto, ToolChoice::parse);
    provider.extra_body = model
        .extra_body
        .iter()
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    provider.strict = model.strict;
    provider.retry = RetryPolicy {
        attempts: model.retry.attempts,
        first_delay: Duration::from_millis(model.retry.first_delay_ms),
        max_delay: Duration::from_millis(model.retry.max_delay_ms),
        max_retry_after: Duration::from_millis(model.retry.max_retry_after_ms),
    };
    provider.idle_timeout = Duration::from_millis(model.idle_timeout_ms);
    provider.request_timeout = Duration::from_millis(model.request_timeout_ms);
    provider.step_timeout = Duration::from_millis(model.step_timeout_ms);
    let client =
        ProviderClient::new(provider).map_err(|error| BuildError::Model(error.to_string()))?;
    Ok(Arc::new(client))
}

#[cfg(not(feature = "providers"))]
fn model_client(config: &SessionConfig) -> Result<Arc<dyn ModelClient>, BuildError> {
    match &config.model {
        None => Err(BuildError::NoModel),
        Some(_) => Err(BuildError::NotBuilt {
            what: "`[model]`",
            feature: "providers",
        }),
    }
}

#[cfg(all(test, any(feature = "code-js", feature = "code-python")))]
mod tests {
    /// The runtime reserves exactly the names its features' tools carry.
    #[test]
    fn the_reserved_names_are_the_features_own() {
        assert_eq!(
            super::RESERVED,
            [
                toolrail_code_mode::RUN_CODE,
                toolrail_agent_loop::TOOL_SEARCH
            ]
        );
    }
}
