//! The `BENCH_ROW` lines `cargo xtask bench` collects: toolrail's median beside a baseline
//! measured in the same run, with the goal the row is held to.

use serde_json::json;

/// One row, in nanoseconds.
#[derive(Clone, Debug)]
pub struct BenchRow<'a> {
    pub row: &'a str,
    pub ours_ns: f64,
    pub baseline_name: &'a str,
    pub baseline_ns: f64,
    /// Said in words, e.g. `within 1.5× of rg`.
    pub goal: &'a str,
    /// The goal as a bound on ours, if it is absolute.
    pub goal_max_ns: Option<f64>,
    /// The goal as a bound on ours / baseline, if it is a ratio.
    pub goal_max_ratio: Option<f64>,
}

impl BenchRow<'_> {
    pub fn print(&self) {
        let row = json!({
            "row": self.row, "unit": "ns", "ours": self.ours_ns,
            "baseline_name": self.baseline_name, "baseline": self.baseline_ns,
            "goal": self.goal, "goal_max": self.goal_max_ns, "goal_max_ratio": self.goal_max_ratio,
        });
        println!("BENCH_ROW {row}");
    }
}

/// The median of the samples (the upper one of an even count); 0 for none.
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(0.0)
}
