//! The sandbox, made between fork and exec with nothing but system calls: no helper program
//! to ship, no re-exec for an embedder to dispatch. The spawned child (the *waiter*) makes
//! the namespaces and forks the namespace's first process, a tiny *init* that builds the
//! file view and forks the command, which drops its powers and execs. Three processes,
//! because each has one job:
//!
//! - the command is not PID 1, so the SIGTERM sent to its group is delivered (the kernel
//!   drops signals to a namespace's init that has no handler for them);
//! - the init makes the mounts (a fresh `/proc` must be made from inside the PID namespace),
//!   reaps orphans, and when the command ends hands the command's exact wait status to the
//!   waiter over a pipe and exits, which ends every process left in the namespace; it dies
//!   with the waiter (`PR_SET_PDEATHSIG`), and the command with it;
//! - the waiter, outside the PID namespace, is the process the tool spawned and waits for:
//!   it ends the way the command ended (its exit code, or its signal, with core dumps off so
//!   a crash cannot write this process's memory into the workspace). If the runtime itself
//!   dies (even by SIGKILL) the waiter kills the init, and the namespace ends with it: it
//!   watches a *lifeline*, a pipe whose write end only the runtime keeps open.
//!   (`PR_SET_PDEATHSIG` cannot serve here: it fires when the *thread* that forked exits,
//!   and the runtime's threads come and go.)
//!
//! A step that fails writes what failed to the *status channel* — a close-on-exec pipe the
//! command cannot inherit — and the command never runs; the tool reads the channel, never
//! the command's exit code or stderr, to tell "the sandbox could not be made" from "the
//! command ran".
//!
//! This is the one module of the crate that needs `unsafe`: `pre_exec` runs in a forked copy
//! of a threaded process, where only async-signal-safe calls are sound, so everything is made
//! before the fork ([`Containment`] holds it) and the closures only make system calls (`fork`
//! is the raw `clone` system call, so no `pthread_atfork` handler runs).
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

/// What the sandbox of one command is made of, built before the fork.
pub(crate) struct Containment {
    /// `CLONE_NEW*` flags besides the user and PID namespaces, which are always made.
    pub extra_namespaces: libc::c_int,
    /// Join the process's shared empty network namespace ([`shared_network`]) instead of
    /// making one: `(user namespace, network namespace)` descriptors.
    pub join_network: Option<(RawFd, RawFd)>,
    /// Mounts, in order, after the whole file system is made read-only; empty: no mount
    /// namespace changes at all (full access).
    pub mounts: Vec<MountStep>,
    /// Mount a fresh `/proc` for the PID namespace (needs a mount namespace).
    pub fresh_proc: bool,
    /// The PID namespace's `pid_max`, as the decimal text to write: a process limit that
    /// binds whoever runs the runtime (`RLIMIT_NPROC` exempts root).
    pub pid_max: Option<Vec<u8>>,
    /// Where the command starts (again after the mounts, which cover the old folder).
    pub workdir: CString,
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// A Landlock ruleset, made and filled in the parent.
    pub landlock: Option<OwnedFd>,
    /// The seccomp program; empty: none.
    pub seccomp: Vec<libc::sock_filter>,
    /// Drop every capability and lock root's exec magic off. Full access keeps them (its
    /// command may make namespaces of its own and use them); `NoNewPrivs` is set always.
    pub drop_capabilities: bool,
    /// The command's stdin is a pseudo-terminal it must own: it leads a session of its own
    /// with that terminal as its controlling terminal (so `/dev/tty`, job control and
    /// Ctrl-C reach it).
    pub controlling_terminal: bool,
}

/// One mount the init makes. Paths are absolute; none may contain a symlink (each is opened
/// with `RESOLVE_NO_SYMLINKS`, so a symlink planted since the plan was made fails the setup
/// rather than deciding where a grant lands).
pub(crate) enum MountStep {
    /// The folder bound onto itself, writable (a root in `workspace-write`, the private
    /// temp folder). Its source is opened before any mount.
    Writable(CString),
    /// The path bound onto itself, read-only (a `.git`, the spill folder shown again inside
    /// a hidden session folder). Its source is opened before any mount.
    ReadOnly(CString),
    /// The folder `source` bound writable over `target` (the call's private shared-memory
    /// folder over `/dev/shm`). Its source is opened before any mount; a missing target
    /// is skipped.
    WritableAt { source: CString, target: CString },
    /// The path hidden: a folder gets an empty read-only tmpfs (with `mount_points`, paths
    /// relative to it, made first for later binds), a file `/dev/null` read-only. A path
    /// that does not exist has nothing to hide.
    Hide {
        path: CString,
        mount_points: Vec<CString>,
    },
}

