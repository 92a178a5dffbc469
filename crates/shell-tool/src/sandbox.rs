//! What a command may touch and what enforces it: the sandbox modes, the two tiers, the
//! per-command limits, and the command line that wraps a program in them. Both tiers run
//! the command as the first process of a new PID namespace, so nothing it starts outlives
//! it, and both build the same file view (`file_view`).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::process::Command;
use toolrail_tools_core::ProtectedPaths;

use crate::file_view::{ViewPlan, ViewStep, WalkCache};
use crate::namespace::{Containment, MountStep, Report, StatusChannel, contain};
use crate::{landlock_rules, namespace, seccomp};

/// What a command may touch (DESIGN §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// The whole file system read-only but a private temp folder; no network.
    #[default]
    ReadOnly,
    /// The workspace roots writable too (every `.git` in them stays read-only); no network.
    WorkspaceWrite,
    /// No file or network restriction; the process tree is still contained, its limits
    /// still apply, and it has no privileges.
    FullAccess,
}

impl SandboxMode {
    /// The mode as configurations name it: `read-only`, `workspace-write`, `full-access`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::FullAccess => "full-access",
        }
    }
}

/// What enforces the sandbox. Both build the same view and the same seccomp filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SandboxTier {
    /// Made in-process between fork and exec: user, PID, mount, IPC, UTS and (without
    /// network) network namespaces, the file system remounted read-only with binds for what
    /// may be written, hidden paths masked, a fresh `/proc`, a process limit, no
    /// capabilities, `NoNewPrivs`, then Landlock and seccomp as second layers. Needs
    /// unprivileged user namespaces; nothing to install.
    #[default]
    Namespaces,
    /// bubblewrap at this path: the same namespaces and view made by bubblewrap (which may
    /// be installed setuid where user namespaces are restricted), with the same seccomp
    /// filter. Landlock cannot be added (bubblewrap execs the command itself, and Landlock
    /// forbids the mounts bubblewrap makes), and the process limit is `RLIMIT_NPROC`, which
    /// does not bind a runtime running as root.
    Bubblewrap(PathBuf),
}

impl SandboxTier {
    /// The tier as configurations name it: `namespaces`, `bubblewrap`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Namespaces => "namespaces",
            Self::Bubblewrap(_) => "bubblewrap",
        }
    }

    /// bubblewrap where Debian installs it.
    pub fn bubblewrap() -> Self {
        Self::Bubblewrap(PathBuf::from("/usr/bin/bwrap"))
    }
}

/// More than the configured sandbox allows, which a call may ask for with a justification;
/// only an approval grants it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Escalation {
    /// Write files in the workspace (`.git` stays read-only).
    WorkspaceWrite,
    /// Open network connections.
    Network,
}

impl Escalation {
    /// The escalation as a call's `escalate` names it: `workspace-write`, `network`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkspaceWrite => "workspace-write",
            Self::Network => "network",
        }
    }
}

/// Limits on one command and everything it starts, set before it runs. `Default` gives
/// the documented defaults; `None` leaves a limit as the runtime's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Processes at once (default 1,024). Namespaces tier: the PID namespace's `pid_max`
    /// is this plus 300, because Linux hands out PIDs below 300 only before the first
    /// wrap: up to 299 more may exist until the command has made 300 processes.
    /// Bubblewrap tier: `RLIMIT_NPROC`, which does not bind a runtime running as root.
    pub processes: Option<u32>,
    /// `RLIMIT_DATA` per process (default 8 GiB): heap and private writable mappings;
    /// reserved-but-unused address space (V8, the JVM) does not count.
    pub memory_bytes: Option<u64>,
    /// `RLIMIT_FSIZE` (default 4 GiB): a write past it fails and the writer gets SIGXFSZ.
    pub file_bytes: Option<u64>,
    /// `RLIMIT_AS`: bytes of address space (none by default; code mode's Python uses it).
    pub address_space: Option<u64>,
    /// `RLIMIT_CPU`: seconds of CPU time; SIGXCPU past it, SIGKILL a second later.
    pub cpu_seconds: Option<u64>,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            processes: Some(1024),
            memory_bytes: Some(8 << 30),
            file_bytes: Some(4 << 30),
            address_space: None,
            cpu_seconds: None,
        }
    }
}

impl ResourceLimits {
    /// No limits at all.
    pub const fn none() -> Self {
        Self {
            processes: None,
            memory_bytes: None,
            file_bytes: None,
            address_space: None,
            cpu_seconds: None,
        }
    }

