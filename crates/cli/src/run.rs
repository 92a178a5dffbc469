//! `toolrail run`: one session, not interactive, for scripts and CI. Either a real model's
//! turn (`--prompt TEXT` or `--prompt-file F`, with the flags `chat` takes) or a scripted
//! session (`--scenario FILE`, docs/scenarios.md). Shown live, summarised, and optionally
//! written as a page or as JSON (`--json` once at the end, `--json-stream` while running).

use std::future::Future;
use std::io::IsTerminal;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use toolrail_agent_loop::Live;
use toolrail_permissions::RuleFile;
use toolrail_presenters::{Presenters, colour_wanted, parse_arguments};
use toolrail_runtime::scenario::{RunOptions, SCENARIO_SESSION, Scenario, ScenarioError};
use toolrail_runtime::{BuildError, PermissionsConfig};
use toolrail_session_log::{Event, EventData, SessionId, call_records};
use toolrail_session_store::{Durability, JsonlStore};

use crate::chat::{Conversation, human_mode, usage_line};
use crate::console::{Console, Mode};
use crate::flags::{AgentFlags, prompt_text};
use crate::live::{LiveStyle, follow};
use crate::session::{session_title, summary_of, write_page};
use crate::{absolute_dir, bad_input, runs_dir, runtime};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["scenario", "prompt", "prompt_file"])))]
pub(crate) struct RunArgs {
    /// The scenario file (docs/scenarios.md): a scripted session.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// The user's message: one turn with the model the flags or toolrail.toml name.
    #[arg(long)]
    prompt: Option<String>,
    /// The user's message from a file (`-`: stdin).
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    #[command(flatten)]
    flags: AgentFlags,
    /// Where a scenario's log, outputs and workspace go (default: a new folder under
    /// `~/.local/state/toolrail/runs`).
    #[arg(long, requires = "scenario")]
    session_dir: Option<PathBuf>,
    /// Replace the scenario's tool set, e.g. `probe,todo_write` or `read,grep,bash`.
    #[arg(long, value_delimiter = ',', requires = "scenario")]
    toolset: Option<Vec<String>>,
    /// Permission rules (TOML or JSON rule file) replacing the scenario's.
    #[arg(long, requires = "scenario")]
    rules: Option<PathBuf>,
    /// Write the session page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print one machine-readable report at the end instead of cards (docs/cli.md).
    #[arg(long, conflicts_with = "json_stream")]
    json: bool,
    /// Print each event as a JSON line while running, then the report (docs/cli.md).
    #[arg(long)]
    json_stream: bool,
    /// A scenario's name in a PostgreSQL store (default: `run-<time>-<pid>`).
    #[arg(long, requires = "scenario")]
    session: Option<String>,
    /// Put a scenario in a PostgreSQL store's queue for `toolrail worker` instead of driving it.
    #[arg(long, requires = "scenario")]
    enqueue: bool,
}

pub(crate) fn run(args: RunArgs) -> Result<()> {
    if let Some(out) = &args.html {
        writable_target(out)?;
    }
    match &args.scenario {
        Some(path) => run_scenario(&args, path),
        None => run_prompt(&args),
    }
}

/// One turn of a real model.
fn run_prompt(args: &RunArgs) -> Result<()> {
    let prompt = prompt_text(args.prompt.as_deref(), args.prompt_file.as_deref())?
        .ok_or_else(|| bad_input!("give --prompt TEXT or --prompt-file FILE"))?;
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let mut config = args.flags.config()?;
    let approve = args.flags.approvals(terminal, &mut config)?;
    let mode = if args.json {
        Mode::Quiet
    } else if args.json_stream {
        Mode::JsonLines
    } else {
        human_mode()
    };
    runtime()?.block_on(async {
        let mut conversation =
            Conversation::start(config, approve, Console::new(mode), None).await?;
        let outcome = conversation.turn(prompt).await;
        let agent = &conversation.agent;
        let events = agent.store().read(agent.session_id())?;
        if let Some(out) = &args.html {
            write_page(out, &session_title(&events), &events)?;
        }
        let summary = summary_of(&events);
        let end = outcome.result.as_ref().map(|answer| answer.end);
        if args.json || args.json_stream {
            let mut report = report(&events);
            report["type"] = json!("report");
            report["session"] = json!(agent.session_id().as_str());
            report["store"] = json!(agent.store().url());
            report["log"] = json!(agent.store().file_of(agent.session_id()));
            report["page"] = json!(args.html);
            report["end"] = json!(end.as_ref().ok());
            report["error"] = json!(outcome.result.as_ref().err().map(ToString::to_string));
            print_report(&report, args.json)?;
        } else {
            println!("\n{}", summary.line());
            println!("{}", usage_line(&conversation.usage));
            println!(
                "session {} in {}; `{}` goes on with it",
                agent.session_id(),
                agent.store().url(),
                crate::places::resume_hint(agent.store(), agent.session_id())
            );
            if let Some(out) = &args.html {
                println!("page: {}", out.display());
            }
        }
        // Its MCP servers end the MCP way, so they can flush what they keep; the report is
        // out already (stopping them writes nothing to the log).
        conversation.agent.shutdown().await;
        outcome.result.map(|_| ()).map_err(anyhow::Error::new)
    })
}