impl MountStep {
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Writable(path) => format!("binding {} writable", path.to_string_lossy()),
            Self::ReadOnly(path) => format!("binding {} read-only", path.to_string_lossy()),
            Self::WritableAt { source, target } => format!(
                "binding {} writable at {}",
                source.to_string_lossy(),
                target.to_string_lossy()
            ),
            Self::Hide { path, .. } => format!("hiding {}", path.to_string_lossy()),
        }
    }

    /// The path whose mount is cloned, opened before any mount is made.
    fn source(&self) -> Option<&CStr> {
        match self {
            Self::Writable(path) | Self::ReadOnly(path) => Some(path),
            Self::WritableAt { source, .. } => Some(source),
            Self::Hide { .. } => None,
        }
    }
}

/// The stages a setup failure names (the high half of a status record's first word; the low
/// half is the index of the mount step, where there is one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Stage {
    Namespaces = 1,
    IdMaps = 2,
    Fork = 3,
    OpenSource = 4,
    ReadOnlyRoot = 5,
    Mount = 6,
    SealHidden = 7,
    Proc = 8,
    PidMax = 9,
    Limits = 10,
    Capabilities = 11,
    Workdir = 12,
    Landlock = 13,
    Seccomp = 14,
    Descriptors = 15,
    Terminal = 16,
}

impl Stage {
    fn from_code(code: u16) -> Option<Self> {
        [
            Self::Namespaces,
            Self::IdMaps,
            Self::Fork,
            Self::OpenSource,
            Self::ReadOnlyRoot,
            Self::Mount,
            Self::SealHidden,
            Self::Proc,
            Self::PidMax,
            Self::Limits,
            Self::Capabilities,
            Self::Workdir,
            Self::Landlock,
            Self::Seccomp,
            Self::Descriptors,
            Self::Terminal,
        ]
        .into_iter()
        .find(|stage| *stage as u16 == code)
    }
}

/// A setup failure as read from the status channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetupFailure {
    pub stage: Option<Stage>,
    pub step: usize,
    pub errno: i32,
}

impl SetupFailure {
    /// What failed, in words: `mounts` names the steps.
    pub(crate) fn describe(&self, mounts: &[String]) -> String {
        let what = match self.stage {
            Some(Stage::Namespaces) if self.step == 1 => {
                "joining the shared network namespace".to_owned()
            }
            Some(Stage::Namespaces) => "making the user, PID and mount namespaces".to_owned(),
            Some(Stage::IdMaps) => "mapping the user into the namespace".to_owned(),
            Some(Stage::Fork) => "starting the namespace's first process".to_owned(),
            Some(Stage::OpenSource) => match mounts.get(self.step) {
                Some(step) => format!("opening the source before {step}"),
                None => "opening /dev/null".to_owned(),
            },
            Some(Stage::Mount) => mounts
                .get(self.step)
                .cloned()
                .unwrap_or_else(|| format!("mount step {}", self.step)),
            Some(Stage::ReadOnlyRoot) => "making the file system read-only".to_owned(),
            Some(Stage::SealHidden) => "making the hiding folders read-only".to_owned(),
            Some(Stage::Proc) => "mounting a fresh /proc".to_owned(),
            Some(Stage::PidMax) => "setting the process limit (pid_max)".to_owned(),
            Some(Stage::Limits) => "setting the resource limits".to_owned(),
            Some(Stage::Capabilities) => "dropping capabilities".to_owned(),
            Some(Stage::Workdir) => "entering the working folder".to_owned(),
            Some(Stage::Landlock) => "applying the Landlock ruleset".to_owned(),
            Some(Stage::Seccomp) => "applying the seccomp filter".to_owned(),
            Some(Stage::Descriptors) => "closing inherited descriptors".to_owned(),
            Some(Stage::Terminal) => {
                "making the pseudo-terminal the command's controlling terminal".to_owned()
            }
            None => "an unknown step".to_owned(),
        };
        format!("{what}: {}", io::Error::from_raw_os_error(self.errno))
    }
}