    /// The rlimits to set; `nproc` adds `RLIMIT_NPROC` for the process limit.
    fn rlimits(&self, nproc: bool) -> Vec<(libc::__rlimit_resource_t, u64)> {
        let mut rlimits = Vec::new();
        if let Some(bytes) = self.memory_bytes {
            rlimits.push((libc::RLIMIT_DATA, bytes));
        }
        if let Some(bytes) = self.file_bytes {
            rlimits.push((libc::RLIMIT_FSIZE, bytes));
        }
        if let Some(bytes) = self.address_space {
            rlimits.push((libc::RLIMIT_AS, bytes));
        }
        if let Some(seconds) = self.cpu_seconds {
            // SIGXCPU at the soft limit, SIGKILL a second later at the hard one.
            rlimits.push((libc::RLIMIT_CPU, seconds));
        }
        if nproc && let Some(processes) = self.processes {
            rlimits.push((libc::RLIMIT_NPROC, u64::from(processes)));
        }
        rlimits
    }

    /// The limits as the result shows them.
    pub(crate) fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "processes": self.processes,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "address_space_bytes": self.address_space,
            "cpu_seconds": self.cpu_seconds,
        })
    }
}

/// Everything one command runs with.
pub(crate) struct Confinement<'a> {
    pub mode: SandboxMode,
    pub network: bool,
    pub tier: &'a SandboxTier,
    pub roots: &'a [PathBuf],
    pub protected: &'a ProtectedPaths,
    /// Read-only to the command (full outputs, other calls' temp folders).
    pub spill_dir: &'a Path,
    /// The call's own writable folder; it must exist.
    pub private_tmp: &'a Path,
    pub workdir: &'a Path,
    pub limits: ResourceLimits,
    /// Folder listings from the tool's earlier calls.
    pub walk_cache: Option<&'a WalkCache>,
    /// The command's stdin is a pseudo-terminal (its path, to let the command open it
    /// again as `/dev/tty`), which becomes its controlling terminal.
    pub terminal: Option<&'a Path>,
}

/// A command ready to spawn in its sandbox, with the channel that tells whether the
/// sandbox could be made.
pub(crate) struct Prepared {
    pub command: Command,
    pub check: SetupCheck,
}

impl Prepared {
    /// See [`SetupCheck::setup_failure`].
    pub(crate) fn setup_failure(&self, stderr: &str) -> Option<String> {
        self.check.setup_failure(stderr)
    }
}

/// Tells, after a confined process ended, whether its sandbox could be made.
pub(crate) struct SetupCheck {
    status: StatusChannel,
    tier: &'static str,
    /// What each mount step does, to name a failed one.
    steps: Vec<String>,
}

impl SetupCheck {
    /// After the command ended (or could not be spawned): why the sandbox could not be
    /// made, if it could not. `stderr` is what the process wrote, which in the bubblewrap
    /// tier is bubblewrap's own account when the sandbox was never finished.
    pub(crate) fn setup_failure(&self, stderr: &str) -> Option<String> {
        match (self.status.read(), self.tier) {
            (Report::Failed(failure), _) => Some(failure.describe(&self.steps)),
            (Report::Garbled, _) => Some("the sandbox's status channel held garbage".to_owned()),
            (Report::Started, _) | (Report::Silent, "namespaces") => None,
            (Report::Silent, _) => {
                let said = stderr.trim();
                Some(if said.is_empty() {
                    "bubblewrap ended before the sandbox stood".to_owned()
                } else {
                    format!("bubblewrap: {}", said.trim_start_matches("bwrap: "))
                })
            }
        }
    }
}

/// The shell prologue bubblewrap runs first: it says the sandbox stands on descriptor 3,
/// closes 3 and 4 (the status channel, the seccomp program), then becomes the command.
const BWRAP_PROLOGUE: &str = "printf S >&3; exec 3>&- 4>&-; exec \"$@\"";

