//! Waiting for a confined command, and stopping it: SIGTERM to its process group, a grace,
//! then SIGKILL. The kill path needs only process ids, no lock of anyone else's.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use toolrail_tools_core::CancellationToken;

/// Why a command was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// It ran past its deadline.
    TimedOut,
    /// Its call was cancelled.
    Cancelled,
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The exit status, as the sandbox's wrapper reports it (under bubblewrap, a command
    /// killed by signal N exits with code 128 + N).
    pub status: ExitStatus,
    /// Why it was stopped, if it did not end by itself.
    pub stop: Option<Stop>,
}

/// Waits for `child` to end; past `timeout`, or once `cancel` fires, stops it.
pub(crate) async fn wait_or_stop(
    child: &mut Child,
    timeout: Duration,
    grace: Duration,
    cancel: &CancellationToken,
) -> std::io::Result<Ended> {
    let stop = tokio::select! {
        status = child.wait() => return status.map(|status| Ended { status, stop: None }),
        () = tokio::time::sleep(timeout) => Stop::TimedOut,
        () = cancel.cancelled() => Stop::Cancelled,
    };
    // The command's group is led by a process below the wrapper (the waiter of
    // `namespace`, or bubblewrap): bash itself, or bubblewrap's init in the namespace.
    // Signalling it spares the wrapper, which must live until the command ends or the
    // namespace would end at once, without the grace.
    let wrapper = child.id();
    let group = wrapper.and_then(group_below).or_else(|| {
        wrapper
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
    });
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGTERM);
    }
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            if let Some(group) = group {
                let _ = killpg(group, Signal::SIGKILL);
            }
            // The wrapper too; its death kills the namespace's first process, and with it
            // every process in the namespace.
            let _ = child.start_kill();
            child.wait().await?
        }
    };
    Ok(Ended {
        status,
        stop: Some(stop),
    })
}

/// The first process below `wrapper` (following first children, a few levels down) that
/// leads its own process group, read from `/proc`.
pub(crate) fn group_below(wrapper: u32) -> Option<Pid> {
    let mut parent = wrapper;
    for _ in 0..3 {
        let children =
            std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
        let child: u32 = children.split_whitespace().next()?.parse().ok()?;
        if process_group(child) == Some(child) {
            return i32::try_from(child).ok().map(Pid::from_raw);
        }
        parent = child;
    }
    None
}

/// The process group of `pid`: the fifth field of `/proc/<pid>/stat`, counted after the
/// command name (which may hold spaces and parentheses, so it is skipped by its last `)`).
fn process_group(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    // state, ppid, pgrp
    after_name.split_whitespace().nth(2)?.parse().ok()
}