/// The parent's end of the status channel.
pub(crate) struct StatusChannel {
    read: OwnedFd,
}

impl StatusChannel {
    /// What the channel says once every writer is gone (after the command ended): a
    /// failure, or `None` when no setup step failed. `started` is the byte the bubblewrap
    /// tier's prologue writes once the sandbox stands.
    pub(crate) fn read(&self) -> Report {
        let mut bytes = [0u8; 16];
        let mut filled = 0;
        while let Some(room) = bytes.get_mut(filled..).filter(|room| !room.is_empty()) {
            // SAFETY: reading into a valid buffer from a descriptor this value owns. It is
            // non-blocking, so a writer still alive cannot hang the caller.
            let read =
                unsafe { libc::read(self.read.as_raw_fd(), room.as_mut_ptr().cast(), room.len()) };
            if read <= 0 {
                break;
            }
            filled += read as usize;
        }
        let bytes = bytes.get(..filled).unwrap_or_default();
        match bytes {
            [] => Report::Silent,
            [STARTED, ..] => Report::Started,
            [a, b, c, d, e, f, g, h, ..] => {
                let word = u32::from_ne_bytes([*a, *b, *c, *d]);
                Report::Failed(SetupFailure {
                    stage: Stage::from_code((word >> 16) as u16),
                    step: (word & 0xffff) as usize,
                    errno: i32::from_ne_bytes([*e, *f, *g, *h]),
                })
            }
            _ => Report::Garbled,
        }
    }
}

/// The byte the bubblewrap prologue writes once it runs inside the finished sandbox.
pub(crate) const STARTED: u8 = b'S';

/// What a status channel held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Report {
    /// Nothing: in the namespace tier, the command ran; in the bubblewrap tier, the sandbox
    /// was never finished.
    Silent,
    /// The bubblewrap prologue ran inside the sandbox.
    Started,
    Failed(SetupFailure),
    /// Bytes no writer of ours writes.
    Garbled,
}

/// A pipe: `(read end, write end)`, both close-on-exec, the read end non-blocking.
fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array; each is owned once, below.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    // The write end blocks: a record is 8 bytes, far below the pipe's buffer.
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok((read, write))
}

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

/// Makes `command` start in the sandbox `containment` describes, as the first process of a
/// new PID namespace (inside a new user namespace mapping the current user to itself, so no
/// privilege is needed), leading its own session and process group. Returns the parent's end
/// of the status channel.
pub(crate) fn contain(
    command: &mut std::process::Command,
    containment: Containment,
) -> io::Result<StatusChannel> {
    let (status_read, status_write) = status_pipe()?;
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = format!("{uid} {uid} 1").into_bytes();
    let gid_map = format!("{gid} {gid} 1").into_bytes();
    let (lifeline_in, lifeline_out) = lifeline();
    let mut child = Child {
        status: status_write,
        sources: vec![-1; containment.mounts.len()],
        hidden: vec![-1; containment.mounts.len()],
        containment,
        uid_map,
        gid_map,
        lifeline_in,
        lifeline_out,
    };
    let enter = move || {
        // SAFETY: this runs in the child between fork and exec; see `Child::enter`.
        unsafe { child.enter() }
    };
    // SAFETY: the closure makes async-signal-safe calls only.
    unsafe {
        command.pre_exec(enter);
    }
    Ok(StatusChannel { read: status_read })
}

/// Everything the child needs, owned by the `pre_exec` closure (so descriptors made for
/// it close in the parent when the command value is dropped after the spawn).
struct Child {
    status: OwnedFd,
    containment: Containment,
    /// Source descriptors of the mount steps, opened in the child: room made here.
    sources: Vec<RawFd>,
    /// The tmpfs mounts hiding folders, kept to be made read-only last.
    hidden: Vec<RawFd>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    lifeline_in: RawFd,
    lifeline_out: RawFd,
}

/// A failed step: its stage, the mount step's index, errno.
type StepError = (Stage, usize, i32);

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

