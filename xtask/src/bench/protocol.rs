//! The protocol between a bench binary and `cargo xtask bench`: a result is one stdout line
//! `BENCH_ROW {json}`; every other line is the bench's own output and is passed through.
//! Keeping the protocol this small lets a bench use any harness (divan, criterion, a loop).

use std::io::{BufRead, Write};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The marker that starts a result line.
pub(super) const PREFIX: &str = "BENCH_ROW ";

/// One comparison, as a bench reports it. Times are medians measured in the same run, so
/// the ratio is meaningful even on a noisy machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// What is measured ("trivial call, end to end").
    pub row: String,
    /// The unit of `ours`, `baseline` and `goal_max`; `ns` gets human scaling.
    pub unit: String,
    /// toolrail's median.
    pub ours: f64,
    /// What toolrail is compared with ("direct fn call", "dsh").
    pub baseline_name: String,
    /// The baseline's median.
    pub baseline: f64,
    /// The goal in words, for the reader.
    pub goal: String,
    /// `ours` must be at most this, in `unit`.
    #[serde(default)]
    pub goal_max: Option<f64>,
    /// `ours / baseline` must be at most this.
    #[serde(default)]
    pub goal_max_ratio: Option<f64>,
}

/// A row with what xtask computes from it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AssessedRow {
    /// The row as the bench reported it (its fields inline in the JSON).
    #[serde(flatten)]
    pub row: BenchRow,
    /// `ours / baseline`, absent when the baseline is not a positive number.
    pub ratio: Option<f64>,
    /// Whether every numeric goal holds; absent when the row has no numeric goal.
    pub met: Option<bool>,
}

impl AssessedRow {
    /// `row` with its ratio and whether its goals are met.
    pub fn new(row: BenchRow) -> Self {
        let ratio = (row.baseline > 0.0 && row.baseline.is_finite() && row.ours.is_finite())
            .then(|| row.ours / row.baseline);
        let met = match (row.goal_max, row.goal_max_ratio) {
            (None, None) => None,
            (max, max_ratio) => {
                let under_max = max.is_none_or(|max| row.ours <= max);
                // A ratio goal that cannot be computed is not met: no evidence, no pass.
                let under_ratio = max_ratio.is_none_or(|goal| ratio.is_some_and(|r| r <= goal));
                Some(under_max && under_ratio)
            }
        };
        AssessedRow { row, ratio, met }
    }
}

/// Parses one stdout line: `None` when it is not a result line.
pub(super) fn parse_line(line: &str) -> Option<Result<BenchRow>> {
    let json = line.strip_prefix(PREFIX)?;
    Some(serde_json::from_str(json).with_context(|| format!("malformed {}line: {line}", PREFIX)))
}

/// Reads a bench's stdout to its end: result lines are collected, other lines are copied
/// to `passthrough` as they arrive so a long bench shows progress.
pub(super) fn collect(stdout: impl BufRead, passthrough: &mut impl Write) -> Result<Vec<BenchRow>> {
    let mut rows = Vec::new();
    for line in stdout.lines() {
        let line = line.context("could not read the bench's output")?;
        match parse_line(&line) {
            Some(row) => rows.push(row?),
            None => {
                writeln!(passthrough, "{line}").context("could not pass the bench's output on")?;
            }
        }
    }
    Ok(rows)
}

/// A row as a fake bench would print it, for the tests of this module and the report.
#[cfg(test)]
pub(super) fn fake_row(name: &str, ours: f64, baseline: f64) -> BenchRow {
    BenchRow {
        row: name.to_owned(),
        unit: "ns".to_owned(),
        ours,
        baseline_name: "direct call".to_owned(),
        baseline,
        goal: "≤ 2× direct".to_owned(),
        goal_max: None,
        goal_max_ratio: Some(2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_parsed_and_others_pass_through() {
        let output = "\
warming up
BENCH_ROW {\"row\":\"trivial call\",\"unit\":\"ns\",\"ours\":1500.0,\"baseline_name\":\"direct call\",\"baseline\":750,\"goal\":\"≤ 2× direct\",\"goal_max\":null,\"goal_max_ratio\":2.0}
done
BENCH_ROW {\"row\":\"no goal\",\"unit\":\"ns\",\"ours\":1,\"baseline_name\":\"b\",\"baseline\":2,\"goal\":\"-\"}
";
        let mut passed = Vec::new();
        let rows = collect(output.as_bytes(), &mut passed).unwrap();
        assert_eq!(String::from_utf8(passed).unwrap(), "warming up\ndone\n");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0], fake_row("trivial call", 1500.0, 750.0));
        assert_eq!(rows[1].goal_max, None);
        assert_eq!(rows[1].goal_max_ratio, None);
    }

    #[test]
    fn a_malformed_result_line_is_an_error() {
        let mut sink = Vec::new();
        let error = collect("BENCH_ROW {\"row\": 1}\n".as_bytes(), &mut sink).unwrap_err();
        assert!(
            error.to_string().contains("malformed BENCH_ROW line"),
            "{error}"
        );
        assert!(parse_line("BENCH_ROWS x").is_none());
    }

    #[test]
    fn goals_are_assessed() {
        let met = AssessedRow::new(fake_row("a", 1500.0, 750.0));
        assert_eq!((met.ratio, met.met), (Some(2.0), Some(true)));

        let unmet = AssessedRow::new(fake_row("b", 1600.0, 750.0));
        assert_eq!(unmet.met, Some(false));

        let mut absolute = fake_row("c", 900.0, 0.0);
        absolute.goal_max = Some(1000.0);
        absolute.goal_max_ratio = None;
        assert_eq!(AssessedRow::new(absolute.clone()).met, Some(true));
        assert_eq!(AssessedRow::new(absolute.clone()).ratio, None);

        // A ratio goal against a zero baseline cannot be shown to hold.
        absolute.goal_max_ratio = Some(10.0);
        assert_eq!(AssessedRow::new(absolute).met, Some(false));

        let mut no_goal = fake_row("d", 1.0, 1.0);
        no_goal.goal_max_ratio = None;
        assert_eq!(AssessedRow::new(no_goal).met, None);
    }

    #[test]
    fn json_output_flattens_the_row() {
        let assessed = AssessedRow::new(fake_row("a", 1500.0, 750.0));
        let json = serde_json::to_value(&assessed).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "row": "a", "unit": "ns", "ours": 1500.0, "baseline_name": "direct call",
                "baseline": 750.0, "goal": "≤ 2× direct", "goal_max": null,
                "goal_max_ratio": 2.0, "ratio": 2.0, "met": true
            })
        );
    }
}
