//! The `BENCH_ROW` lines `cargo xtask bench` collects: toolrail's median beside a baseline
//! measured in the same run, with the goal the row is held to.

use serde_json::json;

/// One row, in nanoseconds.
#[derive(Clone, Debug)]
pub struct BenchRow<'a> {
    /// What is measured (`read of a 10 MB file (digest, line count, first 2000 lines)`).
    pub row: &'a str,
    /// toolrail's median.
    pub ours_ns: f64,
    /// What toolrail is compared with (`bash -c true, spawned and waited`).
    pub baseline_name: &'a str,
    /// The baseline's median, measured in the same run.
    pub baseline_ns: f64,
    /// Said in words, e.g. `within 1.5× of rg`.
    pub goal: &'a str,
    /// The goal as a bound on ours, if it is absolute.
    pub goal_max_ns: Option<f64>,
    /// The goal as a bound on ours / baseline, if it is a ratio.
    pub goal_max_ratio: Option<f64>,
}

impl BenchRow<'_> {
    /// Prints the row as one `BENCH_ROW {json}` line on stdout, in nanoseconds.
    pub fn print(&self) {
        self.print_in("ns");
    }

    /// The row in another unit than nanoseconds (`ours_ns`, `baseline_ns` and `goal_max_ns`
    /// then hold values in `unit`), e.g. a fitted exponent or bytes.
    pub fn print_in(&self, unit: &str) {
        let row = json!({
            "row": self.row, "unit": unit, "ours": self.ours_ns,
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

/// The exponent `k` of the power law `time ≈ c · size^k` that fits `(size, time)` points
/// best (least squares in log–log space): 1 is linear, 2 quadratic. 0 for fewer than two
/// usable points.
pub fn growth_exponent(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(size, time)| *size > 0.0 && *time > 0.0)
        .map(|(size, time)| (size.ln(), time.ln()))
        .collect();
    if logs.len() < 2 {
        return 0.0;
    }
    let count = logs.len() as f64;
    let mean_x = logs.iter().map(|(x, _)| x).sum::<f64>() / count;
    let mean_y = logs.iter().map(|(_, y)| y).sum::<f64>() / count;
    let covariance: f64 = logs.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let variance: f64 = logs.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

/// Instructions per iteration of this bench binary's own profiling mode, counted by
/// callgrind: unlike time, the same on a busy or an idle machine. The binary is run twice
/// under `valgrind --tool=callgrind` with `args` followed by `many` and then `few` (its
/// iteration count) and `tail`; the difference over `many - few` cancels start-up. `None`
/// when valgrind is missing or a run fails.
pub fn instructions_per_iteration(
    args: &[&str],
    many: u32,
    few: u32,
    tail: &[&str],
) -> Option<f64> {
    let instructions = |stderr: &str| {
        let collected = stderr
            .lines()
            .find_map(|line| line.split("Collected :").nth(1))?;
        number(collected)
    };
    let out = std::env::temp_dir().join(format!(
        "toolrail-callgrind-{}-{}",
        std::process::id(),
        tail.join("-")
    ));
    let options = [
        "--tool=callgrind".to_owned(),
        format!("--callgrind-out-file={}", out.display()),
    ];
    let counted = per_iteration(&options, args, many, few, tail, |stderr| {
        instructions(stderr).map(|count| (count, 0.0))
    });
    let _ = std::fs::remove_file(&out);
    counted.map(|(count, _)| count)
}

/// Allocations (blocks) and bytes per iteration of this bench binary's own profiling mode,
/// counted by `valgrind --tool=dhat` in every thread, the same way as
/// [`instructions_per_iteration`]: two runs, `many` and `few` iterations, the difference
/// over `many - few`. `None` when valgrind is missing or a run fails.
pub fn allocations_per_iteration(
    args: &[&str],
    many: u32,
    few: u32,
    tail: &[&str],
) -> Option<(f64, f64)> {
    let options = [
        "--tool=dhat".to_owned(),
        "--dhat-out-file=/dev/null".to_owned(),
    ];
    per_iteration(&options, args, many, few, tail, |stderr| {
        // `==123== Total:     3,160,000 bytes in 5,000 blocks`
        let total = stderr
            .lines()
            .find_map(|line| line.split("Total:").nth(1))?;
        let (bytes, rest) = total.split_once("bytes in")?;
        Some((number(rest.trim().strip_suffix("blocks")?)?, number(bytes)?))
    })
}

/// A count valgrind printed (`3,160,000`).
fn number(text: &str) -> Option<f64> {
    text.trim().replace(',', "").parse::<f64>().ok()
}

/// Runs this binary under valgrind with `options`, `many` and then `few` iterations, reads a
/// pair of counts from each run's stderr with `read`, and returns their difference per
/// iteration.
fn per_iteration(
    options: &[String],
    args: &[&str],
    many: u32,
    few: u32,
    tail: &[&str],
    read: impl Fn(&str) -> Option<(f64, f64)>,
) -> Option<(f64, f64)> {
    let count = |iterations: u32| -> Option<(f64, f64)> {
        let exe = std::env::current_exe().ok()?;
        let output = std::process::Command::new("valgrind")
            .args(options)
            .arg(exe)
            .args(args)
            .arg(iterations.to_string())
            .args(tail)
            .output()
            .ok()?;
        if !output.status.success() {
            return None;
        }
        read(&String::from_utf8_lossy(&output.stderr))
    };
    let (many_count, few_count) = (count(many)?, count(few)?);
    let iterations = f64::from(many.checked_sub(few).filter(|d| *d > 0)?);
    Some((
        (many_count.0 - few_count.0) / iterations,
        (many_count.1 - few_count.1) / iterations,
    ))
}

#[cfg(test)]
mod tests {
    use super::growth_exponent;

    #[test]
    fn the_exponent_of_exact_power_laws() {
        let linear: Vec<(f64, f64)> = [1.0, 10.0, 100.0].iter().map(|n| (*n, 3.0 * n)).collect();
        assert!((growth_exponent(&linear) - 1.0).abs() < 1e-9);
        let quadratic: Vec<(f64, f64)> = [2.0, 20.0, 200.0].iter().map(|n| (*n, n * n)).collect();
        assert!((growth_exponent(&quadratic) - 2.0).abs() < 1e-9);
        assert_eq!(growth_exponent(&[(5.0, 1.0)]), 0.0);
    }
}
