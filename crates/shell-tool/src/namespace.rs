//! A PID namespace without extra programs. Between fork and exec, the spawned child makes a
//! user and a PID namespace and forks once more: its own child, the first process of the
//! namespace and the leader of a new session, goes on to exec the command; the spawned
//! child stays behind as a waiter that ends the way the command ended. When the command ends,
//! the kernel ends every process left in the namespace; when the waiter is killed, the
//! command is killed with it (`PR_SET_PDEATHSIG`), and with it the namespace.
//!
//! This replaces `unshare --user --pid --fork --kill-child -- setsid`, two programs whose
//! execs cost about a millisecond each on the machines we measure. It is the one place in
//! the crate that needs `unsafe`: `pre_exec` runs in a forked copy of a threaded process,
//! where only async-signal-safe calls are sound, so everything it needs is made before the
//! fork and the closure only makes system calls.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::unix::process::CommandExt;

/// Makes `command` start as the first process of a new PID namespace (inside a new user
/// namespace mapping the current user to itself, so no privilege is needed), leading its own
/// session and process group.
pub(crate) fn enter_pid_namespace(command: &mut std::process::Command) {
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = format!("{uid} {uid} 1").into_bytes();
    let gid_map = format!("{gid} {gid} 1").into_bytes();
    let enter = move || {
        // SAFETY: this runs in the child between fork and exec. It allocates nothing and
        // calls only async-signal-safe system calls (unshare, open, write, close, fork,
        // setsid, prctl; in the waiter close_range, waitpid, signal, kill, _exit); the
        // buffers were made before the fork.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) != 0 {
                return Err(io::Error::last_os_error());
            }
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &uid_map)?;
            write_file(c"/proc/self/gid_map", &gid_map)?;
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // The namespace's first process: dies with the waiter, leads a session.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                        || libc::setsid() == -1
                    {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                }
                command => wait_and_mirror(command),
            }
        }
    };
    // SAFETY: see the closure: async-signal-safe calls only.
    unsafe {
        command.pre_exec(enter);
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

/// The waiter: holds no descriptor (so the command's pipes, and the spawner's pipe that
/// reports exec errors, close when the command's copies close), waits for the command, and
/// ends as it ended: with its exit code, or killed by its signal.
///
/// # Safety
/// Async-signal-safe: to be called between fork and exec. Never returns.
unsafe fn wait_and_mirror(command: libc::pid_t) -> ! {
    // SAFETY: plain system calls; `status` is a valid out-pointer.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        let mut status = 0;
        loop {
            let waited = libc::waitpid(command, &mut status, 0);
            if waited == command {
                break;
            }
            if waited == -1 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}
