//! `cargo xtask bench [--quick] [--json]`: runs every bench target of the `crates/*`
//! packages, collects their `BENCH_ROW` results (see `protocol`), prints one table (or JSON)
//! and records it with the machine facts in `docs/benchmarks.md`.
//!
//! An unmet goal is reported, not fatal: benches on a shared machine are evidence, and a
//! red CI over noise would teach people to ignore it. A bench that fails is fatal.

mod machine;
mod protocol;
mod report;

use std::fs;
use std::io::{self, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

pub use machine::Machine;
pub use protocol::{AssessedRow, BenchRow};

use crate::workspace::{self, Package};

/// Where the results page lives, relative to the workspace root.
pub const DOC_PATH: &str = "docs/benchmarks.md";

/// The flags of `cargo xtask bench`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Passed to each bench binary as `--quick`: fewer samples, for a smoke run.
    pub quick: bool,
    /// Print the rows as a JSON array instead of the table.
    pub json: bool,
}

impl Options {
    fn command_line(self) -> String {
        let mut line = "cargo xtask bench".to_owned();
        if self.quick {
            line.push_str(" --quick");
        }
        if self.json {
            line.push_str(" --json");
        }
        line
    }
}

/// Runs every bench target, prints the rows (a table, or JSON), and writes
/// `docs/benchmarks.md`. Fails when a bench fails; an unmet goal is only reported.
pub fn run(options: Options) -> Result<()> {
    let started = std::time::Instant::now();
    let load_before = machine::load_average();
    let root = workspace::root();
    let targets = bench_targets(&workspace::packages()?, &root);

    let mut rows = Vec::new();
    for (package, bench, features) in &targets {
        eprintln!("bench: {package} / {bench}");
        let mut command = workspace::cargo();
        command.args(["bench", "-p", package, "--bench", bench]);
        if !features.is_empty() {
            command.args(["--features", &features.join(",")]);
        }
        command.arg("--");
        if options.quick {
            command.arg("--quick");
        }
        // In JSON mode stdout is the JSON document; the benches' own chatter goes to stderr.
        let rows_of_bench = if options.json {
            run_bench(command, &mut io::stderr().lock())
        } else {
            run_bench(command, &mut io::stdout().lock())
        };
        rows.extend(rows_of_bench.with_context(|| format!("bench {package}/{bench} failed"))?);
    }
    let rows: Vec<AssessedRow> = rows.into_iter().map(AssessedRow::new).collect();

    if options.json {
        let json = serde_json::to_string_pretty(&rows).context("could not encode the rows")?;
        println!("{json}");
    } else if rows.is_empty() {
        println!(
            "bench: {} bench target(s) ran; none printed a BENCH_ROW line",
            targets.len()
        );
    } else {
        print!("{}", report::render_table(&rows));
    }

    let doc = report::render_doc(
        &Machine::detect(load_before),
        &options.command_line(),
        started.elapsed(),
        &rows,
    );
    let path = root.join(DOC_PATH);
    fs::write(&path, doc).with_context(|| format!("could not write {}", path.display()))?;
    eprintln!("bench: wrote {DOC_PATH}");

    let unmet = report::unmet(&rows);
    if !unmet.is_empty() {
        // Reported, not fatal (see the module doc); on stderr in JSON mode to keep stdout JSON.
        let line = format!("bench: goals not met: {}", unmet.join(", "));
        if options.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    Ok(())
}

/// A bench target: its package, its name, and the features it requires.
pub type BenchTarget = (String, String, Vec<String>);

/// `(package, bench, required features)` for every bench target of the packages under
/// `crates/`, in metadata order (stable for a given workspace).
pub fn bench_targets(packages: &[Package], workspace_root: &Path) -> Vec<BenchTarget> {
    packages
        .iter()
        .filter(|package| package.crate_dir_name(workspace_root).is_some())
        .flat_map(|package| {
            package.benches.iter().map(|bench| {
                let features = package
                    .bench_features
                    .iter()
                    .find(|(name, _)| name == bench)
                    .map(|(_, features)| features.clone())
                    .unwrap_or_default();
                (package.name.clone(), bench.clone(), features)
            })
        })
        .collect()
}

/// Runs one bench command, streaming its stdout through the protocol; the command's
/// stderr goes straight to ours. Fails when the command cannot start or exits non-zero.
pub fn run_bench(mut command: Command, passthrough: &mut impl Write) -> Result<Vec<BenchRow>> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("could not start {command:?}"))?;
    let collected = match child.stdout.take() {
        Some(stdout) => protocol::collect(BufReader::new(stdout), passthrough),
        None => Ok(Vec::new()),
    };
    // Wait even when reading failed, so no child is left behind.
    let status = child
        .wait()
        .with_context(|| format!("could not wait for {command:?}"))?;
    let rows = collected?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_bench(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn a_fake_bench_binary_is_collected() {
        let script = r#"
echo "sample 1/3"
echo 'BENCH_ROW {"row":"trivial call","unit":"ns","ours":900,"baseline_name":"direct","baseline":600,"goal":"≤ 2× direct","goal_max":null,"goal_max_ratio":2}'
echo "done"
"#;
        let mut passed = Vec::new();
        let rows = run_bench(fake_bench(script), &mut passed).unwrap();
        assert_eq!(String::from_utf8(passed).unwrap(), "sample 1/3\ndone\n");
        assert_eq!(rows.len(), 1);
        let assessed = AssessedRow::new(rows[0].clone());
        assert_eq!(assessed.ratio, Some(1.5));
        assert_eq!(assessed.met, Some(true));
    }

    #[test]
    fn a_failing_bench_binary_fails_the_run() {
        let mut passed = Vec::new();
        let error = run_bench(fake_bench("echo partial; exit 3"), &mut passed).unwrap_err();
        assert!(error.to_string().contains("exit status: 3"), "{error}");
    }

    #[test]
    fn benches_come_from_the_crates_only() {
        let root = Path::new("/ws");
        let package = |name: &str, dir: &str, benches: &[&str]| Package {
            name: name.to_owned(),
            dir: root.join(dir),
            dependencies: vec![],
            benches: benches.iter().map(|b| (*b).to_owned()).collect(),
            bench_features: vec![],
            role: None,
        };
        let packages = [
            package(
                "toolrail-tools-core",
                "crates/tools-core",
                &["pipeline", "registry"],
            ),
            package("toolrail-session-log", "crates/session-log", &[]),
            package("toolrail-examples", "examples", &["examples_bench"]),
            Package {
                bench_features: vec![("otlp".to_owned(), vec!["otlp".to_owned()])],
                ..package("toolrail-runtime", "crates/runtime", &["otlp"])
            },
        ];
        assert_eq!(
            bench_targets(&packages, root),
            vec![
                (
                    "toolrail-tools-core".to_owned(),
                    "pipeline".to_owned(),
                    vec![]
                ),
                (
                    "toolrail-tools-core".to_owned(),
                    "registry".to_owned(),
                    vec![]
                ),
                (
                    "toolrail-runtime".to_owned(),
                    "otlp".to_owned(),
                    vec!["otlp".to_owned()]
                ),
            ]
        );
    }

    #[test]
    fn the_command_line_is_recorded_as_typed() {
        assert_eq!(
            Options {
                quick: true,
                json: false
            }
            .command_line(),
            "cargo xtask bench --quick"
        );
        assert_eq!(Options::default().command_line(), "cargo xtask bench");
    }
}
