//! `cargo xtask fuzz [--seconds N] [TARGET...]`: runs each cargo-fuzz target in `fuzz/` (all
//! of them unless named) for a bounded time with the nightly toolchain, seeded with the test
//! fixtures that fit it. A crash stops the run with the target's name and the failing input,
//! which cargo fuzz saves under `fuzz/artifacts/`; it then belongs in a regression test.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::workspace;

/// How long and what to fuzz.
#[derive(Debug)]
pub struct Options {
    /// How long each target runs, in seconds (`--seconds`, default 60).
    pub seconds: u64,
    /// The targets to run, by name; empty: every one in `fuzz/fuzz_targets`.
    pub targets: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            seconds: 60,
            targets: Vec::new(),
        }
    }
}

/// Seed corpora per target, relative to the workspace root.
/// Seconds one input may take before libFuzzer reports it as a hang.
const INPUT_TIMEOUT_SECONDS: u64 = 10;

const SEEDS: &[(&str, &[&str])] = &[
    (
        "sse_stream",
        &[
            "crates/providers/tests/fixtures/openai",
            "crates/providers/tests/fixtures/anthropic",
        ],
    ),
    ("arguments", &["fuzz/seeds/arguments"]),
    ("command_line", &["fuzz/seeds/command_line"]),
    ("jsonl_recovery", &["fuzz/seeds/jsonl_recovery"]),
    ("permission_rules", &["fuzz/seeds/permission_rules"]),
    (
        "scenario",
        &[
            "crates/testkit/scenarios",
            "crates/cli/tests/scenarios",
            "crates/cli/demo",
        ],
    ),
];

/// Runs each chosen target with `cargo +nightly fuzz`; fails at the first that crashes,
/// an unknown target, or a missing cargo-fuzz.
pub fn run(options: Options) -> Result<()> {
    let root = workspace::root();
    let fuzz_dir = root.join("fuzz");
    let known = targets(&fuzz_dir)?;
    let chosen: Vec<String> = if options.targets.is_empty() {
        known.clone()
    } else {
        for target in &options.targets {
            if !known.contains(target) {
                bail!("no fuzz target `{target}`; known: {}", known.join(", "));
            }
        }
        options.targets.clone()
    };
    let installed = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        bail!(
            "cargo fuzz is not installed for the nightly toolchain: `cargo install cargo-fuzz --locked`"
        );
    }
    for target in &chosen {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("creating {}", corpus.display()))?;
        let seeds: Vec<PathBuf> = SEEDS
            .iter()
            .filter(|(name, _)| name == target)
            .flat_map(|(_, dirs)| dirs.iter().map(|dir| root.join(dir)))
            .collect();
        println!("==> fuzz {target} for {} s", options.seconds);
        let status = Command::new("cargo")
            .current_dir(&root)
            .args(["+nightly", "fuzz", "run", "--fuzz-dir"])
            .arg(&fuzz_dir)
            .arg(target)
            .arg(&corpus)
            .args(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={}", options.seconds))
            // An input that takes this long is a failure with its input saved, not a run
            // that holds CI until libFuzzer's default of 20 minutes (a parser's exponential
            // backtracking did).
            .arg(format!("-timeout={INPUT_TIMEOUT_SECONDS}"))
            .status()
            .with_context(|| format!("running cargo fuzz for {target}"))?;
        if !status.success() {
            bail!(
                "fuzz target `{target}` failed ({status}); the input is under fuzz/artifacts/{target}/"
            );
        }
    }
    Ok(())
}

/// The targets: the files of `fuzz/fuzz_targets`.
fn targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            (path.extension()? == "rs")
                .then(|| path.file_stem()?.to_str().map(str::to_owned))
                .flatten()
        })
        .collect();
    names.sort();
    Ok(names)
}
