//! `toolrail`: the command-line face of toolrail. `demo` runs a bundled session on the real
//! tools; `run` plays any scenario file; `replay` shows a session from its log alone (and
//! writes its page); `recover` repairs an interrupted log; `tools` lists a tool set; `mcp
//! list` shows MCP servers' tools as registered; `sessions` and `worker` work on a PostgreSQL
//! store shared by a fleet.
//!
//! Exit codes: 0 when the session ran (tool errors included), 2 for a bad invocation or input
//! (the message names what and how to fix it), 1 for an internal failure.

mod demo;
mod live;
mod mcp;
mod recover;
mod replay;
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
    about = "Reliable tool calls for LLM agents: run, replay and render agent sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bundled demo: a small project, a scripted model and the real tools.
    Demo(demo::DemoArgs),
    /// Run a session: a scenario file (scripted), or a real model through a provider.
    Run(Box<run::RunArgs>),
    /// Show a session from its log alone: every call's card, and optionally its page.
    Replay(replay::ReplayArgs),
    /// Open a session log, apply recovery and say what was repaired and why.
    Recover(recover::RecoverArgs),
    /// List a tool set: kind, source, version, exposure, concurrency, read-only.
    Tools(tools::ToolsArgs),
    /// MCP servers: `list` starts a configuration's servers and shows their tools.
    Mcp(mcp::McpArgs),
    /// The sessions of a PostgreSQL store, with their state and lease holders.
    Sessions(sessions::SessionsArgs),
    /// Drive the sessions queued in a PostgreSQL store, taking over those of dead workers.
    Worker(worker::WorkerArgs),
    /// Which sandbox tier runs commands here, what it enforces, and why one cannot run.
    Sandbox(sandbox::SandboxArgs),
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
        Command::Demo(args) => demo::run(args),
        Command::Run(args) => run::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Recover(args) => recover::run(args),
        Command::Tools(args) => tools::run(args),
        Command::Mcp(args) => mcp::run(args),
        Command::Sessions(args) => sessions::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Sandbox(args) => sandbox::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("toolrail: {error:#}");
            if error.chain().any(|cause| cause.is::<BadInput>()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The runtime every command runs on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// A fresh folder under the system's temp folder, named for the command.
/// A folder named on the command line, made absolute against the current folder. Session
/// folders and workspaces are used from other folders than this process's (the sandbox
/// helper runs each command in the workspace), where a relative path names something else.
fn absolute_dir(flag: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(dir).map_err(|error| bad_input!("{flag} {}: {error}", dir.display()))
}

fn fresh_dir(command: &str) -> anyhow::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis())
        .unwrap_or_default();
    // TMPDIR may be relative.
    let dir = std::path::absolute(
        std::env::temp_dir().join(format!("toolrail-{command}-{}-{stamp}", std::process::id())),
    )?;
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
