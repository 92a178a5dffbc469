//! Where a bench ran. Numbers without the machine, kernel and toolchain behind them cannot
//! be compared later, so `docs/benchmarks.md` records them. A fact that cannot be read is
//! written as "unknown" rather than failing the run after the benches already took minutes.

use std::fs;
use std::process::Command;

/// The facts recorded next to the results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `date -u`.
    pub date: String,
    /// `nproc`.
    pub cores: String,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu: String,
    /// `uname -r`.
    pub kernel: String,
    /// `rustc -V` (the toolchain the benches were built with).
    pub toolchain: String,
    /// The 1, 5 and 15 minute load averages when the run began and when it ended: a
    /// table measured on a busy machine says so.
    pub load: (String, String),
}

impl Machine {
    /// The facts of the machine this runs on, the load average at the run's start given
    /// (`load_before`); one that cannot be read is "unknown".
    pub fn detect(load_before: String) -> Self {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        Machine {
            date: command_line(Command::new("date").arg("-u")),
            cores: command_line(&mut Command::new("nproc")),
            cpu: cpu_model(),
            kernel: command_line(Command::new("uname").arg("-r")),
            toolchain: command_line(Command::new(rustc).arg("-V")),
            load: (load_before, load_average()),
        }
    }
}

/// The three load averages of `/proc/loadavg` (`0.81 1.18 1.26`), or "unknown".
pub(super) fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|load| !load.is_empty())
        .unwrap_or_else(|| UNKNOWN.to_owned())
}

const UNKNOWN: &str = "unknown";

/// The first line a command prints, or "unknown".
fn command_line(command: &mut Command) -> String {
    // Run from the workspace so rust-toolchain.toml picks the project's rustc.
    command.current_dir(crate::workspace::root());
    match command.output() {
        Ok(output) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            text.lines()
                .next()
                .map_or_else(|| UNKNOWN.to_owned(), |line| line.trim().to_owned())
        }
        Ok(_) | Err(_) => UNKNOWN.to_owned(),
    }
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| model_name(&text))
        .unwrap_or_else(|| UNKNOWN.to_owned())
}

fn model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let cpuinfo =
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(model_name(cpuinfo), Some("AMD EPYC 7B13".to_owned()));
        assert_eq!(model_name("processor : 0\n"), None);
    }
}
