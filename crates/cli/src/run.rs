//! `toolrail run --scenario FILE`: a scripted session (the testkit's scenario format) on the
//! real runtime, shown live, summarised, and optionally written as a page or as JSON.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::json;
use toolrail_permissions::RuleFile;
use toolrail_presenters::{Card, colour_wanted};
use toolrail_session_log::{Durability, Event, JsonlStore, SessionId};
use toolrail_testkit::{RunOptions, Scenario, ScenarioError, ScenarioReport};

use crate::live::{LiveStyle, follow};
use crate::session::{summary_of, write_page};
use crate::{bad_input, fresh_dir, runtime, sandbox_helper};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The scenario file (JSON, the testkit's scenario format).
    #[arg(long)]
    scenario: PathBuf,
    /// Where the session log, outputs and markers go (default: a fresh temp folder).
    #[arg(long)]
    session_dir: Option<PathBuf>,
    /// The workspace the tools work in (default: `<session-dir>/workspace`).
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
}

pub fn run(args: RunArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.scenario)
        .map_err(|error| bad_input!("cannot read {}: {error}", args.scenario.display()))?;
    let mut scenario = Scenario::from_json(&text)
        .map_err(|error| bad_input!("{}: {error}", args.scenario.display()))?;
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
        Some(dir) => dir,
        None => fresh_dir("run")?,
    };
    let options = RunOptions {
        workspace: args.workspace,
        ..RunOptions::default()
    };
    let finished = execute(&scenario, &session_dir, options, args.json)?;
    if let Some(out) = &args.html {
        write_page(out, "toolrail session", &finished.events)?;
    }
    let summary = summary_of(&finished.events);
    if args.json {
        let report = json!({
            "log": finished.report.log_path,
            "turn_ends": finished.report.turn_ends,
            "summary": summary,
            "mismatches": finished.report.mismatches,
            "page": args.html,
            "cards": finished.cards,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("\n{}", summary.line());
        println!("log: {}", finished.report.log_path.display());
        if let Some(out) = &args.html {
            println!("page: {}", out.display());
        }
    }
    expectations_met(&finished.report)
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
    if options.sandbox_helper.is_none() {
        options.sandbox_helper = sandbox_helper();
    }
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
