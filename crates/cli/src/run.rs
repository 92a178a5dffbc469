//! `toolrail run SCENARIO.json [--dir DIR]`: a scripted session (toolrail-testkit's scenario
//! format) against the real runtime; the log, markers and workspace go to DIR.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use toolrail_testkit::Scenario;

pub fn run(args: &[String]) -> Result<()> {
    let (file, dir) = match args {
        [file] => (PathBuf::from(file), None),
        [file, flag, dir] if flag == "--dir" => (PathBuf::from(file), Some(PathBuf::from(dir))),
        _ => bail!("expected `toolrail run SCENARIO.json [--dir DIR]`"),
    };
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let scenario = Scenario::from_json(&text).with_context(|| format!("in {}", file.display()))?;
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("toolrail-run-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = runtime.block_on(scenario.run(&dir))?;
    for (number, end) in report.turn_ends.iter().enumerate() {
        println!("turn {}: {end:?}", number + 1);
    }
    println!("log: {}", report.log_path.display());
    if !report.mismatches.is_empty() {
        for mismatch in &report.mismatches {
            eprintln!("expected otherwise: {mismatch}");
        }
        bail!(
            "the run differs from the scenario's expectations in {} ways",
            report.mismatches.len()
        );
    }
    if scenario.expect.is_some() {
        println!("the run meets the scenario's expectations");
    }
    Ok(())
}
