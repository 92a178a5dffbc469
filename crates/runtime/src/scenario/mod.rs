//! Scenarios: a whole session as JSON — a [`SessionConfig`], the workspace's files, the
//! people's scripted answers, and per turn the user's message and the model's scripted
//! answers — run by the runtime like any session, with what the run must produce
//! (docs/scenarios.md). Unknown fields are errors that name the field.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use toolrail_runtime::scenario::Scenario;
//! let scenario = Scenario::from_json(r#"{
//!     "config": {"tools": {"enabled": ["glob"]}},
//!     "workspace": {"files": {"a.txt": "hello"}},
//!     "turns": [{"user": "List the files.", "model": [
//!         {"tool_calls": [{"id": "c1", "name": "glob", "arguments": "{\"pattern\": \"*.txt\"}"}],
//!          "stop_reason": "tool_use"},
//!         {"text": "One file.", "stop_reason": "end_turn"}
//!     ]}],
//!     "expect": {"results": {"c1": "ok"}}
//! }"#)?;
//! let folder = tempfile::tempdir()?;
//! let report = scenario.run(folder.path()).await?;
//! assert!(report.mismatches.is_empty(), "{:?}", report.mismatches);
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

mod expect;
mod fault;
mod turns;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toolrail_agent_loop::{Live, ModelClient};
use toolrail_interaction::{QuestionOutcome, ScriptedApprovals, ScriptedQuestions};
use toolrail_session_log::{
    CallId, ContentBlock, Event, EventData, SessionId,
    event::{AssistantBlock, AssistantMessage, StopReason, TurnEndKind},
};
use toolrail_tools_core::{ApprovalAnswer, ApprovalService, CancellationToken, Tool};

pub use expect::Expectations;
pub use fault::Fault;
/// The scripted model scenarios run on (from the agent loop).
pub use toolrail_agent_loop::ScriptedModel;
pub use turns::RESUME_MESSAGE;

use crate::agent::{AgentError, Source};
use crate::config::{SessionConfig, StoreConfig};
use crate::store::Store;
use crate::{Agent, BuildError};

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The session, as a `toolrail.toml` describes it (in JSON). Its workspace and store
    /// are the run's: `<folder>/workspace` and `<folder>/scenario.jsonl` unless the run
    /// says otherwise.
    #[serde(default)]
    pub config: SessionConfig,
    /// What the workspace holds before the first turn.
    #[serde(default)]
    pub workspace: WorkspaceSpec,
    /// The approver's answers, in order: `allowed_once`, `allowed_for_session` (for the
    /// key the request offers), `rejected`, `cancelled`, `expired`, `unavailable`; once
    /// they run out the service is unavailable. Absent: no approval service at all, so
    /// every call that asks is `APPROVAL_UNAVAILABLE`.
    #[serde(default)]
    pub approvals: Option<Vec<String>>,
    /// Answers for `ask_user`, in order: text, or `null` for a question that expires.
    #[serde(default)]
    pub questions: Vec<Option<String>>,
    /// The session's turns, in order (required).
    pub turns: Vec<TurnSpec>,
    /// What the run must produce; a run that differs reports each difference.
    pub expect: Option<Expectations>,
}

/// A scenario's `workspace`: the files it is seeded with.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSpec {
    /// Relative path → content, written before the session's first turn.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// One turn of a scenario: the user's message and the model's scripted answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSpec {
    /// The user's message that starts the turn.
    pub user: String,
    /// Cancel the turn this long after it starts.
    pub cancel_after_ms: Option<u64>,
    /// The model's answers to the turn's requests, in order.
    #[serde(default)]
    pub model: Vec<ModelStep>,
}

/// One scripted answer of the model.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelStep {
    /// The answer's tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    /// The answer's text, before its calls; `None`: the answer has no text.
    pub text: Option<String>,
    /// `end_turn`, `tool_use` or `length`.
    pub stop_reason: String,
}

/// One tool call of a scripted answer.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// The call's id: it names one call in the session, so two answers may not share it
    /// (a repeat within one answer is the model's mistake the runtime handles).
    pub id: String,
    /// The tool called, by its name in the session.
    pub name: String,
    /// The raw argument text, exactly as a model would send it.
    pub arguments: String,
}

/// Where a scenario's session lives.
#[derive(Clone, Debug, Default)]
pub enum ScenarioPlace {
    /// `<folder>/scenario.jsonl`, a new session (the default).
    #[default]
    Folder,
    /// Session `id` of `store`: resumed from its log when the store holds it already.
    Store {
        /// The store that holds the session, or will.
        store: Store,
        /// The session's id in `store`.
        id: SessionId,
    },
    /// A session of a PostgreSQL store under a lease (the fleet's).
    #[cfg(feature = "postgres")]
    Leased {
        /// The PostgreSQL store that holds the session.
        store: Store,
        /// The lease the session is driven under; every append is fenced by its token.
        lease: toolrail_session_store::Lease,
    },
}