/// A scripted session.
fn run_scenario(args: &RunArgs, path: &Path) -> Result<()> {
    let flags = &args.flags;
    let ignored = flags_a_scenario_ignores(flags);
    if !ignored.is_empty() {
        return Err(bad_input!(
            "--scenario runs the scenario's own configuration and scripted model; {} {} for --prompt (a scenario sets them in its `config`, docs/scenarios.md; --mcp, --toolset and --rules add to or replace it)",
            ignored.join(", "),
            if ignored.len() == 1 { "is" } else { "are" }
        ));
    }
    if let Some(url) = &flags.store {
        if flags.mcp.is_some() {
            return Err(bad_input!(
                "--mcp with --store: a stored scenario is driven by whichever worker claims it, from the file's own text; put the servers in the scenario's `config.mcp_servers`"
            ));
        }
        // The queue and other workers get the file's own text: a worker reads it as is.
        let payload = std::fs::read_to_string(path)
            .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
        Scenario::from_json(&payload).map_err(|error| bad_input!("{}: {error}", path.display()))?;
        return crate::worker::run_stored(url, args.session.clone(), &payload, args.enqueue);
    }
    let session_dir = match &args.session_dir {
        Some(dir) => absolute_dir("--session-dir", dir)?,
        None => runs_dir("run")?,
    };
    let scenario = scenario_of(args, path)?;
    let workspace = match &flags.workspace {
        Some(workspace) => {
            let workspace = absolute_dir("--workspace", workspace)?;
            // A folder of the user's is never written over: refused before anything runs.
            if let Some(file) = scenario.would_replace(&workspace).first() {
                return Err(bad_input!(
                    "--workspace {}: the scenario would replace `{file}`, which is there with other content; give an empty or new folder",
                    workspace.display()
                ));
            }
            Some(workspace)
        }
        None => None,
    };
    let options = RunOptions {
        workspace,
        ..RunOptions::default()
    };
    let finished = execute_scenario(
        &scenario,
        &session_dir,
        args.json || args.json_stream,
        options,
    )?;
    if let Some(out) = &args.html {
        write_page(out, &session_title(&finished.events), &finished.events)?;
    }
    let summary = summary_of(&finished.events);
    if args.json || args.json_stream {
        let mut report = report(&finished.events);
        report["type"] = json!("report");
        report["session"] = json!(SCENARIO_SESSION);
        report["log"] = json!(finished.log);
        report["turn_ends"] = json!(finished.turn_ends);
        report["mismatches"] = json!(finished.mismatches);
        report["page"] = json!(args.html);
        print_report(&report, args.json)?;
    } else {
        println!("\n{}", summary.line());
        println!("log: {}", finished.log.display());
        if let Some(out) = &args.html {
            println!("page: {}", out.display());
        }
    }
    expectations_met(&finished.mismatches)
}

/// The report: pretty for `--json`, one line (the stream's last) for `--json-stream`.
fn print_report(report: &Value, pretty: bool) -> Result<()> {
    if pretty {
        let text = serde_json::to_string_pretty(report)?;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
    } else {
        crate::console::emit(report);
    }
    Ok(())
}

/// What `--json` reports of a session, from its log: the assistant's words, every call
/// (id, tool, arguments as JSON, outcome, card), the usage of each model request, the
/// summary.
pub(crate) fn report(events: &[Event]) -> Value {
    let records = call_records(events);
    let presenters = Presenters::new();
    let calls: Vec<Value> = records
        .iter()
        .filter(|record| !record.call_id.is_code_sub_call())
        .map(|record| {
            let card = presenters.record_in(record, &records);
            json!({
                "call_id": record.call_id.as_str(),
                "name": record.name,
                "arguments": parse_arguments(&record.arguments_raw),
                "is_error": record.result.as_ref().map(|result| result.is_error()),
                "error": record.result.as_ref().and_then(|result| result.error.as_ref()).map(|error| json!({
                    "code": error.code.to_string(), "message": error.message,
                })),
                "text": record.result.as_ref().map(|result| result.text()),
                "value": record.result.as_ref().and_then(|result| result.value.clone()),
                "card": card,
            })
        })
        .collect();
    let mut messages = Vec::new();
    let mut usage = Vec::new();
    for event in events {
        // Two kinds of the log's whole vocabulary.
        if let EventData::AssistantMessage(message) = &event.data {
            messages.push(message.text());
        } else if let EventData::StepEnd(step) = &event.data {
            usage.push(json!({"step": event.step.map(|step| step.0), "usage": step.usage}));
        }
    }
    let answer = messages.last().cloned().unwrap_or_default();
    json!({
        "answer": answer,
        "messages": messages,
        "calls": calls,
        "usage": usage,
        "summary": summary_of(events),
    })
}

