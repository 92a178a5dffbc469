//! Scenario files: a whole session — tools, settings, workspace files, and per turn the
//! user's message and the model's scripted answers — as JSON, run against the real runtime
//! with its log written to a folder. Unknown fields are errors that name the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{
    AgentLoop, LoopConfig, LoopError, ModelClient, Scheduler, SchedulerConfig, SchedulerConfigError,
};
use toolrail_fs_tools::FileTools;
use toolrail_session_log::{
    AssistantBlock, AssistantMessage, CallId, ContentBlock, Durability, EventData, FORMAT_VERSION,
    SessionId, SessionStart, StopReason, StoreError, TurnEndKind,
};
use toolrail_shell_tool::{BashTool, ModeRule, SandboxMode, ShellConfig};
use toolrail_tools_core::{
    ApprovalService, Pipeline, PipelineConfig, ProtectedPaths, Registry, RegistryBuilder,
    RegistryError, Typed, WorkspaceRoots,
};

use toolrail_interaction::{AskUser, PlanMode, TodoBoard, TodoWriteTool};

use crate::{Probe, ScriptedModel};

mod expect;
mod people;
mod place;

pub use expect::Expectations;
use people::People;
pub use place::{Begun, JsonlPlace, RESUME_MESSAGE, SessionPlace};

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Tool names: `probe`, `probe_idem`, `todo_write`, `ask_user`, the file tools `read`,
    /// `write`, `edit`, `glob`, `grep`, and `bash`.
    pub toolset: Vec<String>,
    #[serde(default)]
    pub config: ScenarioConfig,
    #[serde(default)]
    pub workspace: WorkspaceSpec,
    pub turns: Vec<TurnSpec>,
    /// What the run must produce; a run that differs reports each difference.
    pub expect: Option<Expectations>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioConfig {
    /// At most this many calls run at once (default 8; 1 is strict serial; 0 is refused).
    pub max_parallel: Option<usize>,
    pub cancel_grace_ms: Option<u64>,
    pub default_timeout_ms: Option<u64>,
    /// `strict`, `batched` or `none`.
    pub durability: Option<String>,
    pub stop_batch_on_reject: Option<bool>,
    /// The approver's answers. Without `permissions`, every call is asked.
    pub approval: Option<ApprovalSpec>,
    /// Permission rules in the rule-file shape (`preset`, `allow`, `ask`, `deny`); with them
    /// the workspace path guard and the deny guard are installed too.
    pub permissions: Option<serde_json::Value>,
    /// The session starts in plan mode (the plan-mode guard and `exit_plan_mode` join).
    #[serde(default)]
    pub plan_mode: bool,
    /// Answers for `ask_user`, in order: text, or `null` for a question that expires.
    #[serde(default)]
    pub questions: Vec<Option<String>>,
    /// `bash`'s sandbox: `read-only` (the default), `workspace-write` or `full-access`.
    pub sandbox: Option<String>,
    /// `bash`'s sandbox per command: the first rule whose `command` glob matches every simple
    /// command of the line whole runs it in the rule's `mode` instead.
    #[serde(default)]
    pub sandbox_rules: Vec<SandboxRuleSpec>,
}

/// One rule of `config.sandbox_rules`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRuleSpec {
    pub command: String,
    pub mode: String,
}

/// A sandbox mode named in a scenario: `field` says where, for the error.
fn sandbox_mode(name: Option<&str>, field: &str) -> Result<SandboxMode, ScenarioError> {
    match name {
        None | Some("read-only") => Ok(SandboxMode::ReadOnly),
        Some("workspace-write") => Ok(SandboxMode::WorkspaceWrite),
        Some("full-access") => Ok(SandboxMode::FullAccess),
        Some(other) => Err(ScenarioError::Invalid(format!(
            "{field} `{other}`: use read-only, workspace-write or full-access"
        ))),
    }
}

