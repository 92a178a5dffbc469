//! How bench results are shown: one aligned Markdown table (readable in a terminal and
//! valid in `docs/benchmarks.md`), human-scaled times, and the page that records where and
//! how the numbers were measured.

use std::fmt::Write as _;

use super::machine::Machine;
use super::protocol::AssessedRow;

const HEADERS: [&str; 6] = [
    "row",
    "toolrail median",
    "baseline median",
    "ratio",
    "goal",
    "met",
];

/// The results table, columns padded to line up in a terminal.
pub(super) fn render_table(rows: &[AssessedRow]) -> String {
    let cells: Vec<[String; 6]> = rows.iter().map(cells_of).collect();
    let mut widths = HEADERS.map(width);
    for row in &cells {
        for (column, cell) in row.iter().enumerate() {
            widths[column] = widths[column].max(width(cell));
        }
    }
    let mut out = String::new();
    push_line(&mut out, &HEADERS.map(str::to_owned), &widths);
    let rule = widths.map(|w| "-".repeat(w));
    push_line(&mut out, &rule, &widths);
    for row in &cells {
        push_line(&mut out, row, &widths);
    }
    out
}

fn cells_of(assessed: &AssessedRow) -> [String; 6] {
    let row = &assessed.row;
    [
        escape_cell(&row.row),
        format_value(row.ours, &row.unit),
        format!(
            "{} ({})",
            format_value(row.baseline, &row.unit),
            escape_cell(&row.baseline_name)
        ),
        assessed
            .ratio
            .map_or_else(|| "—".to_owned(), |ratio| format!("{ratio:.2}×")),
        escape_cell(&row.goal),
        match assessed.met {
            Some(true) => "yes".to_owned(),
            Some(false) => "no".to_owned(),
            None => "—".to_owned(),
        },
    ]
}

fn push_line(out: &mut String, cells: &[String; 6], widths: &[usize; 6]) {
    out.push('|');
    for (cell, width) in cells.iter().zip(widths) {
        let _ = write!(out, " {cell}{} |", " ".repeat(width - self::width(cell)));
    }
    out.push('\n');
}

/// Display width in characters: µ, × and — are one column each.
fn width(text: &str) -> usize {
    text.chars().count()
}

fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// A measurement in its unit; nanoseconds are scaled to ns/µs/ms/s with three significant
/// digits, which is all a median on a shared machine can honestly claim.
pub(super) fn format_value(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return "n/a".to_owned();
    }
    if unit != "ns" {
        return format!("{} {unit}", significant(value));
    }
    let (scaled, unit) = if value.abs() < 1e3 {
        (value, "ns")
    } else if value.abs() < 1e6 {
        (value / 1e3, "µs")
    } else if value.abs() < 1e9 {
        (value / 1e6, "ms")
    } else {
        (value / 1e9, "s")
    };
    format!("{} {unit}", significant(scaled))
}

