//! One log per session file: an advisory `flock` on the file, held for as long as its writer
//! has it open. The kernel drops the lock when the last descriptor of the open file goes —
//! for a killed holder that is late in its exit, after its memory is torn down (tens of
//! milliseconds for a large process), not when `kill` returns. So a lock whose holder is
//! exiting (or gone) is waited for, a bounded time; a live holder is named at once.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::StoreError;

/// How long opening a session waits for a lock whose holder is exiting.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// Who holds a session file's lock, as far as the system tells (Linux: `/proc/locks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockHolder {
    /// Another log in this process.
    ThisProcess,
    /// A live process.
    Process {
        /// Its process id.
        pid: u32,
        /// Its command name, as `/proc/<pid>/stat` gives it (at most 15 bytes).
        command: String,
    },
    /// A process that was exiting (killed) and still held the lock when the wait ran out.
    Exiting {
        /// Its process id.
        pid: u32,
        /// Its command name, as `/proc/<pid>/stat` gives it (at most 15 bytes).
        command: String,
        /// How long opening waited for it to let go.
        waited: Duration,
    },
    /// The process that took the lock has ended, and processes that inherited its
    /// descriptor (forked without exec) still held it when the wait ran out.
    Inherited {
        /// `None` when the system shows no pid (the process is outside this PID namespace).
        pid: Option<u32>,
        /// Pids of the processes seen with the file open (at most 8; empty when none could
        /// be seen).
        holders: Vec<u32>,
        /// How long opening waited for them to let go.
        waited: Duration,
    },
    /// The system does not say.
    Unknown,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ThisProcess => {
                f.write_str("another log of this process has it open; close that one first")
            }
            Self::Process { pid, command } => write!(
                f,
                "process {pid} ({command}) has it open; let that session end, or stop that process, first"
            ),
            Self::Exiting {
                pid,
                command,
                waited,
            } => write!(
                f,
                "process {pid} ({command}) is exiting but still held it after {} ms; try again once it has ended",
                waited.as_millis()
            ),
            Self::Inherited {
                pid,
                holders,
                waited,
            } => {
                match pid {
                    Some(pid) => write!(f, "process {pid}, which locked it, has ended, but ")?,
                    None => f.write_str(
                        "the process that locked it has ended (or is not visible here), but ",
                    )?,
                }
                if holders.is_empty() {
                    f.write_str("a process that inherited its descriptor")?;
                } else {
                    let pids: Vec<String> = holders.iter().map(u32::to_string).collect();
                    write!(
                        f,
                        "process {} (which inherited its descriptor)",
                        pids.join(", ")
                    )?;
                }
                write!(
                    f,
                    " still held it after {} ms; end that process, or wait for it to end",
                    waited.as_millis()
                )
            }
            Self::Unknown => f.write_str(
                "another log (this process or another) has it open; close that one first",
            ),
        }
    }
}

/// Takes the session lock on `file` (at `path`), waiting up to `wait` while its holder is
/// exiting or gone; a live holder, or one that does not let go in time, is an error naming it.
pub(crate) fn lock(file: &File, path: &Path, wait: Duration) -> Result<(), StoreError> {
    if try_lock(file, path)? {
        return Ok(());
    }
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let holder = holder_of(file);
        // Looked at after the lock was refused: a holder that let go in between is no longer
        // listed, so try again before judging by what was seen.
        if try_lock(file, path)? {
            return Ok(());
        }
        let waited = started.elapsed();
        let exiting = match &holder {
            Seen::Exiting { .. } | Seen::Gone { .. } => true,
            Seen::ThisProcess | Seen::Live { .. } | Seen::Unknown => false,
        };
        if !exiting || waited >= wait {
            return Err(StoreError::Locked {
                path: path.to_path_buf(),
                holder: holder.described(path, waited),
            });
        }
        std::thread::sleep(pause.min(wait.saturating_sub(waited)));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn try_lock(file: &File, path: &Path) -> Result<bool, StoreError> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(source)) => Err(StoreError::io("locking", path, source)),
    }
}

/// The holder as seen at one moment.
enum Seen {
    ThisProcess,
    Live {
        pid: u32,
        command: String,
    },
    Exiting {
        pid: u32,
        command: String,
    },
    /// The pid that took the lock is no process any more (`None`: the system shows no pid).
    Gone {
        pid: Option<u32>,
    },
    Unknown,
}

impl Seen {
    fn described(self, path: &Path, waited: Duration) -> LockHolder {
        match self {
            Self::ThisProcess => LockHolder::ThisProcess,
            Self::Live { pid, command } => LockHolder::Process { pid, command },
            Self::Exiting { pid, command } => LockHolder::Exiting {
                pid,
                command,
                waited,
            },
            Self::Gone { pid } => LockHolder::Inherited {
                pid,
                holders: proc::processes_with_open(path),
                waited,
            },
            Self::Unknown => LockHolder::Unknown,
        }
    }
}

#[cfg(target_os = "linux")]
fn holder_of(file: &File) -> Seen {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = file.metadata() else {
        return Seen::Unknown;
    };
    let Some(pid) = proc::flock_owner(meta.dev(), meta.ino()) else {
        return Seen::Unknown;
    };
    if pid == std::process::id() {
        return Seen::ThisProcess;
    }
    if pid == 0 {
        // The pid is not one this PID namespace can name: its process ended, or lives
        // outside. Either way nothing here can be asked; wait as for an ending holder.
        return Seen::Gone { pid: None };
    }
    match proc::process(pid) {
        None => Seen::Gone { pid: Some(pid) },
        Some(process) if process.exiting => Seen::Exiting {
            pid,
            command: process.command,
        },
        Some(process) => Seen::Live {
            pid,
            command: process.command,
        },
    }
}

