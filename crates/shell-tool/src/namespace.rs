//! A PID namespace without extra programs. Between fork and exec, the spawned child (the
//! *waiter*) makes a user and a PID namespace and forks the namespace's first process, a
//! tiny *init* that leads a new session and forks the command. Three processes, because
//! each has one job:
//!
//! - the command is not PID 1, so the SIGTERM sent to its group is delivered (the kernel
//!   drops signals to a namespace's init that has no handler for them);
//! - the init reaps orphans, and when the command ends it hands the command's exact wait
//!   status to the waiter over a pipe and exits, which ends every process left in the
//!   namespace; it dies with the waiter (`PR_SET_PDEATHSIG`), and the command with it;
//! - the waiter, outside the namespace, is the process the tool spawned and waits for: it
//!   ends the way the command ended (its exit code, or its signal, with core dumps off so a
//!   crash cannot write this process's memory into the workspace). If the runtime itself
//!   dies (even by SIGKILL) the waiter kills the init, and the namespace ends with it: it
//!   watches a *lifeline*, a pipe whose write end only the runtime keeps open.
//!   (`PR_SET_PDEATHSIG` cannot serve here: it fires when the *thread* that forked exits,
//!   and the runtime's threads come and go.)
//!
//! This replaces `unshare --user --pid --fork --kill-child -- setsid`, two programs whose
//! execs cost about a millisecond each on the machines we measure. It is the one place in
//! the crate that needs `unsafe`: `pre_exec` runs in a forked copy of a threaded process,
//! where only async-signal-safe calls are sound, so everything it needs is made before the
//! fork and the closures only make system calls (`fork` is the raw `clone` system call, so
//! no `pthread_atfork` handler runs).
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::unix::process::CommandExt;

/// The lifeline: `(read end, write end)`, made once per process, both close-on-exec. Every
/// waiter closes its inherited copy of the write end at once and watches the read end: it
/// reads end-of-file only when the runtime — the one holder left — is gone.
fn lifeline() -> (libc::c_int, libc::c_int) {
    static LIFELINE: std::sync::Mutex<Option<(libc::c_int, libc::c_int)>> =
        std::sync::Mutex::new(None);
    let mut lifeline = LIFELINE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(ends) = *lifeline {
        return ends;
    }
    let mut ends = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array. They are kept open for the
    // life of the process. A failure (out of descriptors) is not kept: the next command
    // tries again, and this one's waiter watches nothing (-1 is ignored by poll).
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return (-1, -1);
    }
    *lifeline = Some((ends[0], ends[1]));
    (ends[0], ends[1])
}

/// Makes `command` start as the first process of a new PID namespace (inside a new user
/// namespace mapping the current user to itself, so no privilege is needed), leading its own
/// session and process group.
pub(crate) fn enter_pid_namespace(command: &mut std::process::Command) {
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = format!("{uid} {uid} 1").into_bytes();
    let gid_map = format!("{gid} {gid} 1").into_bytes();
    let (lifeline_in, lifeline_out) = lifeline();
    let enter = move || {
        // SAFETY: this runs in the child between fork and exec. It allocates nothing and
        // makes only async-signal-safe system calls; the buffers were made before the fork.
        unsafe {
            // Only the runtime may hold the lifeline's write end.
            if lifeline_out >= 0 {
                libc::close(lifeline_out);
            }
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) != 0 {
                return Err(io::Error::last_os_error());
            }
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &uid_map)?;
            write_file(c"/proc/self/gid_map", &gid_map)?;
            let mut status_pipe = [0; 2];
            if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            let [read_end, write_end] = status_pipe;
            match raw_fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // The namespace's init: dies with the waiter, leads a session.
                    libc::close(read_end);
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                        || libc::setsid() == -1
                    {
                        return Err(io::Error::last_os_error());
                    }
                    match raw_fork() {
                        -1 => Err(io::Error::last_os_error()),
                        0 => {
                            // The command: dies with the init, then execs.
                            libc::close(write_end);
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return Err(io::Error::last_os_error());
                            }
                            Ok(())
                        }
                        command => init(command, write_end),
                    }
                }
                init => waiter(init, read_end, lifeline_in),
            }
        }
    };
    // SAFETY: see the closure: async-signal-safe calls only.
    unsafe {
        command.pre_exec(enter);
    }
}

