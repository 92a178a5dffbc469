//! `toolrail run`: a session on the runtime, shown live, summarised, and optionally written
//! as a page or as JSON. Either a scripted one (`--scenario FILE`, docs/scenarios.md) or a
//! real model's (`--provider openai|anthropic --model NAME --prompt TEXT`): an `Agent` with
//! the shipped tools, a permission preset (default `untrusted`) and approvals asked on the
//! terminal (no terminal: nobody to ask, so asking means no).

use std::future::Future;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use toolrail_agent_loop::Live;
use toolrail_interaction::TerminalApprovals;
use toolrail_permissions::RuleFile;
use toolrail_presenters::{Card, colour_wanted};
use toolrail_runtime::scenario::{RunOptions, SCENARIO_SESSION, Scenario, ScenarioError};
use toolrail_runtime::{
    Agent, BuildError, ModelConfig, PermissionsConfig, PresetName, ProviderName, SessionConfig,
};
use toolrail_session_log::{AssistantBlock, Durability, Event, EventData, JsonlStore, SessionId};

use crate::live::{LiveStyle, follow};
use crate::session::{session_title, summary_of, write_page};
use crate::{absolute_dir, bad_input, fresh_dir, runtime};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["scenario", "provider"])))]
pub struct RunArgs {
    /// The scenario file (JSON, the testkit's scenario format).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// A real model's wire format: `openai` (OpenAI-compatible chat completions: OpenAI,
    /// DeepSeek, vLLM, llama.cpp, Ollama) or `anthropic`.
    #[arg(long, value_enum, requires_all = ["model", "prompt"])]
    provider: Option<ProviderArg>,
    /// The server's base URL (default: OpenAI's or Anthropic's own API).
    #[arg(long, requires = "provider")]
    base_url: Option<String>,
    /// The model's name on the server.
    #[arg(long, requires = "provider")]
    model: Option<String>,
    /// The environment variable holding the API key (default: OPENAI_API_KEY or
    /// ANTHROPIC_API_KEY, if set). The key is never printed or logged.
    #[arg(long, requires = "provider")]
    api_key_env: Option<String>,
    /// The user's message.
    #[arg(long, requires = "provider")]
    prompt: Option<String>,
    /// The permission preset: untrusted (read-only tools run, the rest asks), workspace,
    /// never-ask, full-auto.
    #[arg(long, requires = "provider", default_value = "untrusted")]
    preset: String,
    /// The most model requests the turn may make.
    #[arg(long, requires = "provider", default_value_t = 25)]
    max_steps: u32,
    /// OpenAI strict mode: schemas adapted so the server holds the model to them.
    #[arg(long, requires = "provider")]
    strict: bool,
    /// Where the session log, outputs and markers go (default: a fresh temp folder).
    #[arg(long)]
    session_dir: Option<PathBuf>,
    /// The workspace the tools work in (default: `<session-dir>/workspace` for a scenario,
    /// the current folder for a provider).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Replace the scenario's tool set, e.g. `probe,todo_write` or `read,grep,bash`.
    #[arg(long, value_delimiter = ',')]
    toolset: Option<Vec<String>>,
    /// Permission rules (TOML or JSON rule file) replacing the scenario's.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Write the session page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print a machine-readable summary instead of cards.
    #[arg(long)]
    json: bool,
    /// Log the session in a PostgreSQL store (`postgres://…`) under a lease, instead of a
    /// session folder; the scenario file is run as written.
    #[arg(long, requires = "scenario", conflicts_with_all = ["session_dir", "toolset", "rules", "html", "json", "workspace"])]
    store: Option<String>,
    /// The session's name in the store (default: `run-<time>-<pid>`).
    #[arg(long, requires = "store")]
    session: Option<String>,
    /// Put the session in the store's queue for `toolrail worker` instead of driving it.
    #[arg(long, requires = "store")]
    enqueue: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProviderArg {
    Openai,
    Anthropic,
}

pub fn run(args: RunArgs) -> Result<()> {
    if let (Some(url), Some(path)) = (&args.store, &args.scenario) {
        // The queue and other workers get the file's own text: a worker reads it as is.
        let payload = std::fs::read_to_string(path)
            .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
        Scenario::from_json(&payload).map_err(|error| bad_input!("{}: {error}", path.display()))?;
        return crate::worker::run_stored(url, args.session.clone(), &payload, args.enqueue);
    }
    if let Some(out) = &args.html {
        writable_target(out)?;
    }
    let session_dir = match &args.session_dir {
        Some(dir) => absolute_dir("--session-dir", dir)?,
        None => fresh_dir("run")?,
    };
    let finished = match (&args.scenario, args.provider) {
        (Some(path), _) => {
            let scenario = scenario_of(&args, path)?;
            let workspace = match &args.workspace {
                Some(workspace) => Some(absolute_dir("--workspace", workspace)?),
                None => None,
            };
            let options = RunOptions {
                workspace,
                ..RunOptions::default()
            };
            execute_scenario(&scenario, &session_dir, args.json, options)?
        }
        (None, Some(provider)) => {
            let config = provider_config(&args, provider, &session_dir)?;
            let prompt = args.prompt.clone().unwrap_or_default();
            execute(&session_dir, args.json, |live| async move {
                let agent = Agent::builder()
                    .config(config)
                    .session_id(SCENARIO_SESSION)
                    .approvals(Arc::new(TerminalApprovals::stdio()))
                    .live(live)
                    .build()
                    .await
                    .map_err(build_error)?;
                let answer = agent.prompt(prompt).await?;
                Ok((vec![answer.end], Vec::new()))
            })?
        }
        (None, None) => return Err(bad_input!("give --scenario FILE or --provider")),
    };
    if let Some(out) = &args.html {
        write_page(out, &session_title(&finished.events), &finished.events)?;
    }
    let summary = summary_of(&finished.events);
    if args.json {
        let report = json!({
            "log": finished.log,
            "turn_ends": finished.turn_ends,
            "summary": summary,
            "mismatches": finished.mismatches,
            "page": args.html,
            "cards": finished.cards,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if args.provider.is_some() {
            print_answer(&finished.events);
        }
        println!("\n{}", summary.line());
        println!("log: {}", finished.log.display());
        if let Some(out) = &args.html {
            println!("page: {}", out.display());
        }
    }
    expectations_met(&finished.mismatches)
}

/// The scenario file, with the tool set and rule file the flags give instead of its own.
fn scenario_of(args: &RunArgs, path: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
    let mut scenario =
        Scenario::from_json(&text).map_err(|error| bad_input!("{}: {error}", path.display()))?;
    if let Some(toolset) = &args.toolset {
        scenario.config.tools.enabled.clone_from(toolset);
        scenario
            .config
            .tools
            .deferred
            .retain(|name| toolset.contains(name));
    }
    if let Some(rules) = &args.rules {
        // Checked now, with its name and line in the error, before anything is written.
        RuleFile::load(rules).map_err(|error| bad_input!("{error}"))?;
        scenario.config.permissions = PermissionsConfig {
            file: Some(absolute_dir("--rules", rules)?),
            plan_mode: scenario.config.permissions.plan_mode,
            ..PermissionsConfig::default()
        };
    }
    Ok(scenario)
}

/// The session a real model drives: the shipped tools in the workspace (default: the
/// current folder), the preset, the model the flags name, the log in the session folder.
fn provider_config(
    args: &RunArgs,
    provider: ProviderArg,
    session_dir: &Path,
) -> Result<SessionConfig> {
    let preset: PresetName = serde_json::from_value(json!(args.preset)).map_err(|_| {
        bad_input!(
            "--preset {}: use one of untrusted, workspace, never-ask, full-auto",
            args.preset
        )
    })?;
    let provider = match provider {
        ProviderArg::Openai => ProviderName::Openai,
        ProviderArg::Anthropic => ProviderName::Anthropic,
    };
    let mut model = ModelConfig::new(provider, args.model.clone().unwrap_or_default());
    model.base_url.clone_from(&args.base_url);
    model.api_key_env.clone_from(&args.api_key_env);
    model.strict = args.strict;
    let mut config = SessionConfig::default();
    config.workspace.roots = vec![match &args.workspace {
        Some(workspace) => absolute_dir("--workspace", workspace)?,
        None => std::env::current_dir()?,
    }];
    config.permissions.preset = Some(preset);
    config.model = Some(model);
    config.limits.max_steps = args.max_steps;
    config.store.url = format!("jsonl:{}", session_dir.display());
    config
        .validate()
        .map_err(|error| bad_input!("{}", flag_error(&error.to_string())))?;
    Ok(config)
}

/// A configuration error as the flags that set the field name it.
fn flag_error(message: &str) -> String {
    message
        .replace("`model.strict`", "--strict")
        .replace("`model.api_key_env`", "--api-key-env")
        .replace("`model.base_url`", "--base-url")
        .replace("`model.model`", "--model")
        .replace("`limits.max_steps`", "--max-steps")
}

/// A scenario that cannot run because of what it (or a flag) says is bad input (exit 2);
/// a store or a turn that failed inside is not.
fn scenario_error(error: ScenarioError) -> anyhow::Error {
    match error {
        ScenarioError::Invalid(why) => bad_input!("the scenario is not valid: {why}"),
        ScenarioError::Build(error) => build_error(error),
        ScenarioError::Workspace(why) => {
            bad_input!("the workspace could not be prepared: {why}; give a writable folder")
        }
        ScenarioError::Turn(error) => anyhow::Error::new(error),
    }
}

fn build_error(error: BuildError) -> anyhow::Error {
    match error {
        invalid @ (BuildError::Config(_)
        | BuildError::NoModel
        | BuildError::NotBuilt { .. }
        | BuildError::Registry(_)) => bad_input!("{}", flag_error(&invalid.to_string())),
        other @ (BuildError::Store(_) | BuildError::Session(_) | BuildError::Model(_)) => {
            anyhow::Error::new(other)
        }
    }
}

/// What the model said last, after its calls' cards.
fn print_answer(events: &[Event]) {
    let answer = events.iter().rev().find_map(|event| {
        let EventData::AssistantMessage(message) = &event.data else {
            return None;
        };
        Some(
            message
                .blocks
                .iter()
                .filter_map(|block| match block {
                    AssistantBlock::Text { text } => Some(text.as_str()),
                    AssistantBlock::Thinking { .. } | AssistantBlock::ToolCall { .. } => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        )
    });
    if let Some(answer) = answer.filter(|answer| !answer.trim().is_empty()) {
        println!("\nassistant: {}", answer.trim());
    }
}

/// Refuses, before anything runs, an output path whose folder does not exist.
pub fn writable_target(out: &Path) -> Result<()> {
    let folder = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if folder.is_dir() {
        Ok(())
    } else {
        Err(bad_input!(
            "{}: the folder {} does not exist",
            out.display(),
            folder.display()
        ))
    }
}

/// A run's outcome: how its turns ended, how it differed from what was expected, the log's
/// events, and the cards shown.
pub struct Finished {
    pub turn_ends: Vec<toolrail_session_log::TurnEndKind>,
    pub mismatches: Vec<String>,
    /// The session log's file.
    pub log: PathBuf,
    pub events: Vec<Event>,
    pub cards: Vec<Card>,
}

/// What driving a session came to: its turns' ends, and how it differed from expectations.
pub type Driven = (Vec<toolrail_session_log::TurnEndKind>, Vec<String>);

/// Drives the session `drive` makes (it is given the live view's sink; its log must be
/// `<session_dir>/scenario.jsonl`), with the live view (quiet when `machine`), then reads
/// its log back.
pub fn execute<F, Fut>(session_dir: &Path, machine: bool, drive: F) -> Result<Finished>
where
    F: FnOnce(Live) -> Fut,
    Fut: Future<Output = Result<Driven>>,
{
    std::fs::create_dir_all(session_dir)
        .with_context(|| format!("creating {}", session_dir.display()))?;
    let store = JsonlStore::new(session_dir, Durability::Strict)?;
    let id = SessionId::new(SCENARIO_SESSION);
    let log = store.path_of(&id)?;
    if log.exists() {
        return Err(bad_input!(
            "{} already holds a session ({}); give an empty --session-dir",
            session_dir.display(),
            log.display()
        ));
    }
    let terminal = std::io::stdout().is_terminal();
    let style = LiveStyle {
        terminal,
        colour: colour_wanted(terminal),
        quiet: machine,
    };
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let runtime = runtime()?;
    let (driven, cards) = runtime.block_on(async {
        let watching = tokio::spawn(follow(receiver, store.clone(), id.clone(), style));
        let driven = drive(Arc::new(sender)).await;
        (driven, watching.await)
    });
    let (turn_ends, mismatches) = driven?;
    let cards = cards.context("the live view failed")?;
    let events = store.read(&id)?.events;
    Ok(Finished {
        turn_ends,
        mismatches,
        log,
        events,
        cards,
    })
}

/// Runs `scenario` in `session_dir` with `options` and the live view (see [`execute`]).
pub fn execute_scenario(
    scenario: &Scenario,
    session_dir: &Path,
    machine: bool,
    mut options: RunOptions,
) -> Result<Finished> {
    execute(session_dir, machine, |live| async move {
        options.live = Some(live);
        let report = scenario
            .run_with(session_dir, options)
            .await
            .map_err(scenario_error)?;
        Ok((report.turn_ends, report.mismatches))
    })
}

/// A run that differs from its scenario's `expect` fails (exit 1), naming each difference.
pub fn expectations_met(mismatches: &[String]) -> Result<()> {
    if mismatches.is_empty() {
        return Ok(());
    }
    for mismatch in mismatches {
        eprintln!("expected otherwise: {mismatch}");
    }
    anyhow::bail!(
        "the run differs from the scenario's expectations in {} ways",
        mismatches.len()
    )
}
