//! What a command may touch and what enforces it: the sandbox modes, the two tiers, and the
//! command line that wraps `bash -c` in them. Both tiers run the command as the first
//! process of a new PID namespace, so nothing it starts outlives it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::process::Command;

use crate::namespace::enter_pid_namespace;

/// What a command may touch (DESIGN §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Nothing writable but `/dev/null` and a private temp folder; no network.
    #[default]
    ReadOnly,
    /// The workspace roots (but not `.git`) and the temp folder writable; no network.
    WorkspaceWrite,
    /// No file or network restriction; the process tree is still contained.
    FullAccess,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::FullAccess => "full-access",
        }
    }
}

/// What enforces the sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SandboxTier {
    /// A user and a PID namespace made between fork and exec (see `namespace`), then the
    /// `toolrail-sandbox` helper: Landlock for files, seccomp for inet sockets and `ptrace`.
    #[default]
    Landlock,
    /// bubblewrap at this path: new user, PID, IPC, UTS and (without network) network
    /// namespaces, a read-only view of `/` with only the writable folders bound writable, no
    /// capabilities — and the helper inside it as well, so a hole in one layer is not a hole.
    Bubblewrap(PathBuf),
}

impl SandboxTier {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Landlock => "landlock",
            Self::Bubblewrap(_) => "bubblewrap",
        }
    }

    /// bubblewrap where Debian installs it.
    pub fn bubblewrap() -> Self {
        Self::Bubblewrap(PathBuf::from("/usr/bin/bwrap"))
    }
}

/// The program that applies the sandbox and then becomes the command: the `toolrail-sandbox`
/// binary, or a program that calls [`sandbox_main`](crate::sandbox_main) when started with
/// its leading arguments (a re-exec of one's own binary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxHelper {
    pub program: PathBuf,
    pub leading_args: Vec<String>,
}

impl SandboxHelper {
    /// A helper binary of its own.
    pub fn binary(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            leading_args: Vec::new(),
        }
    }

    /// `program` started with `subcommand` first, which must make it call `sandbox_main`
    /// with the arguments after it.
    pub fn reexec(program: impl Into<PathBuf>, subcommand: impl Into<String>) -> Self {
        Self {
            program: program.into(),
            leading_args: vec![subcommand.into()],
        }
    }
}

impl From<PathBuf> for SandboxHelper {
    fn from(program: PathBuf) -> Self {
        Self::binary(program)
    }
}

impl From<&str> for SandboxHelper {
    fn from(program: &str) -> Self {
        Self::binary(program)
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
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkspaceWrite => "workspace-write",
            Self::Network => "network",
        }
    }
}

/// rlimits the helper sets on itself before it becomes the command; every process the
/// command starts inherits them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceLimits {
    /// `RLIMIT_AS`: bytes of address space; an allocation past it fails.
    pub address_space: Option<u64>,
    /// `RLIMIT_CPU`: seconds of CPU time; SIGXCPU past it, SIGKILL a second later.
    pub cpu_seconds: Option<u64>,
}

/// Everything one command runs with.
pub(crate) struct Confinement<'a> {
    pub mode: SandboxMode,
    pub network: bool,
    pub tier: &'a SandboxTier,
    /// `None` only in full-access mode.
    pub helper: Option<&'a SandboxHelper>,
    pub roots: &'a [PathBuf],
    pub private_tmp: &'a Path,
    pub workdir: &'a Path,
    /// Set by the helper, so only with one.
    pub limits: ResourceLimits,
}