/// `fork` as the bare system call.
///
/// # Safety
/// As `fork`; the child may only make async-signal-safe calls.
unsafe fn raw_fork() -> libc::pid_t {
    // SAFETY: clone with only an exit signal and no new stack behaves as fork.
    unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) as libc::pid_t }
}

/// Closes every descriptor but the two in `keep` (which may be equal, or -1), so that the
/// command's pipes (and the spawner's pipe reporting exec errors) close when the command's
/// copies close.
///
/// # Safety
/// Async-signal-safe.
unsafe fn close_all_but(keep: [libc::c_int; 2]) {
    let [first, second] = keep;
    let (low, high) = if first <= second {
        (first, second)
    } else {
        (second, first)
    };
    // SAFETY: plain system calls on descriptor numbers.
    unsafe {
        let mut closed = true;
        let mut from: libc::c_int = 0;
        for kept in [low, high] {
            if kept < from {
                continue;
            }
            if kept > from {
                closed &= libc::syscall(
                    libc::SYS_close_range,
                    from as libc::c_uint,
                    (kept - 1) as libc::c_uint,
                    0u32,
                ) == 0;
            }
            from = kept + 1;
        }
        closed &= libc::syscall(libc::SYS_close_range, from as libc::c_uint, u32::MAX, 0u32) == 0;
        if !closed {
            for fd in 0..1024 {
                if fd != low && fd != high {
                    libc::close(fd);
                }
            }
        }
    }
}

/// The namespace's init: reaps every process that ends in the namespace until the command
/// does, then writes the command's wait status to `status_out` and exits, ending the
/// namespace.
///
/// # Safety
/// Async-signal-safe: to be called between fork and exec. Never returns.
unsafe fn init(command: libc::pid_t, status_out: libc::c_int) -> ! {
    // SAFETY: plain system calls; `status` is a valid buffer.
    unsafe {
        close_all_but([status_out, status_out]);
        let mut status: libc::c_int = 0;
        loop {
            let reaped = libc::waitpid(-1, &mut status, 0);
            if reaped == command {
                break;
            }
            if reaped == -1 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let bytes = status.to_ne_bytes();
        libc::write(status_out, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0)
    }
}

/// The waiter: waits for the init and ends as the command ended — as the init reported it,
/// or as the init itself ended if it could not report (it was killed). If the lifeline
/// breaks first (the runtime died), it kills the init, which ends the namespace.
///
/// # Safety
/// Async-signal-safe: to be called between fork and exec. Never returns.
unsafe fn waiter(init: libc::pid_t, status_in: libc::c_int, lifeline: libc::c_int) -> ! {
    // SAFETY: plain system calls; the buffers are valid.
    unsafe {
        close_all_but([status_in, lifeline]);
        // The init's report (or its end) makes the status pipe readable; the runtime's
        // death makes the lifeline readable (end of file). A negative fd is not watched.
        loop {
            let mut watched = [
                libc::pollfd {
                    fd: status_in,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: lifeline,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ready = libc::poll(watched.as_mut_ptr(), 2, -1);
            if ready < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break;
            }
            if watched[1].revents != 0 {
                libc::kill(init, libc::SIGKILL);
                break;
            }
            if watched[0].revents != 0 {
                break;
            }
        }
        let mut init_status: libc::c_int = 0;
        loop {
            let waited = libc::waitpid(init, &mut init_status, 0);
            if waited == init {
                break;
            }
            if waited == -1 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let mut bytes = [0u8; 4];
        let read = libc::read(status_in, bytes.as_mut_ptr().cast(), bytes.len());
        let status = if read == 4 {
            libc::c_int::from_ne_bytes(bytes)
        } else {
            init_status
        };
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            // Re-raising a crash signal must not dump this process (a copy of the runtime's
            // memory) as a core file.
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// Writes `bytes` to the file at `path` in one `write`.
///
/// # Safety
/// Async-signal-safe: to be called between fork and exec.
unsafe fn write_file(path: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: plain system calls on a valid path and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if written < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