#[cfg(not(target_os = "linux"))]
fn holder_of(_file: &File) -> Seen {
    Seen::Unknown
}

/// What `/proc` says about locks and processes.
#[cfg(target_os = "linux")]
mod proc {
    use std::path::Path;

    /// `PF_EXITING` in `/proc/<pid>/stat`'s flags: the process is in its exit.
    const PF_EXITING: u64 = 0x4;
    /// SIGKILL's bit in the pending-signal masks of `/proc/<pid>/status`.
    const SIGKILL_BIT: u64 = 1 << (9 - 1);

    /// The pid that took the `flock` write lock on the file `dev`/`ino`.
    pub(super) fn flock_owner(dev: u64, ino: u64) -> Option<u32> {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        owner_in(&locks, &device_text(dev, ino))
    }

    /// `MAJOR:MINOR:INODE` as `/proc/locks` writes it.
    fn device_text(dev: u64, ino: u64) -> String {
        // The kernel's encoding of a `dev_t` in `stat` (glibc's major()/minor()).
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        format!("{major:02x}:{minor:02x}:{ino}")
    }

    /// Lines look like `3: FLOCK  ADVISORY  WRITE 4242 fe:00:5374109 0 EOF`; a process
    /// waiting for the lock is listed under it as `3: -> FLOCK …` and is skipped.
    pub(super) fn owner_in(locks: &str, device: &str) -> Option<u32> {
        locks.lines().find_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let (kind, _, mode, pid, file) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            (kind == "FLOCK" && mode == "WRITE" && file == device)
                .then(|| pid.parse().ok())
                .flatten()
        })
    }

    pub(super) struct Process {
        pub command: String,
        /// In its exit, a zombie, or killed and not yet in its exit.
        pub exiting: bool,
    }

    /// `None` when no process has the pid.
    pub(super) fn process(pid: u32) -> Option<Process> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let (command, exiting) = parse_stat(&stat);
        Some(Process {
            command,
            exiting: exiting || sigkill_pending(&status),
        })
    }

    /// `pid (comm) state ppid pgrp session tty tpgid flags …`: the command, and whether the
    /// state or flags say the process is ending.
    pub(super) fn parse_stat(stat: &str) -> (String, bool) {
        let command = stat
            .split_once('(')
            .and_then(|(_, rest)| rest.rsplit_once(')'))
            .map_or_else(|| "?".to_owned(), |(command, _)| command.to_owned());
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or_default();
        let flags = fields
            .nth(5)
            .and_then(|flags| flags.parse::<u64>().ok())
            .unwrap_or(0);
        let ending = matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0;
        (command, ending)
    }

    /// A SIGKILL is pending: `kill` returned, the exit has not begun.
    pub(super) fn sigkill_pending(status: &str) -> bool {
        status.lines().any(|line| {
            let mask = line
                .strip_prefix("ShdPnd:")
                .or_else(|| line.strip_prefix("SigPnd:"));
            mask.and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                .is_some_and(|mask| mask & SIGKILL_BIT != 0)
        })
    }

    /// Other processes with a descriptor open on `path` (those this user may look at; a few
    /// at most).
    pub(super) fn processes_with_open(path: &Path) -> Vec<u32> {
        let Ok(target) = std::fs::canonicalize(path) else {
            return Vec::new();
        };
        let Ok(processes) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for process in processes.flatten() {
            let Some(pid) = process
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
                .filter(|pid| *pid != std::process::id())
            else {
                continue;
            };
            let Ok(descriptors) = std::fs::read_dir(process.path().join("fd")) else {
                continue;
            };
            let holds = descriptors
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link == target));
            if holds {
                found.push(pid);
                if found.len() == 8 {
                    break;
                }
            }
        }
        found
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_owner_is_the_write_lock_on_the_file_not_a_waiter_or_another_file() {
            let locks = "1: FLOCK  ADVISORY  WRITE 15663 fe:00:5374109 0 EOF\n\
                         2: POSIX  ADVISORY  WRITE 99 fe:00:777 0 EOF\n\
                         3: FLOCK  ADVISORY  WRITE 14017 fe:00:777 0 EOF\n\
                         3: -> FLOCK  ADVISORY  WRITE 14085 fe:00:777 0 EOF\n";
            assert_eq!(owner_in(locks, "fe:00:777"), Some(14017));
            assert_eq!(owner_in(locks, "fe:00:5374109"), Some(15663));
            assert_eq!(owner_in(locks, "fe:01:777"), None);
            assert_eq!(device_text((0xfe << 8) | 0x01, 12), "fe:01:12");
        }

        #[test]
        fn a_process_is_exiting_by_its_state_its_flags_or_a_pending_sigkill() {
            let stat = |state: &str, flags: u64| {
                format!("4242 (tool rail) x) {state} 1 4242 4242 0 -1 {flags} 0 0")
            };
            assert_eq!(
                parse_stat(&stat("S", 0x40_0040)),
                ("tool rail) x".to_owned(), false)
            );
            assert!(parse_stat(&stat("R", 0x40_044c)).1);
            assert!(parse_stat(&stat("Z", 0)).1);
            assert!(sigkill_pending(
                "State:\tR\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n"
            ));
            assert!(!sigkill_pending(
                "SigPnd:\t0000000000000002\nShdPnd:\t0000000000000000\n"
            ));
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod proc {
    pub(super) fn processes_with_open(_path: &std::path::Path) -> Vec<u32> {
        Vec::new()
    }
}