/// How a scenario is run, beyond what its file says.
#[derive(Default)]
pub struct RunOptions {
    /// The scheduler's live events (prepared, started, progress, finished, committed).
    pub live: Option<Live>,
    /// The workspace folder (default: `<folder>/workspace`).
    pub workspace: Option<PathBuf>,
    /// Files written into the workspace before the session, besides the scenario's own.
    pub extra_files: BTreeMap<String, String>,
    /// A model to drive the turns instead of the scenario's scripts (which must then be
    /// empty): a real provider.
    pub model: Option<Arc<dyn ModelClient>>,
    /// An approval service instead of the scenario's scripted answers (a terminal).
    pub approvals: Option<Arc<dyn ApprovalService>>,
    /// Tools the scenario may name in `tools.enabled` beside the catalog's (a test kit's
    /// probes); only the named ones join.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Where the session is logged (default: `<folder>/scenario.jsonl`, new).
    pub place: ScenarioPlace,
    /// Cancels every turn from outside (a worker that lost its lease stops driving).
    pub cancel: Option<CancellationToken>,
}

/// Why a scenario could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file is not a scenario, or names something that cannot be (the message says
    /// where and what to write).
    #[error("the scenario is not valid: {0}")]
    Invalid(String),
    /// The session could not be put together (its configuration, store or tools).
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A turn failed inside (the model, the log); the log says how it ended.
    #[error(transparent)]
    Turn(#[from] AgentError),
    /// The workspace, or one of its seed files, could not be written.
    #[error("writing the workspace: {0}")]
    Workspace(#[from] std::io::Error),
}

/// What a run produced.
#[derive(Debug)]
pub struct ScenarioReport {
    /// The session's id in its store.
    pub session: SessionId,
    /// The log's file, when the store keeps one.
    pub log_path: Option<PathBuf>,
    /// How many events the session held before this run (0 for a new session).
    pub earlier_events: usize,
    /// How each turn this run drove ended, in order. A resumed session's finished turns
    /// are not driven again; an interrupted one goes on as a turn of its own.
    pub turn_ends: Vec<TurnEndKind>,
    /// Every way the run differed from the scenario's `expect` (empty when it matched or
    /// expected nothing).
    pub mismatches: Vec<String>,
    /// Every event the session holds after the run.
    pub events: Vec<Event>,
}

/// The session id of a scenario run in a folder.
pub const SCENARIO_SESSION: &str = "scenario";

impl Scenario {
    /// Reads a scenario from JSON text; an unknown field is an error naming it.
    pub fn from_json(text: &str) -> Result<Self, ScenarioError> {
        let invalid = |error: serde_json::Error| ScenarioError::Invalid(error.to_string());
        let mut reader = serde_json::Deserializer::from_str(text);
        let scenario: Self = serde_path_to_error::deserialize(&mut reader).map_err(|error| {
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
        scenario.config.validate().map_err(|error| {
            ScenarioError::Invalid(match error {
                crate::ConfigError::Invalid { path, message } => {
                    format!("config.{path}: {message}")
                }
                other @ (crate::ConfigError::Field { .. } | crate::ConfigError::Read { .. }) => {
                    other.to_string()
                }
            })
        })?;
        Ok(scenario)
    }

    /// Runs every turn; the log goes to `<folder>/scenario.jsonl`, workspace files to
    /// `<folder>/workspace/`.
    pub async fn run(&self, folder: &Path) -> Result<ScenarioReport, ScenarioError> {
        self.run_with(folder, RunOptions::default()).await
    }

    /// [`Scenario::run`] with live events, another workspace, a model, tools or a place.
    pub async fn run_with(
        &self,
        folder: &Path,
        options: RunOptions,
    ) -> Result<ScenarioReport, ScenarioError> {
        let folder = &absolute("session folder", folder)?;
        // Every model answer is checked before anything is written or run: a mistake in a
        // late turn does not leave a half-run session behind.
        let scripts = self.scripts()?;
        let workspace = match &options.workspace {
            Some(workspace) => absolute("workspace", workspace)?,
            None => folder.join("workspace"),
        };
        let files = self.seed_files(&options.extra_files)?;
        if options.model.is_some() && self.turns.iter().any(|turn| !turn.model.is_empty()) {
            return Err(ScenarioError::Invalid(
                "a scenario run with a model of its own must script no model steps".to_owned(),
            ));
        }
        std::fs::create_dir_all(&workspace)?;
        // Who answers: a model the run was given, the configuration's own when nothing is
        // scripted, or else the scripts.
        let configured = self.config.model.is_some() && scripts.iter().all(Vec::is_empty);
        let scripted =
            (options.model.is_none() && !configured).then(|| Arc::new(ScriptedModel::new([])));
        let model: Option<Arc<dyn ModelClient>> = match (&options.model, &scripted) {
            (Some(model), _) => Some(Arc::clone(model)),
            (None, Some(scripted)) => Some(scripted.clone()),
            (None, None) => None,
        };
        let mut config = self.config.clone();
        config.workspace.roots = vec![workspace.clone()];
        // A store's log, when reading it found the session there (read once).
        let mut recorded = None;
        let source = match options.place {
            ScenarioPlace::Folder => {
                config.store = StoreConfig {
                    url: format!("jsonl:{}", folder.display()),
                    durability: self.config.store.durability,
                };
                let store = Store::from_config(&config.store).map_err(BuildError::from)?;
                Source::New {
                    store,
                    id: SessionId::new(SCENARIO_SESSION),
                }
            }
            ScenarioPlace::Store { store, id } => match store.read(&id) {
                Ok(events) if !events.is_empty() => {
                    recorded = Some(events);
                    Source::Existing { store, id }
                }
                Ok(_) | Err(_) => Source::New { store, id },
            },
            #[cfg(feature = "postgres")]
            ScenarioPlace::Leased { store, lease } => Source::Leased { store, lease },
        };
        let store = source.store().clone();
        let mut builder = Agent::builder().config(config).store(store.clone());
        let named: Vec<&String> = self.config.tools.enabled.iter().collect();
        for tool in options.tools {
            if named.iter().any(|name| name.as_str() == tool.spec().name()) {
                builder = builder.tool(tool);
            }
        }
        if let Some(model) = model {
            builder = builder.model_client(model);
        }
        builder = builder.questions(Arc::new(ScriptedQuestions::new(self.questions.iter().map(
            |answer| match answer {
                Some(text) => QuestionOutcome::Answered(text.clone()),
                None => QuestionOutcome::Expired,
            },
        ))));
        let given = if matches!(source, Source::New { .. }) {
            0
        } else {
            let events = match recorded {
                Some(events) => events,
                None => store.read(source.id()).map_err(BuildError::from)?,
            };
            answers_given(&events)
        };
        if let Some(approvals) = options.approvals.clone().or(self.approvals(given)?) {
            builder = builder.approvals(approvals);
        }
        if let Some(live) = options.live {
            builder = builder.live(live);
        }
        // What stops the turns stops a pending approval asked again on resume too.
        let outside = options.cancel.unwrap_or_default();
        builder = builder.cancel(outside.clone());
        let built = builder.build_in(source).await?;
        let (agent, earlier) = (built.agent, built.earlier);
        // Nothing has acted before the first turn: a session whose worker died before it
        // is seeded again. A resumed session's workspace is the agent's work.
        let fresh = !earlier
            .iter()
            .any(|event| matches!(event.data, EventData::TurnStart(_)));
        if fresh {
            write_files(&workspace, &files)?;
        }
        let planned = turns::remaining_turns(&self.turns, scripts, &earlier);
        let mut turn_ends = Vec::new();
        for turn in planned {
            if let Some(scripted) = &scripted {
                scripted.load(turn.script);
            }
            let cancel = outside.child_token();
            if let Some(ms) = turn.cancel_after_ms {
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    cancel.cancel();
                });
            }
            let answer = agent
                .run_turn(vec![ContentBlock::text(&turn.user)], &cancel)
                .await?;
            turn_ends.push(answer.end);
        }
        let session = agent.session_id().clone();
        drop(agent);
        let events = store.read(&session).map_err(BuildError::from)?;
        let mismatches = match &self.expect {
            Some(expect) => expect.check(&events),
            None => Vec::new(),
        };
        Ok(ScenarioReport {
            log_path: store.file_of(&session),
            session,
            earlier_events: earlier.len(),
            turn_ends,
            mismatches,
            events,
        })
    }

    /// Each turn's scripted answers, checked: stop reasons known, call ids unique in the
    /// session.
    fn scripts(&self) -> Result<Vec<Vec<AssistantMessage>>, ScenarioError> {
        let scripts = self
            .turns
            .iter()
            .enumerate()
            .map(|(number, turn)| {
                turn.model
                    .iter()
                    .enumerate()
                    .map(|(step, answer)| {
                        assistant_message(answer).map_err(|why| {
                            ScenarioError::Invalid(format!("turns[{number}].model[{step}]: {why}"))
                        })
                    })
                    .collect()
            })
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
        Ok(scripts)
    }

    /// The files of `workspace` seeding it for this scenario would replace (there with
    /// other content): check before a run in a folder of the user's, which is refused if
    /// any is.
    pub fn would_replace(&self, workspace: &Path) -> Vec<String> {
        conflicts(workspace, &self.workspace.files)
    }

    /// The files to seed, their paths checked to stay inside the workspace.
    fn seed_files(
        &self,
        extra: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ScenarioError> {
        let mut files = self.workspace.files.clone();
        files.extend(
            extra
                .iter()
                .map(|(path, text)| (path.clone(), text.clone())),
        );
        for relative in files.keys() {
            if Path::new(relative).is_absolute() || relative.split('/').any(|part| part == "..") {
                return Err(ScenarioError::Invalid(format!(
                    "workspace file `{relative}` must stay inside the workspace"
                )));
            }
        }
        Ok(files)
    }

    /// The scripted approver, when the scenario has answers, going on after the `given`
    /// answers a resumed session's log already used.
    fn approvals(&self, given: usize) -> Result<Option<Arc<dyn ApprovalService>>, ScenarioError> {
        let Some(answers) = &self.approvals else {
            return Ok(None);
        };
        let answers = answers
            .iter()
            .enumerate()
            .map(|(at, answer)| {
                parse_answer(answer)
                    .map_err(|why| ScenarioError::Invalid(format!("approvals[{at}]: {why}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Arc::new(ScriptedApprovals::new(
            answers.into_iter().skip(given),
        ))))
    }
}

/// How many scripted answers the session's `events` show used: one for each
/// `approval/decided` the approver gave ([`DecidedBy::Approver`](toolrail_session_log::event::DecidedBy::Approver)) — the scripted approver
/// hands out an answer exactly when it is asked outside a cancelled batch, and the pipeline
/// then logs that answer as the approver's, whatever it is (`expired` and `cancelled` too).
/// A question toolrail closed itself used none: the timeout, a cancelled batch, a panic, a
/// restart past its deadline (`DecidedBy::Toolrail`); a call a session approval covers asks
/// no one and logs no decision. So a resumed run asks the pending call with the answer
/// scripted for it, not the session's first one again.
fn answers_given(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|event| {
            matches!(&event.data, EventData::ApprovalDecided(decided) if decided.by.is_approver())
        })
        .count()
}

/// The seed files `workspace` already has with other content (or as something that is not
/// a file): the ones seeding would replace.
fn conflicts(workspace: &Path, files: &BTreeMap<String, String>) -> Vec<String> {
    files
        .iter()
        .filter(|(relative, content)| {
            let path = workspace.join(relative);
            match std::fs::symlink_metadata(&path) {
                Err(_) => false,
                Ok(metadata) if metadata.is_file() => {
                    std::fs::read(&path).map_or(true, |existing| existing != content.as_bytes())
                }
                // A folder, a link, a device: never written through.
                Ok(_) => true,
            }
        })
        .map(|(relative, _)| relative.clone())
        .collect()
}

/// Writes the seed files; a file that exists with other content is never replaced (the
/// whole set is checked before anything is written).
fn write_files(workspace: &Path, files: &BTreeMap<String, String>) -> Result<(), ScenarioError> {
    if let Some(relative) = conflicts(workspace, files).first() {
        return Err(ScenarioError::Invalid(format!(
            "the workspace already has `{relative}` with other content; the scenario would replace it: give an empty or new workspace"
        )));
    }
    for (relative, content) in files {
        let path = workspace.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}

/// A folder (`what`: the session folder, the workspace) as an absolute path: `bash` runs
/// each command from the workspace, where a relative folder would name another place.
fn absolute(what: &str, folder: &Path) -> Result<PathBuf, ScenarioError> {
    std::path::absolute(folder).map_err(|error| {
        ScenarioError::Invalid(format!(
            "the {what} `{}` cannot be made absolute: {error}",
            folder.display()
        ))
    })
}

fn parse_answer(answer: &str) -> Result<ApprovalAnswer, String> {
    Ok(match answer {
        "allowed_once" => ApprovalAnswer::AllowedOnce,
        // An empty key stands for the key the request offers.
        "allowed_for_session" => ApprovalAnswer::AllowedForSession { key: String::new() },
        "rejected" => ApprovalAnswer::Rejected { reason: None },
        "cancelled" => ApprovalAnswer::Cancelled,
        "expired" => ApprovalAnswer::Expired,
        "unavailable" => ApprovalAnswer::Unavailable,
        other => {
            return Err(format!(
                "`{other}` is not an answer: use allowed_once, allowed_for_session, rejected, cancelled, expired or unavailable"
            ));
        }
    })
}

fn assistant_message(step: &ModelStep) -> Result<AssistantMessage, String> {
    let stop_reason = match step.stop_reason.as_str() {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolCalls,
        "length" => StopReason::Length,
        other => {
            return Err(format!(
                "stop_reason `{other}`: use end_turn, tool_use or length"
            ));
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