impl Child {
    /// The waiter's part, then the init's and the command's (in the processes it forks).
    ///
    /// # Safety
    /// Between fork and exec: allocates nothing, makes only async-signal-safe calls.
    unsafe fn enter(&mut self) -> io::Result<()> {
        // SAFETY: plain system calls on buffers made before the fork.
        unsafe {
            // Only the runtime may hold the lifeline's write end.
            if self.lifeline_out >= 0 {
                libc::close(self.lifeline_out);
            }
            if let Some((user, net)) = self.containment.join_network
                && (libc::setns(user, libc::CLONE_NEWUSER) != 0
                    || libc::setns(net, libc::CLONE_NEWNET) != 0)
            {
                return self.refuse((Stage::Namespaces, 1, errno()));
            }
            let flags =
                libc::CLONE_NEWUSER | libc::CLONE_NEWPID | self.containment.extra_namespaces;
            if libc::unshare(flags) != 0 {
                return self.refuse((Stage::Namespaces, 0, errno()));
            }
            let mapped = write_file(c"/proc/self/setgroups", b"deny")
                .and_then(|()| write_file(c"/proc/self/uid_map", &self.uid_map))
                .and_then(|()| write_file(c"/proc/self/gid_map", &self.gid_map));
            if let Err(code) = mapped {
                return self.refuse((Stage::IdMaps, 0, code));
            }
            let mut exit_pipe = [0; 2];
            if libc::pipe2(exit_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return self.refuse((Stage::Fork, 0, errno()));
            }
            let [read_end, write_end] = exit_pipe;
            match raw_fork() {
                -1 => self.refuse((Stage::Fork, 0, errno())),
                0 => {
                    // The namespace's init: dies with the waiter, leads a session, builds
                    // the file view.
                    libc::close(read_end);
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                        || libc::setsid() == -1
                    {
                        self.fail_init((Stage::Fork, 0, errno()));
                    }
                    if let Err(failure) = self.build_view() {
                        self.fail_init(failure);
                    }
                    match raw_fork() {
                        -1 => self.fail_init((Stage::Fork, 0, errno())),
                        0 => {
                            // The command: dies with the init, drops its powers, then execs.
                            libc::close(write_end);
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return self.refuse((Stage::Fork, 0, errno()));
                            }
                            match self.confine_command() {
                                Ok(()) => Ok(()),
                                Err(failure) => self.refuse(failure),
                            }
                        }
                        command => init(command, write_end),
                    }
                }
                init => waiter(init, read_end, self.lifeline_in),
            }
        }
    }

    /// Writes the failure to the status channel and returns it as the error `pre_exec`
    /// returns (the process then exits without running the command).
    fn refuse(&self, (stage, step, code): StepError) -> io::Result<()> {
        report(self.status.as_raw_fd(), stage, step, code);
        Err(io::Error::from_raw_os_error(code))
    }

    /// The init could not make the sandbox: says so and ends, so the waiter ends and the
    /// command never exists.
    fn fail_init(&self, failure: StepError) -> ! {
        let (stage, step, code) = failure;
        report(self.status.as_raw_fd(), stage, step, code);
        // SAFETY: ending this process is always sound.
        unsafe { libc::_exit(126) }
    }

    /// The init's work: the mounts, a fresh `/proc`, the process limit.
    ///
    /// # Safety
    /// Between fork and exec.
    unsafe fn build_view(&mut self) -> Result<(), StepError> {
        // SAFETY: plain system calls; every buffer was made before the fork.
        unsafe {
            if !self.containment.mounts.is_empty() {
                self.mount_all()?;
            }
            if self.containment.fresh_proc {
                mount_proc().map_err(|code| (Stage::Proc, 0, code))?;
            }
            if let Some(pid_max) = &self.containment.pid_max {
                write_file(c"/proc/sys/kernel/pid_max", pid_max)
                    .map_err(|code| (Stage::PidMax, 0, code))?;
            }
        }
        Ok(())
    }

    /// # Safety
    /// Between fork and exec.
    unsafe fn mount_all(&mut self) -> Result<(), StepError> {
        // SAFETY: plain system calls on paths and buffers made before the fork; every
        // descriptor opened here is closed here or by the exec (close-on-exec).
        unsafe {
            // Sources first, while every path still shows what the host has there.
            for (index, step) in self.containment.mounts.iter().enumerate() {
                if let Some(path) = step.source() {
                    let fd = open_beneath_root(path);
                    if fd < 0 {
                        return Err((Stage::OpenSource, index, errno()));
                    }
                    if let Some(slot) = self.sources.get_mut(index) {
                        *slot = fd;
                    }
                }
            }
            let dev_null = open_beneath_root(c"/dev/null");
            if dev_null < 0 {
                return Err((Stage::OpenSource, usize::MAX & 0xffff, errno()));
            }
            // Everything read-only and private: what follows opens holes in that.
            let everything = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                attr_clr: 0,
                propagation: libc::MS_PRIVATE,
                userns_fd: 0,
            };
            if mount_setattr(libc::AT_FDCWD, c"/", libc::AT_RECURSIVE, &everything) != 0 {
                return Err((Stage::ReadOnlyRoot, 0, errno()));
            }
            for index in 0..self.containment.mounts.len() {
                let source = self.sources.get(index).copied().unwrap_or(-1);
                let Some(step) = self.containment.mounts.get(index) else {
                    break;
                };
                let made = match step {
                    MountStep::Writable(path) => bind(source, path, Access::Writable),
                    MountStep::WritableAt { target, .. } => {
                        match bind(source, target, Access::Writable) {
                            Err(libc::ENOENT) => Ok(()),
                            other => other,
                        }
                    }
                    MountStep::ReadOnly(path) => bind(source, path, Access::ReadOnly),
                    MountStep::Hide { path, mount_points } => {
                        match hide(path, mount_points, dev_null) {
                            Ok(tmpfs) => {
                                if let Some(slot) = self.hidden.get_mut(index) {
                                    *slot = tmpfs;
                                }
                                Ok(())
                            }
                            Err(code) => Err(code),
                        }
                    }
                };
                made.map_err(|code| (Stage::Mount, index, code))?;
            }
            // The hiding folders took their mount points; now nothing more goes in them.
            let sealed = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            for &tmpfs in &self.hidden {
                if tmpfs >= 0 && mount_setattr(tmpfs, c"", libc::AT_EMPTY_PATH, &sealed) != 0 {
                    return Err((Stage::SealHidden, 0, errno()));
                }
            }
        }
        Ok(())
    }

    /// The command's own restrictions, last before exec: limits, inherited descriptors,
    /// no new privileges, no capabilities, its folder, Landlock, seccomp.
    ///
    /// # Safety
    /// Between fork and exec.
    unsafe fn confine_command(&mut self) -> Result<(), StepError> {
        // SAFETY: plain system calls on values made before the fork.
        unsafe {
            if self.containment.controlling_terminal
                && (libc::setsid() == -1 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0)
            {
                return Err((Stage::Terminal, 0, errno()));
            }
            for &(resource, value) in &self.containment.rlimits {
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err((Stage::Limits, resource as usize, errno()));
                }
            }
            // Descriptors the runtime inherited or opened without close-on-exec must not
            // reach the command: every one above stderr closes at exec.
            if libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) != 0
            {
                return Err((Stage::Descriptors, 0, errno()));
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err((Stage::Capabilities, 0, errno()));
            }
            if self.containment.drop_capabilities {
                drop_capabilities().map_err(|code| (Stage::Capabilities, 0, code))?;
            }
            if libc::chdir(self.containment.workdir.as_ptr()) != 0 {
                return Err((Stage::Workdir, 0, errno()));
            }
            if let Some(ruleset) = &self.containment.landlock
                && libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0
            {
                return Err((Stage::Landlock, 0, errno()));
            }
            if !self.containment.seccomp.is_empty() {
                let program = libc::sock_fprog {
                    len: self.containment.seccomp.len() as libc::c_ushort,
                    filter: self.containment.seccomp.as_mut_ptr(),
                };
                if libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0u32,
                    &program as *const libc::sock_fprog,
                ) != 0
                {
                    return Err((Stage::Seccomp, 0, errno()));
                }
            }
        }
        Ok(())
    }
}

