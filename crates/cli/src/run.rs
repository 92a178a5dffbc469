//! `toolrail run`: a session on the real runtime, shown live, summarised, and optionally
//! written as a page or as JSON. Either a scripted one (`--scenario FILE`, the testkit's
//! scenario format) or a real model's (`--provider openai|anthropic --model NAME --prompt
//! TEXT`) with the shipped tools, a permission preset (default `untrusted`) and approvals
//! asked on the terminal (no terminal: nobody to ask, so asking means no).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use toolrail_interaction::TerminalApprovals;
use toolrail_permissions::{Preset, RuleFile};
use toolrail_presenters::{Card, colour_wanted};
use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, Wire};
use toolrail_session_log::{AssistantBlock, Durability, Event, EventData, JsonlStore, SessionId};
use toolrail_testkit::{RunOptions, Scenario, ScenarioError, ScenarioReport};

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
    let mut options = RunOptions::default();
    let mut scenario = match (&args.scenario, args.provider) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
            Scenario::from_json(&text).map_err(|error| bad_input!("{}: {error}", path.display()))?
        }
        (None, Some(provider)) => provider_session(&args, provider, &mut options)?,
        (None, None) => return Err(bad_input!("give --scenario FILE or --provider")),
    };
    if let (Some(url), Some(path)) = (&args.store, &args.scenario) {
        // The queue and other workers get the file's own text: a worker reads it as is.
        let payload = std::fs::read_to_string(path)
            .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
        return crate::worker::run_stored(url, args.session.clone(), &payload, args.enqueue);
    }
    if let Some(toolset) = args.toolset {
        scenario.toolset = toolset;
    }
    if let Some(rules) = &args.rules {
        scenario.config.permissions = Some(rule_file(rules)?);
    }
    if let Some(out) = &args.html {
        writable_target(out)?;
    }
    let session_dir = match args.session_dir {
        Some(dir) => absolute_dir("--session-dir", &dir)?,
        None => fresh_dir("run")?,
    };
    options.workspace = match (args.workspace, args.provider) {
        (Some(workspace), _) => Some(absolute_dir("--workspace", &workspace)?),
        (None, Some(_)) => Some(std::env::current_dir()?),
        (None, None) => None,
    };
    let finished = execute(&scenario, &session_dir, options, args.json)?;
    if let Some(out) = &args.html {
        write_page(out, &session_title(&finished.events), &finished.events)?;
    }
    let summary = summary_of(&finished.events);
    if args.json {
        let report = json!({
            "log": finished.log,
            "turn_ends": finished.report.turn_ends,
            "summary": summary,
            "mismatches": finished.report.mismatches,
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
    expectations_met(&finished.report)
}

/// The session a real model drives: the shipped tools, the preset (or the rule file given),
/// the terminal as approver, and one turn with the prompt.
fn provider_session(
    args: &RunArgs,
    provider: ProviderArg,
    options: &mut RunOptions,
) -> Result<Scenario> {
    let wire = match provider {
        ProviderArg::Openai => Wire::OpenAi,
        ProviderArg::Anthropic => Wire::Anthropic,
    };
    let base_url = args.base_url.clone().unwrap_or_else(|| {
        match wire {
            Wire::OpenAi => "https://api.openai.com/v1",
            Wire::Anthropic => "https://api.anthropic.com",
        }
        .to_owned()
    });
    let model = args.model.clone().unwrap_or_default();
    let mut config = ProviderConfig::new(wire, base_url, model);
    if let Some(name) = &args.api_key_env {
        if std::env::var_os(name).is_none_or(|key| key.is_empty()) {
            return Err(bad_input!(
                "--api-key-env {name}: the variable is not set; export it with the key"
            ));
        }
        config.api_key = ApiKey::Env(name.clone());
    }
    if args.strict && wire == Wire::Anthropic {
        return Err(bad_input!(
            "--strict is OpenAI's strict mode; the anthropic format has none"
        ));
    }
    config.strict = args.strict;
    let client = ProviderClient::new(config)
        .map_err(|error| anyhow::anyhow!("the model client could not be made: {error}"))?;
    if !Preset::ALL
        .iter()
        .any(|preset| preset.as_str() == args.preset)
    {
        let known: Vec<&str> = Preset::ALL.iter().map(|preset| preset.as_str()).collect();
        return Err(bad_input!(
            "--preset {}: use one of {}",
            args.preset,
            known.join(", ")
        ));
    }
    options.model = Some(Arc::new(client));
    options.approvals = Some(Arc::new(TerminalApprovals::stdio()));
    options.max_steps = Some(args.max_steps);
    let scenario = json!({
        "toolset": ["read", "write", "edit", "glob", "grep", "bash", "todo_write"],
        "config": {"permissions": {"preset": args.preset}},
        "turns": [{"user": args.prompt.clone().unwrap_or_default(), "model": []}],
    });
    Scenario::from_json(&scenario.to_string()).map_err(|error| anyhow::anyhow!("{error}"))
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

/// A rule file, checked with its name and line in errors, as the scenario's JSON shape.
fn rule_file(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
    let name = path.display().to_string();
    let toml = path
        .extension()
        .is_some_and(|extension| extension == "toml");
    if toml {
        RuleFile::from_toml(&text, &name).map_err(|error| bad_input!("{error}"))?;
        toml::from_str(&text).map_err(|error| bad_input!("{name}: {error}"))
    } else {
        RuleFile::from_json(&text, &name).map_err(|error| bad_input!("{error}"))?;
        serde_json::from_str(&text).map_err(|error| bad_input!("{name}: {error}"))
    }
}

/// A run's outcome: what the scenario runner reports, the log's events, and the cards shown.
pub struct Finished {
    pub report: ScenarioReport,
    /// The session log's file.
    pub log: PathBuf,
    pub events: Vec<Event>,
    pub cards: Vec<Card>,
}

/// Runs `scenario` with the live view (quiet when `machine`), then reads its log back.
pub fn execute(
    scenario: &Scenario,
    session_dir: &Path,
    mut options: RunOptions,
    machine: bool,
) -> Result<Finished> {
    std::fs::create_dir_all(session_dir)
        .with_context(|| format!("creating {}", session_dir.display()))?;
    let store = JsonlStore::new(session_dir, Durability::Strict)?;
    let log = store.path_of(&SessionId::new("scenario"))?;
    let terminal = std::io::stdout().is_terminal();
    let style = LiveStyle {
        terminal,
        colour: colour_wanted(terminal),
        quiet: machine,
    };
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    options.live = Some(sender);
    if log.exists() {
        return Err(bad_input!(
            "{} already holds a session ({}); give an empty --session-dir",
            session_dir.display(),
            log.display()
        ));
    }
    let runtime = runtime()?;
    let id = SessionId::new("scenario");
    let (report, cards) = runtime.block_on(async {
        let watching = tokio::spawn(follow(receiver, store.clone(), id, style));
        let report = scenario.run_with(session_dir, options).await;
        (report, watching.await)
    });
    let report = report.map_err(|error| match error {
        ScenarioError::Invalid(why) => bad_input!("the scenario is not valid: {why}"),
        invalid @ ScenarioError::Scheduler(_) => bad_input!("{invalid}"),
        ScenarioError::Registry(why) => bad_input!("the scenario's tool set: {why}"),
        ScenarioError::Workspace(why) => {
            bad_input!("the workspace could not be prepared: {why}; give a writable folder")
        }
        other @ (ScenarioError::Store(_) | ScenarioError::Loop(_)) => anyhow::Error::new(other),
    })?;
    let cards = cards.context("the live view failed")?;
    let events = store.read(&SessionId::new("scenario"))?.events;
    Ok(Finished {
        report,
        log,
        events,
        cards,
    })
}

/// A run that differs from its scenario's `expect` fails (exit 1), naming each difference.
pub fn expectations_met(report: &ScenarioReport) -> Result<()> {
    if report.mismatches.is_empty() {
        return Ok(());
    }
    for mismatch in &report.mismatches {
        eprintln!("expected otherwise: {mismatch}");
    }
    anyhow::bail!(
        "the run differs from the scenario's expectations in {} ways",
        report.mismatches.len()
    )
}
