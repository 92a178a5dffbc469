//! Which of a command's limits it ran into, as far as the outside can tell: a file-size or
//! CPU limit ends a process with a signal of its own; spilled output is cut by the tool
//! itself; a process or memory limit makes a call fail inside the command, which the
//! command's own words on stderr usually say. The note is for the model, so a command that
//! fails for a limit is not retried blindly.

use std::process::ExitStatus;

use crate::sandbox::ResourceLimits;

/// A limit a command ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitHit {
    Processes,
    Memory,
    FileSize,
    Cpu,
    /// The spill file of a stream stopped at the cap; the rest was not saved.
    Spill,
}

impl LimitHit {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Processes => "processes",
            Self::Memory => "memory_bytes",
            Self::FileSize => "file_bytes",
            Self::Cpu => "cpu_seconds",
            Self::Spill => "spill_bytes",
        }
    }

    /// The sentence the model reads.
    pub(crate) fn note(self, limits: &ResourceLimits, spill_cap: u64) -> String {
        let bytes = |value: Option<u64>| value.map_or_else(|| "its".to_owned(), human_bytes);
        match self {
            Self::Processes => format!(
                "[limit: the command could not start more processes ({} at once)]",
                limits
                    .processes
                    .map_or_else(|| "the system's limit".to_owned(), |n| n.to_string())
            ),
            Self::Memory => format!(
                "[limit: an allocation failed ({} of memory per process)]",
                bytes(limits.memory_bytes.or(limits.address_space))
            ),
            Self::FileSize => format!(
                "[limit: a file reached the {} file-size limit; the write failed]",
                bytes(limits.file_bytes)
            ),
            Self::Cpu => "[limit: the command used up its CPU time]".to_owned(),
            Self::Spill => format!(
                "[limit: the saved output stops at {} per stream; the rest was not kept]",
                human_bytes(spill_cap)
            ),
        }
    }
}

/// The limits a command's end and stderr show it hit.
pub(crate) fn limits_hit(
    status: ExitStatus,
    stderr: &str,
    limits: &ResourceLimits,
    spill_cut: bool,
) -> Vec<LimitHit> {
    use std::os::unix::process::ExitStatusExt;
    let signal = status.signal();
    let code = status.code();
    let mut hits = Vec::new();
    // bash, dash, Node.js, and Python (an uncaught EAGAIN, which `-c` programs show
    // without the line that failed).
    let python_fork = stderr.contains("BlockingIOError: [Errno 11]");
    if limits.processes.is_some()
        && (python_fork
            || [
                "fork: Resource temporarily unavailable",
                "fork: retry",
                "Cannot fork",
                "can't fork",
                "spawn EAGAIN",
            ]
            .iter()
            .any(|sign| stderr.contains(sign)))
    {
        hits.push(LimitHit::Processes);
    }
    if (limits.memory_bytes.is_some() || limits.address_space.is_some())
        && [
            "Cannot allocate memory",
            "MemoryError",
            "out of memory",
            "memory allocation",
        ]
        .iter()
        .any(|sign| stderr.contains(sign))
    {
        hits.push(LimitHit::Memory);
    }
    let xfsz = libc::SIGXFSZ;
    if limits.file_bytes.is_some()
        && (signal == Some(xfsz)
            || code == Some(128 + xfsz)
            || stderr.contains("File size limit exceeded"))
    {
        hits.push(LimitHit::FileSize);
    }
    if limits.cpu_seconds.is_some() && signal == Some(libc::SIGXCPU) {
        hits.push(LimitHit::Cpu);
    }
    if spill_cut {
        hits.push(LimitHit::Spill);
    }
    hits
}

pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn limits_are_read_from_signals_codes_and_words() {
        let limits = ResourceLimits::default();
        let by_signal = ExitStatus::from_raw(libc::SIGXFSZ);
        assert_eq!(
            limits_hit(by_signal, "", &limits, false),
            vec![LimitHit::FileSize]
        );
        let exited = ExitStatus::from_raw(1 << 8);
        assert_eq!(
            limits_hit(
                exited,
                "bash: fork: retry: Resource temporarily unavailable",
                &limits,
                true
            ),
            vec![LimitHit::Processes, LimitHit::Spill]
        );
        assert!(limits_hit(exited, "all fine", &limits, false).is_empty());
        assert!(limits_hit(by_signal, "", &ResourceLimits::none(), false).is_empty());
        assert_eq!(human_bytes(4 << 30), "4 GiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
