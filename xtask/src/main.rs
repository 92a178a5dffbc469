//! `cargo xtask <command>`: parses the arguments and calls into the library.

use std::process::ExitCode;

use anyhow::{Result, bail};
use xtask::{bench, check_guards, ci, diagram, facade, fuzz, layering, torture};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci                       fmt, clippy, tests, doctests, torture, fuzz, layering, facade, check-guards, diagram --check, deny
  layering                 check that each crate depends only on crates below it (DESIGN §2)
  facade                   check that the toolrail crate builds without its default features, and without their dependencies
  check-guards             check that guards can only refuse
  diagram [--check]        write docs/tool-execution-pipeline.md, or check that it is current
  bench [--quick] [--json] run every bench, print one table, write docs/benchmarks.md
  fuzz [--seconds N] [TARGET...]
                           run the cargo-fuzz targets in fuzz/ (all by default) N s each (60)
  torture [--iterations N] [--seed S]
                           kill whole sessions with SIGKILL at random moments (50), check recovery";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> Result<()> {
    let Some((command, flags)) = args.split_first() else {
        println!("{USAGE}");
        return Ok(());
    };
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    match command.as_str() {
        "ci" => {
            no_flags(command, &flags)?;
            ci::run()
        }
        "layering" => {
            no_flags(command, &flags)?;
            layering::run()
        }
        "facade" => {
            no_flags(command, &flags)?;
            facade::run()
        }
        "check-guards" => {
            no_flags(command, &flags)?;
            check_guards::run()
        }
        "diagram" => match flags.as_slice() {
            [] => diagram::run(diagram::Mode::Write),
            ["--check"] => diagram::run(diagram::Mode::Check),
            _ => bail!("diagram takes only --check, got {flags:?}\n\n{USAGE}"),
        },
        "bench" => {
            let mut options = bench::Options::default();
            for flag in &flags {
                match *flag {
                    "--quick" => options.quick = true,
                    "--json" => options.json = true,
                    other => bail!("bench does not know {other:?}\n\n{USAGE}"),
                }
            }
            bench::run(options)
        }
        "fuzz" => {
            let mut options = fuzz::Options::default();
            let mut rest = flags.iter();
            while let Some(flag) = rest.next() {
                match *flag {
                    "--seconds" => {
                        options.seconds = rest
                            .next()
                            .and_then(|seconds| seconds.parse().ok())
                            .ok_or_else(|| {
                                anyhow::anyhow!("--seconds needs a number\n\n{USAGE}")
                            })?;
                    }
                    flag if flag.starts_with('-') => {
                        bail!("fuzz does not know {flag:?}\n\n{USAGE}")
                    }
                    target => options.targets.push(target.to_owned()),
                }
            }
            fuzz::run(options)
        }
        "torture" => {
            let mut options = torture::Options::default();
            let mut rest = flags.iter();
            while let Some(flag) = rest.next() {
                let mut number = || {
                    rest.next()
                        .and_then(|value| value.parse::<u64>().ok())
                        .ok_or_else(|| anyhow::anyhow!("{flag} needs a number\n\n{USAGE}"))
                };
                match *flag {
                    "--iterations" => {
                        options.iterations = u32::try_from(number()?)
                            .map_err(|_| anyhow::anyhow!("--iterations is too large"))?;
                    }
                    "--seed" => options.seed = number()?,
                    other => bail!("torture does not know {other:?}\n\n{USAGE}"),
                }
            }
            torture::run(options)
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
}

fn no_flags(command: &str, flags: &[&str]) -> Result<()> {
    if flags.is_empty() {
        Ok(())
    } else {
        bail!("{command} takes no arguments, got {flags:?}\n\n{USAGE}")
    }
}