impl Confinement<'_> {
    /// The command that runs `argv` confined; stdio and environment are the caller's to
    /// set. `Err` says why the sandbox cannot be prepared (nothing ran).
    pub(crate) fn prepare(
        &self,
        argv: impl IntoIterator<Item = OsString>,
    ) -> Result<Prepared, String> {
        let sandboxed = self.mode != SandboxMode::FullAccess;
        let view = if sandboxed {
            ViewPlan {
                workspace_write: self.mode == SandboxMode::WorkspaceWrite,
                roots: self.roots,
                protected: self.protected,
                spill_dir: self.spill_dir,
                private_tmp: self.private_tmp,
                cache: self.walk_cache,
            }
            .steps()
        } else {
            Vec::new()
        };
        let argv: Vec<OsString> = argv.into_iter().collect();
        match self.tier {
            SandboxTier::Namespaces => self.namespaces(argv, &view),
            SandboxTier::Bubblewrap(program) => self.bubblewrap(program, argv, &view),
        }
    }

    fn namespaces(&self, argv: Vec<OsString>, view: &[ViewStep]) -> Result<Prepared, String> {
        let sandboxed = self.mode != SandboxMode::FullAccess;
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| "no program to run".to_owned())?;
        let mut mounts = Vec::with_capacity(view.len());
        let mut steps = Vec::with_capacity(view.len());
        for step in view {
            let mount = match step {
                ViewStep::Writable(path) => MountStep::Writable(c_path(path)?),
                ViewStep::ReadOnly(path) => MountStep::ReadOnly(c_path(path)?),
                ViewStep::Hide {
                    path, mount_points, ..
                } => MountStep::Hide {
                    path: c_path(path)?,
                    mount_points: mount_points
                        .iter()
                        .map(|point| c_path(point))
                        .collect::<Result<_, _>>()?,
                },
            };
            steps.push(mount.describe());
            mounts.push(mount);
        }
        // A private /dev/shm, writable: the host's stays read-only like the rest.
        let shm = landlock_rules::shared_memory_folder(self.private_tmp);
        if sandboxed && Path::new("/dev/shm").is_dir() && std::fs::create_dir(&shm).is_ok() {
            let mount = MountStep::WritableAt {
                source: c_path(&shm)?,
                target: c_path(Path::new("/dev/shm"))?,
            };
            steps.push(mount.describe());
            mounts.push(mount);
        }
        let mut extra_namespaces = 0;
        let mut join_network = None;
        if sandboxed {
            extra_namespaces |= libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
            if !self.network {
                join_network = namespace::shared_network();
                if join_network.is_none() {
                    extra_namespaces |= libc::CLONE_NEWNET;
                }
            }
        }
        let landlock = if sandboxed {
            landlock_rules::ruleset(self)?
        } else {
            None
        };
        let containment = Containment {
            extra_namespaces,
            join_network,
            mounts,
            fresh_proc: sandboxed,
            pid_max: self
                .limits
                .processes
                .map(|processes| (u64::from(processes) + 300).to_string().into_bytes()),
            workdir: c_path(self.workdir)?,
            rlimits: self.limits.rlimits(false),
            landlock,
            seccomp: if sandboxed {
                seccomp::program(self.network)
            } else {
                Vec::new()
            },
            drop_capabilities: sandboxed,
            controlling_terminal: self.terminal.is_some(),
        };
        let mut command = std::process::Command::new(program);
        command.args(args);
        command.current_dir(self.workdir);
        let status = contain(&mut command, containment)
            .map_err(|error| format!("the status channel could not be made: {error}"))?;
        Ok(Prepared {
            command: Command::from(command),
            check: SetupCheck {
                status,
                tier: "namespaces",
                steps,
            },
        })
    }

    fn bubblewrap(
        &self,
        program: &Path,
        argv: Vec<OsString>,
        view: &[ViewStep],
    ) -> Result<Prepared, String> {
        let sandboxed = self.mode != SandboxMode::FullAccess;
        let mut bwrap = std::process::Command::new(program);
        bwrap.args(BWRAP_NAMESPACES);
        if sandboxed {
            if !self.network {
                bwrap.arg("--unshare-net");
            }
            bwrap.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        } else {
            bwrap.args([
                "--bind",
                "/",
                "/",
                "--dev-bind",
                "/dev",
                "/dev",
                "--proc",
                "/proc",
            ]);
        }
        let mut sealed = Vec::new();
        for step in view {
            match step {
                ViewStep::Writable(path) => {
                    bwrap.arg("--bind").arg(path).arg(path);
                }
                ViewStep::ReadOnly(path) => {
                    bwrap.arg("--ro-bind").arg(path).arg(path);
                }
                ViewStep::Hide {
                    path, folder: true, ..
                } => {
                    bwrap.arg("--perms").arg("0555").arg("--tmpfs").arg(path);
                    sealed.push(path);
                }
                ViewStep::Hide {
                    path,
                    folder: false,
                    ..
                } => {
                    bwrap.arg("--ro-bind").arg("/dev/null").arg(path);
                }
            }
        }
        for path in sealed {
            bwrap.arg("--remount-ro").arg(path);
        }
        let filter = if sandboxed {
            let bytes = seccomp::program_bytes(self.network);
            bwrap.args(["--seccomp", "4"]);
            Some(
                namespace::memory_file(&bytes)
                    .map_err(|error| format!("the seccomp program could not be staged: {error}"))?,
            )
        } else {
            None
        };
        bwrap.arg("--chdir").arg(self.workdir).args([
            "--",
            "/bin/sh",
            "-c",
            BWRAP_PROLOGUE,
            "toolrail-sandbox",
        ]);
        if self.terminal.is_some() {
            // bubblewrap starts the command in a new session without a terminal; util-linux
            // `setsid --ctty` makes the pseudo-terminal on stdin its controlling terminal
            // (and `--wait` keeps the command's end the sandbox's end).
            bwrap.args(["setsid", "--wait", "--ctty"]);
        }
        bwrap.args(argv);
        bwrap.current_dir(self.workdir);
        // The process limit here is RLIMIT_NPROC (it does not bind root: see the tier).
        let rlimits = self.limits.rlimits(true);
        let status = match filter {
            Some(filter) => namespace::prepare_bubblewrap(&mut bwrap, rlimits, filter),
            None => namespace::memory_file(&[])
                .and_then(|empty| namespace::prepare_bubblewrap(&mut bwrap, rlimits, empty)),
        }
        .map_err(|error| format!("the status channel could not be made: {error}"))?;
        Ok(Prepared {
            command: Command::from(bwrap),
            check: SetupCheck {
                status,
                tier: "bubblewrap",
                steps: Vec::new(),
            },
        })
    }
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("`{}` holds a NUL byte", path.display()))
}

