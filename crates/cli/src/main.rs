//! `toolrail`: the command-line face of toolrail. `demo` runs a fixed set of tool calls
//! through the full pipeline (policy hook, approval seam, guard, enforced timeout) and prints
//! each committed result and the session log; `run` plays a scenario file (a scripted
//! session) through the agent loop and writes its log. Replay and the session page arrive
//! with later issues.

mod demo;
mod run;

use std::process::ExitCode;

type Command = fn(&[String]) -> anyhow::Result<()>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let (name, command): (&str, Command) = match args.first().map(String::as_str) {
        Some("demo") => ("demo", demo::run),
        Some("run") => ("run", run::run),
        Some("-h" | "--help" | "help") | None => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("toolrail: unknown command `{other}`\n\n{}", usage());
            return ExitCode::from(2);
        }
    };
    match command(rest) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("toolrail {name}: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> &'static str {
    "usage: toolrail <command>\n\ncommands:\n  demo [--jsonl]   run a fixed set of calls through the pipeline and show the outcomes\n                   (--jsonl prints the session log as JSON lines instead of a summary)\n  run SCENARIO.json [--dir DIR]\n                   run a scenario file (a scripted session) and write its log to DIR\n"
}