/// Prepares `command` (bubblewrap) for the bubblewrap tier: the limits set, every inherited
/// descriptor closed at exec but the status channel's write end as descriptor 3 and the
/// seccomp program's as descriptor 4, which bubblewrap reads. Returns the parent's end of
/// the status channel; the prologue inside the sandbox writes [`STARTED`] to descriptor 3
/// and closes it before the command runs.
pub(crate) fn prepare_bubblewrap(
    command: &mut std::process::Command,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    seccomp: OwnedFd,
) -> io::Result<StatusChannel> {
    let (status_read, status_write) = status_pipe()?;
    let status = status_write;
    let enter = move || {
        // SAFETY: between fork and exec: plain system calls on values made before the fork.
        unsafe {
            for &(resource, value) in &rlimits {
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Out of the way of 3 and 4 first, then into place (dup2 clears close-on-exec).
            let status_high = libc::fcntl(status.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100);
            let seccomp_high = libc::fcntl(seccomp.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100);
            if status_high < 0
                || seccomp_high < 0
                || libc::dup2(status_high, 3) != 3
                || libc::dup2(seccomp_high, 4) != 4
            {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(
                libc::SYS_close_range,
                5u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the closure makes async-signal-safe calls only.
    unsafe {
        command.pre_exec(enter);
    }
    Ok(StatusChannel { read: status_read })
}

/// An empty network namespace (only a loopback device, down), inside a user namespace of
/// its own, made once per process: confined commands without network join it instead of
/// making one each, which costs about a millisecond per command. Joining it gives no more
/// network than a new one: nothing in it reaches out, and commands cannot reach each other
/// through it (seccomp refuses inet and unix sockets, Landlock abstract ones).
/// `None` where it cannot be made; commands then make their own.
pub(crate) fn shared_network() -> Option<(RawFd, RawFd)> {
    static SHARED: std::sync::Mutex<Option<Option<(RawFd, RawFd)>>> = std::sync::Mutex::new(None);
    let mut shared = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(made) = *shared {
        return made;
    }
    let made = make_shared_network();
    *shared = Some(made);
    made
}

fn make_shared_network() -> Option<(RawFd, RawFd)> {
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = format!("{uid} {uid} 1").into_bytes();
    let gid_map = format!("{gid} {gid} 1").into_bytes();
    let mut ready = [-1; 2];
    let mut release = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into valid arrays; all four are closed below.
    // The child makes only async-signal-safe calls on buffers made before the fork.
    unsafe {
        if libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return None;
        }
        if libc::pipe2(release.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            libc::close(ready[0]);
            libc::close(ready[1]);
            return None;
        }
        let child = raw_fork();
        if child == 0 {
            // The child: make the namespaces, say so, wait until the parent holds them.
            libc::close(ready[0]);
            libc::close(release[1]);
            let made = libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0
                && write_file(c"/proc/self/setgroups", b"deny").is_ok()
                && write_file(c"/proc/self/uid_map", &uid_map).is_ok()
                && write_file(c"/proc/self/gid_map", &gid_map).is_ok();
            let byte = [u8::from(made)];
            libc::write(ready[1], byte.as_ptr().cast(), 1);
            let mut wait = [0u8; 1];
            libc::read(release[0], wait.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
        libc::close(ready[1]);
        libc::close(release[0]);
        let mut made = [0u8; 1];
        let said = child > 0 && libc::read(ready[0], made.as_mut_ptr().cast(), 1) == 1;
        let fds = if said && made[0] == 1 {
            // The parent is an ordinary process: std may allocate here.
            let open = |kind: &str| {
                std::fs::File::open(format!("/proc/{child}/ns/{kind}"))
                    .ok()
                    .map(std::os::fd::IntoRawFd::into_raw_fd)
            };
            match (open("user"), open("net")) {
                (Some(user), Some(net)) => Some((user, net)),
                (user, net) => {
                    for fd in [user, net].into_iter().flatten() {
                        libc::close(fd);
                    }
                    None
                }
            }
        } else {
            None
        };
        libc::close(ready[0]);
        libc::close(release[1]);
        if child > 0 {
            let mut status = 0;
            libc::waitpid(child, &mut status, 0);
        }
        fds
    }
}

/// A memory file holding `bytes`, for bubblewrap to read the seccomp program from.
pub(crate) fn memory_file(bytes: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a valid name; the descriptor is owned once, below.
    let fd = unsafe { libc::memfd_create(c"toolrail-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just made and is owned by nothing else.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut written = 0;
    while let Some(rest) = bytes.get(written..).filter(|rest| !rest.is_empty()) {
        // SAFETY: writing a valid buffer to a descriptor this function owns.
        let count = unsafe { libc::write(file.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
        if count <= 0 {
            return Err(io::Error::last_os_error());
        }
        written += count as usize;
    }
    // SAFETY: lseek on a descriptor this function owns.
    if unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_SET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Whether this process runs as root (the process limit of the bubblewrap tier does not
/// bind root).
pub(crate) fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The Landlock ABI version the kernel offers (0 when it has none).
pub(crate) fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: asking for the version takes no ruleset and no buffer.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const OPEN_TREE_CLONE: u32 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
const FSOPEN_CLOEXEC: u32 = 1;
const FSMOUNT_CLOEXEC: u32 = 1;
const FSCONFIG_SET_STRING: u32 = 1;
const FSCONFIG_CMD_CREATE: u32 = 6;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

#[derive(Clone, Copy)]
enum Access {
    Writable,
    ReadOnly,
}

/// # Safety
/// Async-signal-safe.
unsafe fn mount_setattr(
    dirfd: libc::c_int,
    path: &CStr,
    flags: libc::c_int,
    attr: &MountAttr,
) -> libc::c_long {
    // SAFETY: valid path and attribute buffer.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags as libc::c_uint,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}

/// An `O_PATH` descriptor of `path` (absolute), refusing any symlink on the way.
///
/// # Safety
/// Async-signal-safe.
unsafe fn open_beneath_root(path: &CStr) -> RawFd {
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: valid path and `open_how` buffer.
    unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        ) as RawFd
    }
}

/// Clones the mount tree at `source` and puts it over `path`, with `access`.
///
/// # Safety
/// Async-signal-safe.
unsafe fn bind(source: RawFd, path: &CStr, access: Access) -> Result<(), i32> {
    // SAFETY: plain system calls on valid buffers; descriptors closed before returning.
    unsafe {
        let tree = libc::syscall(
            libc::SYS_open_tree,
            source,
            c"".as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as u32
                | libc::AT_EMPTY_PATH as u32
                | libc::AT_RECURSIVE as u32,
        ) as RawFd;
        if tree < 0 {
            return Err(errno());
        }
        // Writable: only the top of the tree (mounts below stay read-only). Read-only:
        // the whole tree.
        let (attr, flags) = match access {
            Access::Writable => (
                MountAttr {
                    attr_set: 0,
                    attr_clr: MOUNT_ATTR_RDONLY,
                    propagation: 0,
                    userns_fd: 0,
                },
                libc::AT_EMPTY_PATH,
            ),
            Access::ReadOnly => (
                MountAttr {
                    attr_set: MOUNT_ATTR_RDONLY,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                },
                libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            ),
        };
        let result = if mount_setattr(tree, c"", flags, &attr) != 0 {
            Err(errno())
        } else {
            move_onto(tree, path)
        };
        libc::close(tree);
        result
    }
}

/// Attaches the detached mount `mount` over `path`, opened without following symlinks.
///
/// # Safety
/// Async-signal-safe.
unsafe fn move_onto(mount: RawFd, path: &CStr) -> Result<(), i32> {
    // SAFETY: plain system calls; the target descriptor is closed before returning.
    unsafe {
        let target = open_beneath_root(path);
        if target < 0 {
            return Err(errno());
        }
        let moved = libc::syscall(
            libc::SYS_move_mount,
            mount,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        );
        let result = if moved != 0 { Err(errno()) } else { Ok(()) };
        libc::close(target);
        result
    }
}

/// Hides `path`: an empty tmpfs over a folder (returned, still writable, so the caller can
/// seal it once later binds used its mount points), `/dev/null` read-only over anything
/// else. A path that does not exist has nothing to hide: `Ok(-1)`.
///
/// # Safety
/// Async-signal-safe.
unsafe fn hide(path: &CStr, mount_points: &[CString], dev_null: RawFd) -> Result<RawFd, i32> {
    // SAFETY: plain system calls on valid buffers.
    unsafe {
        let target = open_beneath_root(path);
        if target < 0 {
            let code = errno();
            return if code == libc::ENOENT {
                Ok(-1)
            } else {
                Err(code)
            };
        }
        let mut status: libc::stat = std::mem::zeroed();
        let statted = libc::fstat(target, &mut status);
        libc::close(target);
        if statted != 0 {
            return Err(errno());
        }
        if status.st_mode & libc::S_IFMT != libc::S_IFDIR {
            bind(dev_null, path, Access::ReadOnly)?;
            return Ok(-1);
        }
        let tmpfs = new_mount(
            c"tmpfs",
            &[(c"mode", c"0555"), (c"size", c"64k")],
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        )?;
        for point in mount_points {
            if libc::mkdirat(tmpfs, point.as_ptr(), 0o555) != 0 && errno() != libc::EEXIST {
                let code = errno();
                libc::close(tmpfs);
                return Err(code);
            }
        }
        if let Err(code) = move_onto(tmpfs, path) {
            libc::close(tmpfs);
            return Err(code);
        }
        Ok(tmpfs)
    }
}

/// A new detached mount of `fs_type` with string options, through the new mount API.
///
/// # Safety
/// Async-signal-safe.
unsafe fn new_mount(
    fs_type: &CStr,
    options: &[(&CStr, &CStr)],
    attributes: u64,
) -> Result<RawFd, i32> {
    // SAFETY: plain system calls on valid buffers; the context is closed before returning.
    unsafe {
        let context = libc::syscall(libc::SYS_fsopen, fs_type.as_ptr(), FSOPEN_CLOEXEC) as RawFd;
        if context < 0 {
            return Err(errno());
        }
        let mut configured = 0;
        for (key, value) in options {
            configured |= libc::syscall(
                libc::SYS_fsconfig,
                context,
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            );
        }
        if configured != 0
            || libc::syscall(
                libc::SYS_fsconfig,
                context,
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_void>(),
                0,
            ) != 0
        {
            let code = errno();
            libc::close(context);
            return Err(code);
        }
        let mount = libc::syscall(libc::SYS_fsmount, context, FSMOUNT_CLOEXEC, attributes) as RawFd;
        let code = errno();
        libc::close(context);
        if mount < 0 {
            return Err(code);
        }
        Ok(mount)
    }
}

/// A fresh `/proc` for this PID namespace, over the host's.
///
/// # Safety
/// Async-signal-safe; the caller must be in the PID namespace.
unsafe fn mount_proc() -> Result<(), i32> {
    // SAFETY: plain system calls.
    unsafe {
        let proc = new_mount(
            c"proc",
            &[],
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        )?;
        let moved = move_onto(proc, c"/proc");
        libc::close(proc);
        moved
    }
}

/// No root magic at exec, no capabilities in any set: the command is an ordinary user
/// inside its namespace, whatever user it is mapped to.
///
/// # Safety
/// Async-signal-safe.
unsafe fn drop_capabilities() -> Result<(), i32> {
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: plain system calls on valid buffers.
    unsafe {
        let locked = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_KEEP_CAPS_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, locked as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(errno());
        }
        for capability in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) != 0
                && errno() != libc::EINVAL
            {
                return Err(errno());
            }
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) != 0
        {
            return Err(errno());
        }
        let header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [
            CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Writes a failure record (stage and step, errno) to the status channel.
fn report(status: RawFd, stage: Stage, step: usize, code: i32) {
    let word = (u32::from(stage as u16) << 16) | (step as u32 & 0xffff);
    let mut record = [0u8; 8];
    record[..4].copy_from_slice(&word.to_ne_bytes());
    record[4..].copy_from_slice(&code.to_ne_bytes());
    // SAFETY: writing a valid buffer; a failure cannot be reported anywhere else.
    unsafe {
        libc::write(status, record.as_ptr().cast(), record.len());
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
/// or as the init itself ended if it could not report (it was killed, or could not make
/// the sandbox). If the lifeline breaks first (the runtime died), it kills the init, which
/// ends the namespace.
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

/// Writes `bytes` to the file at `path` in one `write`; the error is an errno.
///
/// # Safety
/// Async-signal-safe: to be called between fork and exec.
unsafe fn write_file(path: &CStr, bytes: &[u8]) -> Result<(), i32> {
    // SAFETY: plain system calls on a valid path and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let code = errno();
        libc::close(fd);
        if written < 0 {
            return Err(code);
        }
    }
    Ok(())
}
