//! What reading a command as a shell parses it costs: `CommandLine::parse` on the lines a
//! permission check sees on every `bash` call, beside the character split it replaced (which
//! was cheap and wrong). Prints `BENCH_ROW {json}` lines for `cargo xtask bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Instant;

use toolrail_test_support::bench::{BenchRow, median};
use toolrail_tools_core::command_line::CommandLine;

const TYPICAL: &str = "git status --short && cargo test -p toolrail-tools-core 2>&1 | tail -20";

const SCRIPT: &str = r#"set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
for crate in crates/*; do
  if [ -f "$crate/Cargo.toml" ]; then
    name=$(basename "$crate")
    echo "checking $name"
    cargo check -p "toolrail-$name" --quiet 2>/dev/null || echo "failed: $name" >> failures.txt
  fi
done
cat > notes.md <<'END'
# Notes (written by the agent)
Parentheses (like these) and $(things) in a quoted here-document are text.
END
grep -rn "TODO" src | head -50 | sort | uniq -c
"#;

/// The reading it replaced: split on the characters that chain, nest or redirect.
fn split_on_characters(command: &str) -> usize {
    const JOINS: &[char] = &[';', '&', '|', '\n', '\r', '`', '$', '(', ')', '>', '<'];
    command
        .split(JOINS)
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .count()
}

/// Average nanoseconds per call of `f` over `iters` calls.
fn sample(iters: u32, mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..iters {
        f();
    }
    started.elapsed().as_nanos() as f64 / f64::from(iters)
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (samples, iters) = if quick { (11, 200) } else { (41, 2_000) };
    for (row, text, goal, goal_max_ns) in [
        (
            "CommandLine::parse: a typical bash call (3 commands, a pipe, 2>&1)",
            TYPICAL,
            "≤ 20 µs per line",
            Some(20_000.0),
        ),
        (
            "CommandLine::parse: a 14-line script with a loop, substitutions and a here-document",
            SCRIPT,
            "informational",
            None,
        ),
    ] {
        // Warm up the allocator and the word parser's cache.
        sample(iters, || {
            drop(black_box(CommandLine::parse(black_box(text))))
        });
        let (mut ours, mut split) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            ours.push(sample(iters, || {
                drop(black_box(CommandLine::parse(black_box(text))))
            }));
            split.push(sample(iters, || {
                black_box(split_on_characters(black_box(text)));
            }));
        }
        BenchRow {
            row,
            ours_ns: median(ours),
            baseline_name: "split on shell characters (the old reading)",
            baseline_ns: median(split),
            goal,
            goal_max_ns,
            goal_max_ratio: None,
        }
        .print();
    }
}
