//! `cargo xtask torture [--iterations N] [--seed S]`: crash torture. Each iteration runs a
//! whole session (testkit's `toolrail-torture run`: parallel reads, edits of a shared file,
//! a write that asks, sandboxed bash, probe calls with markers) in a child process, kills it
//! with SIGKILL at a random moment, then has `toolrail-torture check` reopen the log with
//! recovery and hold it against the world: every result the child reported committed is
//! there, nothing "not started" left a marker or an effect, file writes left unknown are
//! settled by the effect probe, files are whole, no process of the session lives on, and
//! the next request would carry a result for every call. The moments come from a seeded
//! generator, so a failing seed can be run again.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::workspace;

/// The flags of `cargo xtask torture`.
#[derive(Clone, Debug)]
pub struct Options {
    /// Sessions run and killed (`--iterations`, default 50).
    pub iterations: u32,
    /// The seed the kill moments are drawn from (`--seed`, default 1).
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            iterations: 50,
            seed: 1,
        }
    }
}

/// splitmix64: enough to spread kill moments, and the same for the same seed.
struct Moments(u64);

impl Moments {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// What the iterations found, for the table.
#[derive(Default)]
struct Tally {
    killed: u32,
    finished_before_the_kill: u32,
    reported_committed: u64,
    torn_tails_cut: u32,
    repairs: BTreeMap<String, u64>,
    failures: Vec<String>,
}

/// Builds `toolrail-torture`, times one whole session, then kills `iterations` sessions at
/// moments within that time and checks each one's recovery; prints a table of what was
/// found, and fails when any iteration broke a promise.
pub fn run(options: Options) -> Result<()> {
    let binary = build()?;
    let scratch = workspace::root().join("target/torture");
    std::fs::create_dir_all(&scratch)?;
    // One run to its end sets the range the kill moments are drawn from.
    let calibration = scratch.join("calibration");
    let _ = std::fs::remove_dir_all(&calibration);
    let started = Instant::now();
    let status = Command::new(&binary)
        .args(["run"])
        .arg(calibration.join("s"))
        .arg("1000000")
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("the torture session does not run to its end even when left alone ({status})");
    }
    let whole = started.elapsed();
    let _ = std::fs::remove_dir_all(&calibration);
    let range_us = (whole.as_micros() as u64 * 11 / 10).max(1);
    println!(
        "torture: a whole session takes {:.0} ms; {} iterations, seed {}, kills within {:.0} ms",
        whole.as_secs_f64() * 1e3,
        options.iterations,
        options.seed,
        range_us as f64 / 1e3
    );

    let mut moments = Moments(options.seed);
    let mut tally = Tally::default();
    for iteration in 0..options.iterations {
        let dir = scratch.join(format!("{iteration}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let token = format!("{}", 1_000_000 + iteration);
        let delay = Duration::from_micros(moments.next() % range_us);
        let committed = dir.join("committed.txt");
        let mut child = Command::new(&binary)
            .arg("run")
            .arg(dir.join("s"))
            .arg(&token)
            .stdout(File::create(&committed)?)
            .stderr(Stdio::null())
            .spawn()?;
        std::thread::sleep(delay);
        if child.try_wait()?.is_some() {
            tally.finished_before_the_kill += 1;
        } else {
            child.kill()?; // SIGKILL
            tally.killed += 1;
        }
        child.wait()?;
        let output = Command::new(&binary)
            .arg("check")
            .arg(dir.join("s"))
            .arg(&token)
            .arg(&committed)
            .output()?;
        let verdict: Value = serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "iteration {iteration}: the check printed no verdict: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        tally.reported_committed += verdict["reported_committed"].as_u64().unwrap_or(0);
        if verdict["torn_bytes"].as_u64().unwrap_or(0) > 0 {
            tally.torn_tails_cut += 1;
        }
        if let Some(repairs) = verdict["repairs"].as_object() {
            for (code, count) in repairs {
                *tally.repairs.entry(code.clone()).or_default() += count.as_u64().unwrap_or(0);
            }
        }
        if verdict["ok"].as_bool() == Some(true) && output.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            tally.failures.push(format!(
                "iteration {iteration} (killed after {:.1} ms, kept in {}): {}",
                delay.as_secs_f64() * 1e3,
                dir.display(),
                verdict["problems"]
            ));
        }
    }
    print_table(&options, &tally);
    if tally.failures.is_empty() {
        Ok(())
    } else {
        for failure in &tally.failures {
            eprintln!("torture: {failure}");
        }
        bail!(
            "{} of {} iterations broke a promise (seed {})",
            tally.failures.len(),
            options.iterations,
            options.seed
        )
    }
}

fn print_table(options: &Options, tally: &Tally) {
    println!("\n| figure | value |\n| --- | --- |");
    println!(
        "| iterations (seed {}) | {} |",
        options.seed, options.iterations
    );
    println!("| killed with SIGKILL mid-session | {} |", tally.killed);
    println!(
        "| finished before their kill moment | {} |",
        tally.finished_before_the_kill
    );
    println!(
        "| results reported committed, all found in the log | {} |",
        tally.reported_committed
    );
    println!("| torn last lines cut on open | {} |", tally.torn_tails_cut);
    for (code, count) in &tally.repairs {
        println!("| calls repaired as {code} | {count} |");
    }
    println!(
        "| iterations that broke a promise | {} |",
        tally.failures.len()
    );
}

/// Builds the torture binary and says where it is.
fn build() -> Result<PathBuf> {
    let status = workspace::cargo()
        .args([
            "build",
            "-p",
            "toolrail-testkit",
            "--bin",
            "toolrail-torture",
        ])
        .status()?;
    if !status.success() {
        bail!("building toolrail-torture failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace::root().join("target"));
    let binary = target.join("debug/toolrail-torture");
    if !Path::new(&binary).exists() {
        bail!("{} was not built", binary.display());
    }
    Ok(binary)
}