/// A folder (`what`: the session folder, the workspace) as an absolute path: `bash` runs each
/// command (and writes its spilled output) from the workspace, where a relative folder would
/// name another place.
fn absolute(what: &str, folder: &Path) -> Result<PathBuf, ScenarioError> {
    std::path::absolute(folder).map_err(|error| {
        ScenarioError::Invalid(format!(
            "the {what} `{}` cannot be made absolute: {error}",
            folder.display()
        ))
    })
}

/// How a scenario is run, beyond what its file says.
#[derive(Default)]
pub struct RunOptions {
    /// The scheduler's live events (prepared, started, progress, finished, committed).
    pub live: Option<tokio::sync::mpsc::UnboundedSender<toolrail_agent_loop::LiveEvent>>,
    /// The workspace folder (default: `<session_dir>/workspace`).
    pub workspace: Option<PathBuf>,
    /// Files written into the workspace before the session, besides the scenario's own.
    pub extra_files: BTreeMap<String, String>,
    /// A model to drive the turns instead of the scenario's scripts (which must then be
    /// empty): a real provider.
    pub model: Option<Arc<dyn ModelClient>>,
    /// An approval service instead of the scenario's scripted answers (a terminal).
    pub approvals: Option<Arc<dyn ApprovalService>>,
    /// The most model requests one turn may make (default: the loop's).
    pub max_steps: Option<u32>,
    /// Where the session is logged (default: `<session_dir>/scenario.jsonl`, new). A place
    /// that holds the session already resumes it (see [`SessionPlace`]).
    pub place: Option<Arc<dyn SessionPlace>>,
    /// Cancels every turn from outside (a worker that lost its lease stops driving).
    pub cancel: Option<CancellationToken>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSpec {
    /// Only `scripted`.
    pub mode: String,
    /// `allowed_once`, `allowed_for_session` (for the key the request offers), `rejected`,
    /// `cancelled`, `expired`, `unavailable`, in order; once they run out the service is
    /// unavailable.
    pub answers: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSpec {
    /// Relative path → content, written before the session starts.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSpec {
    pub user: String,
    pub cancel_after_ms: Option<u64>,
    pub model: Vec<ModelStep>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelStep {
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    pub text: Option<String>,
    /// `end_turn`, `tool_use` or `length`.
    pub stop_reason: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    pub id: String,
    pub name: String,
    /// The raw argument text, exactly as a model would send it.
    pub arguments: String,
}

/// Why a scenario could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("the scenario is not valid: {0}")]
    Invalid(String),
    /// A scheduler setting (`config.max_parallel`) that cannot work.
    #[error("the scenario is not valid: config.{0}")]
    Scheduler(#[from] SchedulerConfigError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Loop(#[from] LoopError),
    #[error("writing the workspace: {0}")]
    Workspace(#[from] std::io::Error),
}

/// What a run produced.
#[derive(Debug)]
pub struct ScenarioReport {
    /// The log's file, when the place is one.
    pub log_path: Option<PathBuf>,
    /// How many events the session held before this run (0 for a new session).
    pub earlier_events: usize,
    pub marker_dir: PathBuf,
    pub turn_ends: Vec<TurnEndKind>,
    /// Every way the run differed from the scenario's `expect` (empty when it matched or
    /// expected nothing).
    pub mismatches: Vec<String>,
}

impl Scenario {
    /// Reads a scenario from JSON text; an unknown field is an error naming it.
    pub fn from_json(text: &str) -> Result<Self, ScenarioError> {
        let invalid = |error: serde_json::Error| ScenarioError::Invalid(error.to_string());
        let mut reader = serde_json::Deserializer::from_str(text);
        let scenario = serde_path_to_error::deserialize(&mut reader).map_err(|error| {
            // The path is `.` for a fault before any field (a syntax error at the top); a
            // syntax error inside a value is shown under that value's path.
            let path = error.path().to_string();
            let inner = error.into_inner();
            ScenarioError::Invalid(if path == "." {
                inner.to_string()
            } else {
                format!("{path}: {inner}")
            })
        })?;
        reader.end().map_err(invalid)?;
        Ok(scenario)
    }

    /// Runs every turn; the log goes to `<session_dir>/scenario.jsonl`, markers to
    /// `<session_dir>/markers/`, workspace files to `<session_dir>/workspace/`.
    pub async fn run(&self, session_dir: &Path) -> Result<ScenarioReport, ScenarioError> {
        self.run_with(session_dir, RunOptions::default()).await
    }

    /// [`Scenario::run`] with live events, a sandbox helper for `bash`, or another workspace.
    pub async fn run_with(
        &self,
        session_dir: &Path,
        options: RunOptions,
    ) -> Result<ScenarioReport, ScenarioError> {
        let session_dir = &absolute("session folder", session_dir)?;
        // Every model answer is checked before anything is written or run: a mistake in a
        // late turn does not leave a half-run session behind.
        let scripts = self
            .turns
            .iter()
            .map(|turn| turn.model.iter().map(assistant_message).collect())
            .collect::<Result<Vec<Vec<AssistantMessage>>, ScenarioError>>()?;
        // A call id names one call for the whole session: the log, replay and recovery find
        // calls by it. Within one message a repeated id is the model's mistake the runtime
        // handles (the repeat is refused under an id of its own), so a scenario may script
        // it; across steps it is not.
        let mut ids = std::collections::HashSet::new();
        for (number, messages) in scripts.iter().enumerate() {
            for call in messages.iter().flat_map(AssistantMessage::tool_calls) {
                if !ids.insert(call.call_id.clone()) {
                    return Err(ScenarioError::Invalid(format!(
                        "turns[{number}]: call id `{}` is used in two model answers; call ids must be unique in a session",
                        call.call_id
                    )));
                }
            }
        }
        // Checked before anything is written.
        let shell_policy = self.shell_policy()?;
        let scheduler_config = self.scheduler_config()?;
        let marker_dir = session_dir.join("markers");
        std::fs::create_dir_all(&marker_dir)?;
        let workspace = options
            .workspace
            .clone()
            .unwrap_or_else(|| session_dir.join("workspace"));
        std::fs::create_dir_all(&workspace)?;
        let workspace = std::fs::canonicalize(&workspace)?;
        // Paths are checked before anything is written; the files are written once the
        // session is known to be new (a resumed session's workspace is the agent's work).
        for relative in self
            .workspace
            .files
            .keys()
            .chain(options.extra_files.keys())
        {
            if Path::new(relative).is_absolute() || relative.split('/').any(|part| part == "..") {
                return Err(ScenarioError::Invalid(format!(
                    "workspace file `{relative}` must stay inside the workspace"
                )));
            }
        }

        if options.model.is_some() && self.turns.iter().any(|turn| !turn.model.is_empty()) {
            return Err(ScenarioError::Invalid(
                "a scenario run with a model of its own must script no model steps".to_owned(),
            ));
        }
        let people = People::new(&self.config, &workspace, options.approvals.clone())?;
        let registry = self.registry(&people, &workspace, session_dir, shell_policy)?;

        let durability = match self.config.durability.as_deref() {
            None | Some("strict") => Durability::Strict,
            Some("batched") => Durability::Batched,
            Some("none") => Durability::None,
            Some(other) => {
                return Err(ScenarioError::Invalid(format!(
                    "durability `{other}`: use strict, batched or none"
                )));
            }
        };
        let place: Arc<dyn SessionPlace> = match &options.place {
            Some(place) => Arc::clone(place),
            None => Arc::new(JsonlPlace::new(session_dir, durability)?),
        };
        let start = SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("scenario"),
            tools: registry.snapshot().manifest(),
            meta: None,
        };
        let Begun { log, earlier } = place.begin(start).await?;
        // Nothing has acted before the first turn: a session whose worker died before it is
        // seeded again.
        let fresh = !earlier
            .iter()
            .any(|event| matches!(event.data, EventData::TurnStart(_)));
        if fresh {
            for (relative, content) in self.workspace.files.iter().chain(&options.extra_files) {
                let path = workspace.join(relative);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(path, content)?;
            }
        }

        let pipeline = Pipeline::builder(log.clone()).config(PipelineConfig {
            cancel_grace: Duration::from_millis(self.config.cancel_grace_ms.unwrap_or(5_000)),
            default_timeout: self.config.default_timeout_ms.map(Duration::from_millis),
            workspace: Some(Arc::from(workspace.as_path())),
            ..PipelineConfig::default()
        });
        let plan_logged = earlier
            .iter()
            .any(|event| matches!(event.data, EventData::PlanMode(_)));
        if plan_logged {
            // A resumed session is in the mode its log ends in.
            PlanMode::from_events(people.plan.switch().clone(), &earlier);
        } else if self.config.plan_mode {
            people.plan.enter(log.as_ref()).await.map_err(|error| {
                ScenarioError::Invalid(format!("could not log entering plan mode: {error}"))
            })?;
        }
        let pipeline = people.install(pipeline, &self.config);
        let scheduler = Scheduler::new(Arc::new(pipeline.build()), scheduler_config);
        let scripted = Arc::new(ScriptedModel::new([]));
        let model: Arc<dyn ModelClient> = match &options.model {
            Some(model) => Arc::clone(model),
            None => scripted.clone(),
        };
        let mut loop_config = LoopConfig::default();
        if let Some(max_steps) = options.max_steps {
            loop_config.max_steps = max_steps;
        }
        let mut agent = AgentLoop::new(registry, scheduler, log.clone(), model, loop_config);
        if !earlier.is_empty() {
            agent = agent.resume(&earlier);
        }
        let planned = place::remaining_turns(&self.turns, scripts, &earlier);
        let outside = options.cancel.clone().unwrap_or_default();
        let mut turn_ends = Vec::new();
        for turn in planned {
            scripted.load(turn.script);
            let cancel = outside.child_token();
            if let Some(ms) = turn.cancel_after_ms {
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    cancel.cancel();
                });
            }
            turn_ends.push(
                agent
                    .run_turn(
                        vec![ContentBlock::text(&turn.user)],
                        cancel,
                        options
                            .live
                            .clone()
                            .map(|tx| Arc::new(tx) as toolrail_agent_loop::Live),
                    )
                    .await?,
            );
        }
        drop(agent);
        // Everything the run appended is in the file before it is checked.
        log.barrier().await.map_err(|error| {
            ScenarioError::Invalid(format!("the session log could not be synced: {error}"))
        })?;
        let mismatches = match &self.expect {
            Some(expect) => expect.check(&place.read()?),
            None => Vec::new(),
        };
        Ok(ScenarioReport {
            log_path: place.file(),
            earlier_events: earlier.len(),
            marker_dir,
            turn_ends,
            mismatches,
        })
    }

    /// How the scenario's batches run; a `max_parallel` of 0 is refused.
    fn scheduler_config(&self) -> Result<SchedulerConfig, ScenarioError> {
        let mut config = SchedulerConfig {
            stop_batch_on_reject: self.config.stop_batch_on_reject.unwrap_or(true),
            ..SchedulerConfig::default()
        };
        if let Some(max_parallel) = self.config.max_parallel {
            config = config.with_max_parallel(max_parallel)?;
        }
        Ok(config)
    }

    /// The scenario's tools, as a session would see them, for a workspace (to list them).
    pub fn tools(&self, workspace: &Path, session_dir: &Path) -> Result<Registry, ScenarioError> {
        let workspace = &absolute("workspace", workspace)?;
        let people = People::new(&self.config, workspace, None)?;
        self.registry(
            &people,
            workspace,
            &absolute("session folder", session_dir)?,
            self.shell_policy()?,
        )
    }

    /// `bash`'s configured mode and its rules per command.
    fn shell_policy(&self) -> Result<(SandboxMode, Vec<ModeRule>), ScenarioError> {
        let mode = sandbox_mode(self.config.sandbox.as_deref(), "config.sandbox")?;
        let rules = self
            .config
            .sandbox_rules
            .iter()
            .enumerate()
            .map(|(at, rule)| {
                let field = format!("config.sandbox_rules[{at}].mode");
                let mode = sandbox_mode(Some(&rule.mode), &field)?;
                ModeRule::new(rule.command.clone(), mode).map_err(|error| {
                    ScenarioError::Invalid(format!("config.sandbox_rules[{at}]: {error}"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((mode, rules))
    }

    fn registry(
        &self,
        people: &People,
        workspace: &Path,
        session_dir: &Path,
        (sandbox, sandbox_rules): (SandboxMode, Vec<ModeRule>),
    ) -> Result<Registry, ScenarioError> {
        let marker_dir = session_dir.join("markers");
        let roots = WorkspaceRoots::new([workspace.to_path_buf()])
            .map_err(|error| ScenarioError::Invalid(error.to_string()))?;
        // What tools never read or change: the user's credentials, the session's log and its
        // neighbours (the full outputs commands are pointed to stay readable), every `.git`.
        let protected = people.protect(
            ProtectedPaths::for_current_user()
                .hide(session_dir)
                .show_read_only(session_dir.join("outputs")),
        )?;
        let files = FileTools::new(roots.clone()).with_protected(protected.clone());
        let mut builder = RegistryBuilder::new();
        for name in &self.toolset {
            builder = match name.as_str() {
                "read" | "write" | "edit" | "glob" | "grep" => {
                    match files
                        .tools()
                        .into_iter()
                        .find(|tool| tool.spec().name() == name)
                    {
                        Some(tool) => builder.builtin(tool),
                        None => builder,
                    }
                }
                "bash" => {
                    let mut shell = ShellConfig::new(roots.clone(), session_dir.join("outputs"));
                    shell.protected = protected.clone();
                    shell.mode = sandbox;
                    shell.mode_rules = sandbox_rules.clone();
                    shell.grace =
                        Duration::from_millis(self.config.cancel_grace_ms.unwrap_or(2_000));
                    builder.builtin(Typed::new(BashTool::new(shell)))
                }
                "probe" => builder.builtin(Probe::new(Some(marker_dir.clone()))),
                "probe_idem" => builder.builtin(Probe::idempotent(Some(marker_dir.clone()))),
                "todo_write" => builder.builtin(Typed::new(TodoWriteTool::new(TodoBoard::new()))),
                "ask_user" => builder.builtin(Typed::new(AskUser::new(people.questions.clone()))),
                other => {
                    return Err(ScenarioError::Invalid(format!(
                        "unknown tool `{other}` in toolset; known: probe, probe_idem, todo_write, ask_user, read, write, edit, glob, grep, bash (exit_plan_mode joins with plan_mode)"
                    )));
                }
            };
        }
        if self.config.plan_mode {
            builder = builder.builtin(people.plan.exit_tool());
        }
        let (registry, _) = builder.build()?;
        Ok(registry)
    }
}

fn assistant_message(step: &ModelStep) -> Result<AssistantMessage, ScenarioError> {
    let stop_reason = match step.stop_reason.as_str() {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolCalls,
        "length" => StopReason::Length,
        other => {
            return Err(ScenarioError::Invalid(format!(
                "stop_reason `{other}`: use end_turn, tool_use or length"
            )));
        }
    };
    let mut blocks: Vec<AssistantBlock> = step
        .text
        .iter()
        .map(|text| AssistantBlock::Text { text: text.clone() })
        .collect();
    blocks.extend(step.tool_calls.iter().map(|call| AssistantBlock::ToolCall {
        call_id: CallId::new(&call.id),
        name: call.name.clone(),
        arguments_raw: call.arguments.clone(),
    }));
    Ok(AssistantMessage {
        blocks,
        stop_reason,
    })
}
