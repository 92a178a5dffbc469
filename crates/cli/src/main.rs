//! `toolrail`: the command-line face of toolrail. For now it has one subcommand, `demo`,
//! which runs a fixed set of tool calls through the full pipeline (policy hook, approval
//! seam, guard, enforced timeout) and prints each committed result and the session log.
//! The agent loop, replay and the session page arrive with later issues.

mod demo;
mod run;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("demo") => match demo::run(args.get(1..).unwrap_or_default()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("toolrail demo: {error:#}");
                ExitCode::FAILURE
            }
        },
        Some("run") => match run::run(args.get(1..).unwrap_or_default()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("toolrail run: {error:#}");
                ExitCode::FAILURE
            }
        },
        Some("-h" | "--help" | "help") | None => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("toolrail: unknown command `{other}`\n\n{}", usage());
            ExitCode::from(2)
        }
    }
}

fn usage() -> &'static str {
    "usage: toolrail <command>\n\ncommands:\n  demo [--jsonl]   run a fixed set of calls through the pipeline and show the outcomes\n                   (--jsonl prints the session log as JSON lines instead of a summary)\n  run SCENARIO.json [--dir DIR]\n                   run a scenario file (a scripted session) and write its log to DIR\n"
}