/// bubblewrap's flags besides the file system: every namespace it can make but the network
/// (decided per call), no nested user namespaces, no capabilities even for root, the
/// sandbox killed when bubblewrap dies, and a new session (no terminal to push input into).
/// The environment is already scrubbed by the tool, so it passes through.
const BWRAP_NAMESPACES: [&str; 10] = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
];

/// Remembers that a tier was seen to work here. The check starts a trial process, so it runs
/// off the async workers and is bounded in time; a failure (perhaps passing: a process
/// limit reached) is checked again next time rather than remembered.
#[derive(Debug, Default)]
pub struct TierCheck {
    usable: std::sync::atomic::AtomicBool,
}

impl TierCheck {
    /// A check that has not seen any tier work yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `Ok` once `tier` can contain a command here; `Err` says why not and what to do.
    pub async fn ensure(&self, tier: &SandboxTier) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        if self.usable.load(Ordering::Acquire) {
            return Ok(());
        }
        let trial = tier.clone();
        let checked = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tokio::task::spawn_blocking(move || crate::diagnose::diagnose(&trial)),
        )
        .await;
        match checked {
            Ok(Ok(diagnosis)) => match diagnosis.problem {
                None => {
                    self.usable.store(true, Ordering::Release);
                    Ok(())
                }
                Some(problem) => Err(problem),
            },
            Ok(Err(error)) => Err(format!("the check could not run: {error}")),
            Err(_) => Err("the check did not finish within 10 s".to_owned()),
        }
    }
}

/// Runs `true` in the full sandbox of `tier` (read-only mode, no network, no roots) and
/// says what stopped it, if anything did.
pub(crate) fn trial(tier: &SandboxTier) -> Result<(), String> {
    let scratch = std::env::temp_dir().join(format!("toolrail-trial-{}", std::process::id()));
    let private_tmp = scratch.join("tmp");
    std::fs::create_dir_all(&private_tmp)
        .map_err(|error| format!("{}: {error}", private_tmp.display()))?;
    let protected = ProtectedPaths::none();
    let confinement = Confinement {
        mode: SandboxMode::ReadOnly,
        network: false,
        tier,
        roots: &[],
        protected: &protected,
        spill_dir: &scratch,
        private_tmp: &private_tmp,
        workdir: &private_tmp,
        limits: ResourceLimits::default(),
        walk_cache: None,
        terminal: None,
    };
    let result = (|| {
        let mut prepared = confinement.prepare(["true".into()])?;
        let output = prepared
            .command
            .as_std_mut()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        let (ran, stderr) = match output {
            Ok(output) => (
                output.status.success(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ),
            Err(error) => (false, error.to_string()),
        };
        if let Some(why) = prepared.setup_failure(&stderr) {
            return Err(why);
        }
        if ran {
            Ok(())
        } else {
            Err(format!("a trial command failed: {}", stderr.trim()))
        }
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
