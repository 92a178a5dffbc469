//! `toolrail`: the command-line face of toolrail. `chat` is an interactive session with a
//! real model; `run` is one non-interactive session (a prompt, or a scenario file);
//! `resume` goes on with a session after a crash or a pause; `demo` runs a bundled session
//! on the real tools; `replay` shows a session from its log alone (and writes its page);
//! `recover` repairs an interrupted log; `sessions` lists a store's sessions; `tools` lists
//! the tool catalog; `mcp list` shows MCP servers' tools as registered; `worker` drives the
//! sessions queued in a PostgreSQL store shared by a fleet, and `enqueue` queues them.
//!
//! Exit codes: 0 when the session ran (tool errors included), 2 for a bad invocation or input
//! (the message names what and how to fix it), 1 for an internal failure.

mod acp;
mod chat;
mod console;
mod demo;
mod enqueue;
mod flags;
mod live;
mod mcp;
mod mcp_serve;
mod places;
mod recover;
mod replay;
mod resume;
mod run;
mod sandbox;
mod session;
mod sessions;
mod tools;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "toolrail",
    version,
    about = "An agent in your terminal whose tool calls are recorded before they act: chat, run, resume, replay"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Chat with a model in this folder: streamed answers, live calls, approvals asked here.
    Chat(Box<chat::ChatArgs>),
    /// One session without a person: a prompt to a real model, or a scenario file (scripted).
    Run(Box<run::RunArgs>),
    /// Go on with a session (by id or log path): recover it, say what was repaired, continue.
    Resume(resume::ResumeArgs),
    /// Run the bundled demo: a small project, a scripted model and the real tools.
    Demo(demo::DemoArgs),
    /// Show a session from its log alone: every call's card, and optionally its page.
    Replay(replay::ReplayArgs),
    /// Open a session log, apply recovery and say what was repaired and why.
    Recover(recover::RecoverArgs),
    /// The shipped tools: kind, source, version, exposure, concurrency, read-only.
    Tools(tools::ToolsArgs),
    /// MCP servers: `list` starts a configuration's servers and shows their tools.
    Mcp(mcp::McpArgs),
    /// The sessions of a store (default: this folder's), with how each stands.
    Sessions(sessions::SessionsArgs),
    /// Drive the sessions queued in a PostgreSQL store, taking over those of dead workers.
    Worker(worker::WorkerArgs),
    /// Put a scenario in a PostgreSQL store's queue for the workers, or a failed session
    /// again (`--retry`).
    Enqueue(enqueue::EnqueueArgs),
    /// Which sandbox tier runs commands here, what it enforces, and why one cannot run.
    Sandbox(sandbox::SandboxArgs),
    /// Serve an editor over ACP (Agent Client Protocol) on stdin and stdout.
    Acp(Box<acp::AcpArgs>),
}

/// Input that cannot be used (a file that is not a scenario, an unknown tool): exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// `Err(BadInput)` with a formatted message.
#[macro_export]
macro_rules! bad_input {
    ($($arg:tt)*) => {
        anyhow::Error::new($crate::BadInput(format!($($arg)*)))
    };
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let outcome = match cli.command {
        Command::Chat(args) => chat::run(*args),
        Command::Run(args) => run::run(*args),
        Command::Resume(args) => resume::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Recover(args) => recover::run(args),
        Command::Tools(args) => tools::run(args),
        Command::Mcp(args) => mcp::run(args),
        Command::Sessions(args) => sessions::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Enqueue(args) => enqueue::run(args),
        Command::Sandbox(args) => sandbox::run(args),
        Command::Acp(args) => acp::run(*args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("toolrail: {}", said_once(&error));
            if error.chain().any(|cause| cause.is::<BadInput>()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// A reader that went away (`toolrail sessions | head`) ends the output, not the program
/// with a panic: `println!`, `print!` and `eprintln!` panic on a closed pipe, and this hook
/// turns that panic — on stdout, or on stderr (`toolrail worker 2>&1 | head`) — into the
/// quiet exit a shell expects of a program whose reader left (status 141, as SIGPIPE
/// gives), from whichever thread wrote. Every other panic is reported as before.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        let printing = message.starts_with("failed printing to stdout")
            || message.starts_with("failed printing to stderr");
        if printing && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        report(info);
    }));
}

/// The error and its causes, each said once: many errors' own words already end with
/// their cause's, which `{:#}` would repeat.
fn said_once(error: &anyhow::Error) -> String {
    let mut message = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message
}

/// The runtime every command runs on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// A folder named on the command line, made absolute against the current folder. Session
/// folders and workspaces are used from other folders than this process's (the sandbox
/// helper runs each command in the workspace), where a relative path names something else.
fn absolute_dir(flag: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(dir).map_err(|error| bad_input!("{flag} {}: {error}", dir.display()))
}

/// Runs kept at once under the state folder; older ones are removed as new ones start.
const RUNS_KEPT: usize = 20;

/// A new folder for a scripted run (`demo`, `run --scenario`):
/// `~/.local/state/toolrail/runs/<command>-<id>`; beyond the newest [`RUNS_KEPT`], the
/// oldest idle for an hour are removed.
fn runs_dir(command: &str) -> anyhow::Result<PathBuf> {
    let runs = places::state_folder()?.join("runs");
    std::fs::create_dir_all(&runs)?;
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&runs)?
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
        .filter(|(_, path)| path.is_dir())
        .collect();
    kept.sort();
    let excess = (kept.len() + 1).saturating_sub(RUNS_KEPT);
    // A run still going (a worker's, another terminal's) is never pulled away: only folders
    // untouched for an hour go.
    let idle = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for (_, old) in kept
        .into_iter()
        .take(excess)
        .filter(|(modified, _)| *modified < idle)
    {
        let _ = std::fs::remove_dir_all(old);
    }
    let dir = runs.join(format!("{command}-{}", places::new_session_id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