impl Confinement<'_> {
    /// The command that runs `argv` confined; stdio and environment are the caller's to
    /// set.
    pub(crate) fn command(&self, argv: impl IntoIterator<Item = OsString>) -> Command {
        let mut inner: Vec<OsString> = Vec::new();
        if let Some(helper) = self.helper {
            inner.push(helper.program.as_os_str().into());
            inner.extend(helper.leading_args.iter().map(OsString::from));
            inner.extend(["--mode", self.mode.as_str(), "--write"].map(OsString::from));
            inner.push(self.private_tmp.into());
            for root in self.roots {
                inner.push("--root".into());
                inner.push(root.into());
            }
            if self.network {
                inner.push("--net".into());
            }
            if let Some(bytes) = self.limits.address_space {
                inner.push("--rlimit-as".into());
                inner.push(bytes.to_string().into());
            }
            if let Some(seconds) = self.limits.cpu_seconds {
                inner.push("--rlimit-cpu".into());
                inner.push(seconds.to_string().into());
            }
            inner.push("--".into());
        }
        inner.extend(argv);
        let mut line = match self.tier {
            SandboxTier::Landlock => {
                let (program, args) = inner.split_at(1);
                let mut line = Command::new(&program[0]);
                line.args(args);
                enter_pid_namespace(line.as_std_mut());
                line
            }
            SandboxTier::Bubblewrap(program) => {
                let mut bwrap = Command::new(program);
                bwrap.args(BWRAP_NAMESPACES);
                if !self.network && self.mode != SandboxMode::FullAccess {
                    bwrap.arg("--unshare-net");
                }
                self.bwrap_files(&mut bwrap);
                bwrap.arg("--chdir").arg(self.workdir).arg("--").args(inner);
                bwrap
            }
        };
        line.current_dir(self.workdir);
        line
    }

    /// bubblewrap's view of the file system: `/` read-only but in full-access mode, fresh
    /// `/dev` and `/proc`, and the folders the mode makes writable bound writable, each root's
    /// `.git` bound read-only again on top.
    fn bwrap_files(&self, bwrap: &mut Command) {
        if self.mode == SandboxMode::FullAccess {
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
            return;
        }
        bwrap.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        bwrap
            .arg("--bind")
            .arg(self.private_tmp)
            .arg(self.private_tmp);
        if self.mode == SandboxMode::WorkspaceWrite {
            // Every root first, then every `.git` read-only on top: a root bound after a
            // `.git` inside it (nested roots) would make that `.git` writable again.
            for root in self.roots {
                bwrap.arg("--bind").arg(root).arg(root);
            }
            for root in self.roots {
                let git = root.join(".git");
                if git.exists() {
                    bwrap.arg("--ro-bind").arg(&git).arg(&git);
                }
            }
        }
    }
}

/// bubblewrap's flags besides the file system: every namespace it can make but the network
/// (decided per call), no capabilities even for root, the sandbox killed when bubblewrap
/// dies, and a new session (no terminal to push input into). The environment is already
/// scrubbed by the tool, so it passes through.
const BWRAP_NAMESPACES: [&str; 9] = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
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
    pub fn new() -> Self {
        Self::default()
    }

    /// `Ok` once `tier` can contain a command here; `Err` says why not.
    pub async fn ensure(&self, tier: &SandboxTier) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        if self.usable.load(Ordering::Acquire) {
            return Ok(());
        }
        let trial = tier.clone();
        let checked = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tokio::task::spawn_blocking(move || check_tier(&trial)),
        )
        .await;
        match checked {
            Ok(Ok(Ok(()))) => {
                self.usable.store(true, Ordering::Release);
                Ok(())
            }
            Ok(Ok(Err(why))) => Err(why),
            Ok(Err(error)) => Err(format!("the check could not run: {error}")),
            Err(_) => Err("the check did not finish within 10 s".to_owned()),
        }
    }
}

/// Whether the tier can contain a command here: `Err` says why not. It starts a process, so
/// run it through a [`TierCheck`].
pub(crate) fn check_tier(tier: &SandboxTier) -> Result<(), String> {
    let (program, status) = match tier {
        SandboxTier::Landlock => {
            let mut trial = std::process::Command::new("true");
            enter_pid_namespace(&mut trial);
            (
                "a user and PID namespace",
                trial
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status(),
            )
        }
        SandboxTier::Bubblewrap(program) => (
            "bubblewrap",
            std::process::Command::new(program)
                .args(BWRAP_NAMESPACES)
                .args(["--unshare-net", "--ro-bind", "/", "/", "--dev", "/dev"])
                .args(["--proc", "/proc", "--tmpfs", "/tmp", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status(),
        ),
    };
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("{program} could not be made here ({status})")),
        Err(error) => Err(format!("{program} could not be made here: {error}")),
    }
}