/// The flags given that a scenario has no use for: its configuration and its model are its
/// own. Refused rather than ignored, so no one believes a flag held that did not.
fn flags_a_scenario_ignores(flags: &crate::flags::AgentFlags) -> Vec<&'static str> {
    let given = [
        ("--config", flags.config.is_some()),
        ("--provider", flags.provider.is_some()),
        ("--model", flags.model.is_some()),
        ("--base-url", flags.base_url.is_some()),
        ("--api-key-env", flags.api_key_env.is_some()),
        ("--system", flags.system.is_some()),
        ("--temperature", flags.temperature.is_some()),
        ("--max-steps", flags.max_steps.is_some()),
        ("--request-timeout", flags.request_timeout.is_some()),
        ("--step-timeout", flags.step_timeout.is_some()),
        ("--idle-timeout", flags.idle_timeout.is_some()),
        ("--strict", flags.strict),
        ("--sandbox", flags.sandbox.is_some()),
        ("--code", !flags.code.is_empty()),
        ("--deferred", !flags.deferred.is_empty()),
        ("--preset", flags.preset.is_some()),
        ("--allow", !flags.allow.is_empty()),
        ("--deny", !flags.deny.is_empty()),
        ("--approve", flags.approve.is_some()),
        ("--approvals-listen", flags.approvals_listen.is_some()),
        ("--otlp", flags.otlp),
    ];
    given
        .into_iter()
        .filter_map(|(flag, is_given)| is_given.then_some(flag))
        .collect()
}

/// The scenario file, with the tool set and rule file the flags give instead of its own,
/// and the MCP servers `--mcp` adds to its own.
fn scenario_of(args: &RunArgs, path: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
    let mut scenario =
        Scenario::from_json(&text).map_err(|error| bad_input!("{}: {error}", path.display()))?;
    if let Some(servers) = &args.flags.mcp {
        scenario
            .config
            .mcp_servers
            .extend(crate::mcp::read_config(servers)?.servers);
    }
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

pub(crate) fn build_error(error: BuildError) -> anyhow::Error {
    match error {
        invalid @ (BuildError::Config(_)
        | BuildError::NoModel
        | BuildError::NotBuilt { .. }
        | BuildError::Registry(_)) => {
            bad_input!("{}", crate::flags::flag_error(&invalid.to_string()))
        }
        other @ (BuildError::Store(_)
        | BuildError::Session(_)
        | BuildError::Recovery(_)
        | BuildError::Model(_)) => anyhow::Error::new(other),
    }
}

/// Refuses, before anything runs, an output path whose folder does not exist.
pub(crate) fn writable_target(out: &Path) -> Result<()> {
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
pub(crate) struct Finished {
    pub turn_ends: Vec<toolrail_session_log::event::TurnEndKind>,
    pub mismatches: Vec<String>,
    /// The session log's file.
    pub log: PathBuf,
    pub events: Vec<Event>,
}

/// What driving a session came to: its turns' ends, and how it differed from expectations.
pub(crate) type Driven = (Vec<toolrail_session_log::event::TurnEndKind>, Vec<String>);

/// Drives the session `drive` makes (it is given the live view's sink; its log must be
/// `<session_dir>/scenario.jsonl`), with the live view (quiet when `machine`), then reads
/// its log back.
pub(crate) fn execute<F, Fut>(session_dir: &Path, machine: bool, drive: F) -> Result<Finished>
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
    let (driven, shown) = runtime.block_on(async {
        let watching = tokio::spawn(follow(receiver, store.clone(), id.clone(), style));
        let driven = drive(Arc::new(sender)).await;
        (driven, watching.await)
    });
    let (turn_ends, mismatches) = driven?;
    shown.context("the live view failed")?;
    let events = store.read(&id)?.events;
    Ok(Finished {
        turn_ends,
        mismatches,
        log,
        events,
    })
}

/// Runs `scenario` in `session_dir` with `options` and the live view (see [`execute`]).
pub(crate) fn execute_scenario(
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
pub(crate) fn expectations_met(mismatches: &[String]) -> Result<()> {
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