fn significant(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The rows whose numeric goal does not hold.
pub(super) fn unmet(rows: &[AssessedRow]) -> Vec<&str> {
    rows.iter()
        .filter(|row| row.met == Some(false))
        .map(|row| row.row.row.as_str())
        .collect()
}

/// `docs/benchmarks.md`: the table with what is needed to judge it.
/// `took` is the whole run's wall time, builds included (issue 13 bounds it: `--quick`
/// under 2 minutes, the full run under 20 on 2 cores).
pub(super) fn render_doc(
    machine: &Machine,
    command: &str,
    took: std::time::Duration,
    rows: &[AssessedRow],
) -> String {
    let mut out = String::from("# Benchmarks\n\n");
    out.push_str(
        "Written by `cargo xtask bench`; rerun it rather than editing this file. Each row \
         compares toolrail's median with a baseline measured in the same run, so the ratio \
         is the number to trust on a noisy machine.\n\n",
    );
    let _ = writeln!(out, "- date: {}", machine.date);
    let _ = writeln!(
        out,
        "- machine: {} cores, {}, Linux {}",
        machine.cores, machine.cpu, machine.kernel
    );
    let _ = writeln!(out, "- toolchain: {}", machine.toolchain);
    let _ = writeln!(
        out,
        "- load average (1, 5, 15 min): {} before, {} after",
        machine.load.0, machine.load.1
    );
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(out, "- took: {} s, builds included\n", took.as_secs());
    if rows.is_empty() {
        out.push_str("No bench printed a result row.\n");
        return out;
    }
    out.push_str(&render_table(rows));
    let unmet = unmet(rows);
    out.push('\n');
    if unmet.is_empty() {
        out.push_str("Every numeric goal is met.\n");
    } else {
        let _ = writeln!(out, "Goals not met: {}.", unmet.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{AssessedRow, fake_row};
    use super::*;

    #[test]
    fn nanoseconds_are_scaled() {
        assert_eq!(format_value(850.0, "ns"), "850 ns");
        assert_eq!(format_value(8.5, "ns"), "8.50 ns");
        assert_eq!(format_value(12_345.0, "ns"), "12.3 µs");
        assert_eq!(format_value(4_560_000.0, "ns"), "4.56 ms");
        assert_eq!(format_value(2.5e9, "ns"), "2.50 s");
        assert_eq!(format_value(42.0, "bytes"), "42.0 bytes");
        assert_eq!(format_value(f64::NAN, "ns"), "n/a");
    }

    #[test]
    fn the_table_lines_up_and_says_what_is_met() {
        let mut absolute = fake_row("fs read | small", 2_000_000.0, 0.0);
        absolute.goal = "< 1 ms".to_owned();
        absolute.goal_max = Some(1_000_000.0);
        absolute.goal_max_ratio = None;
        let mut informative = fake_row("registry lookup", 40.0, 38.0);
        informative.goal_max_ratio = None;
        informative.goal = "-".to_owned();
        let rows = [
            AssessedRow::new(fake_row("trivial call", 1500.0, 750.0)),
            AssessedRow::new(absolute),
            AssessedRow::new(informative),
        ];
        assert_eq!(
            render_table(&rows),
            "\
| row              | toolrail median | baseline median       | ratio | goal        | met |
| ---------------- | --------------- | --------------------- | ----- | ----------- | --- |
| trivial call     | 1.50 µs         | 750 ns (direct call)  | 2.00× | ≤ 2× direct | yes |
| fs read \\| small | 2.00 ms         | 0.00 ns (direct call) | —     | < 1 ms      | no  |
| registry lookup  | 40.0 ns         | 38.0 ns (direct call) | 1.05× | -           | —   |
"
        );
        assert_eq!(unmet(&rows), vec!["fs read | small"]);
    }

    #[test]
    fn the_doc_records_machine_and_command() {
        let machine = Machine {
            date: "Mon Nov 30 18:00:00 UTC 2026".to_owned(),
            cores: "2".to_owned(),
            cpu: "Test CPU".to_owned(),
            kernel: "6.1.0".to_owned(),
            toolchain: "rustc 1.95.0".to_owned(),
            load: ("0.10 0.20 0.30".to_owned(), "1.00 0.50 0.40".to_owned()),
        };
        let rows = [AssessedRow::new(fake_row("trivial call", 1600.0, 750.0))];
        let took = std::time::Duration::from_millis(95_400);
        let doc = render_doc(&machine, "cargo xtask bench --quick", took, &rows);
        assert!(doc.contains("- date: Mon Nov 30 18:00:00 UTC 2026\n"));
        assert!(doc.contains("- machine: 2 cores, Test CPU, Linux 6.1.0\n"));
        assert!(doc.contains("- toolchain: rustc 1.95.0\n"));
        assert!(doc.contains(
            "- load average (1, 5, 15 min): 0.10 0.20 0.30 before, 1.00 0.50 0.40 after\n"
        ));
        assert!(doc.contains("- command: `cargo xtask bench --quick`\n"));
        assert!(doc.contains("- took: 95 s, builds included\n"));
        assert!(doc.contains("| trivial call | 1.60 µs"));
        assert!(doc.ends_with("Goals not met: trivial call.\n"));
        assert!(render_doc(&machine, "x", took, &[]).ends_with("No bench printed a result row.\n"));
    }
}
