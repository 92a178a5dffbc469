//! `cargo xtask ci`: the whole gate, in the order that fails fastest — formatting, lints,
//! tests, the benches built (not run), crash torture (50 kills), the fuzz targets (60 s each), then the project's own rules (layering, guards, diagram) and the supply-chain
//! policy. It stops at the first failing step and says which one it was.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::{check_guards, diagram, facade, fuzz, layering, torture, workspace};

/// What a step does: run cargo with arguments, or call one of xtask's own checks.
enum Action {
    Cargo(Vec<&'static str>),
    Check(fn() -> Result<()>),
}

struct Step {
    name: &'static str,
    action: Action,
}

/// How a finished or skipped step ended, for the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Passed(Duration),
    Failed(Duration),
    NotRun,
}

fn steps(in_ci: bool) -> Vec<Step> {
    let mut nextest = vec!["nextest", "run", "--workspace"];
    if in_ci {
        // CI wants every failure in one run; locally the first one is enough.
        nextest.push("--no-fail-fast");
    }
    vec![
        Step {
            name: "fmt",
            action: Action::Cargo(vec!["fmt", "--all", "--", "--check"]),
        },
        Step {
            name: "clippy",
            action: Action::Cargo(vec![
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        },
        Step {
            name: "nextest",
            action: Action::Cargo(nextest),
        },
        Step {
            name: "doctests",
            action: Action::Cargo(vec!["test", "--workspace", "--doc"]),
        },
        // The benches are compiled, not run (they measure; CI machines are noisy): in the
        // dev profile, which reuses what the tests built, so a bench that no longer links
        // fails here and not at the next `cargo xtask bench`.
        Step {
            name: "benches build",
            action: Action::Cargo(vec!["build", "--workspace", "--benches"]),
        },
        Step {
            name: "torture (50)",
            action: Action::Check(|| {
                torture::run(torture::Options {
                    iterations: 50,
                    seed: 1,
                })
            }),
        },
        Step {
            name: "fuzz (60 s each)",
            action: Action::Check(|| {
                fuzz::run(fuzz::Options {
                    seconds: 60,
                    targets: Vec::new(),
                })
            }),
        },
        Step {
            name: "layering",
            action: Action::Check(layering::run),
        },
        Step {
            name: "facade features",
            action: Action::Check(facade::run),
        },
        Step {
            name: "check-guards",
            action: Action::Check(check_guards::run),
        },
        Step {
            name: "diagram --check",
            action: Action::Check(|| diagram::run(diagram::Mode::Check)),
        },
        Step {
            name: "deny",
            action: Action::Cargo(vec!["deny", "check", "bans", "licenses", "sources"]),
        },
    ]
}

/// Whether we run under CI: the variable is set (to anything but an empty string).
fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|value| !value.is_empty())
}

/// Runs the steps in order, stops at the first that fails, and prints a summary of every
/// step's outcome and time.
pub fn run() -> Result<()> {
    let steps = steps(in_ci());
    let total = steps.len();
    let started = Instant::now();
    let mut outcomes: Vec<(&str, Outcome)> = steps
        .iter()
        .map(|step| (step.name, Outcome::NotRun))
        .collect();
    let mut failure = None;
    for (index, step) in steps.iter().enumerate() {
        println!(
            "\n==> ci [{}/{total}] {}: {}",
            index + 1,
            step.name,
            describe(&step.action)
        );
        let step_started = Instant::now();
        let result = execute(&step.action);
        let elapsed = step_started.elapsed();
        match result {
            Ok(()) => {
                println!(
                    "==> ci [{}/{total}] {} passed in {}",
                    index + 1,
                    step.name,
                    seconds(elapsed)
                );
                outcomes[index].1 = Outcome::Passed(elapsed);
            }
            Err(error) => {
                outcomes[index].1 = Outcome::Failed(elapsed);
                failure = Some((step.name, error));
                break;
            }
        }
    }
    print!("{}", summary(&outcomes, started.elapsed()));
    match failure {
        None => Ok(()),
        Some((name, error)) => bail!("ci: step `{name}` failed: {error:#}"),
    }
}

fn describe(action: &Action) -> String {
    match action {
        Action::Cargo(args) => format!("cargo {}", args.join(" ")),
        Action::Check(_) => "xtask check".to_owned(),
    }
}

fn execute(action: &Action) -> Result<()> {
    match action {
        Action::Cargo(args) => {
            let status = workspace::cargo().args(args).status();
            match status {
                Ok(status) if status.success() => Ok(()),
                Ok(status) => bail!("`cargo {}` exited with {status}", args.join(" ")),
                Err(error) => bail!("could not run `cargo {}`: {error}", args.join(" ")),
            }
        }
        Action::Check(check) => check(),
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

fn summary(outcomes: &[(&str, Outcome)], total: Duration) -> String {
    let width = outcomes
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    let mut out = String::from("\n==> ci summary\n");
    for (name, outcome) in outcomes {
        let (status, time) = match outcome {
            Outcome::Passed(elapsed) => ("ok", seconds(*elapsed)),
            Outcome::Failed(elapsed) => ("FAILED", seconds(*elapsed)),
            Outcome::NotRun => ("not run", String::new()),
        };
        let line = format!("    {name:<width$}  {status:<7}  {time}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let passed = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Passed(_)))
        .count();
    let _ = writeln!(
        out,
        "    {passed}/{} steps passed in {}",
        outcomes.len(),
        seconds(total)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_run_in_the_documented_order() {
        let names: Vec<&str> = steps(false).iter().map(|step| step.name).collect();
        assert_eq!(
            names,
            [
                "fmt",
                "clippy",
                "nextest",
                "doctests",
                "benches build",
                "torture (50)",
                "fuzz (60 s each)",
                "layering",
                "facade features",
                "check-guards",
                "diagram --check",
                "deny"
            ]
        );
    }

    #[test]
    fn ci_runs_every_test_even_after_a_failure() {
        let commands = |in_ci| -> Vec<String> {
            steps(in_ci)
                .iter()
                .map(|step| describe(&step.action))
                .collect()
        };
        assert!(
            commands(true).contains(&"cargo nextest run --workspace --no-fail-fast".to_owned())
        );
        assert!(commands(false).contains(&"cargo nextest run --workspace".to_owned()));
    }

    #[test]
    fn the_summary_marks_the_failed_and_skipped_steps() {
        let outcomes = [
            ("fmt", Outcome::Passed(Duration::from_millis(1200))),
            ("clippy", Outcome::Failed(Duration::from_millis(30_000))),
            ("nextest", Outcome::NotRun),
        ];
        assert_eq!(
            summary(&outcomes, Duration::from_millis(31_300)),
            "\n==> ci summary\n\
             \x20   fmt      ok       1.2s\n\
             \x20   clippy   FAILED   30.0s\n\
             \x20   nextest  not run\n\
             \x20   1/3 steps passed in 31.3s\n"
        );
    }
}
