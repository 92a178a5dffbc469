//! Programs other than `bash` under the shell tool's sandbox and kill path: code mode runs
//! its Python programs this way. Always sandboxed (read-only or workspace-write, never full
//! access), in a PID namespace, with limits, stopped with SIGTERM, a grace and SIGKILL to
//! the whole tree.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use toolrail_tools_core::{CancellationToken, ProtectedPaths};

use crate::process::{Ended, wait_or_stop};
use crate::sandbox::{Confinement, ResourceLimits, SandboxMode, SandboxTier, SetupCheck};

/// Why a confined program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The sandbox cannot be had here; nothing ran.
    #[error("the sandbox is unavailable, so nothing ran: {0}")]
    Unavailable(String),
    /// The process could not be started (the program was not found, say); nothing ran.
    #[error("the program could not be started: {0}")]
    Spawn(#[from] std::io::Error),
}

/// A program to run confined. Its environment is exactly `env`: nothing is inherited.
#[derive(Clone, Debug)]
pub struct ConfinedCommand {
    /// The program: a path, or a name looked up on the `PATH` of `env`.
    pub program: OsString,
    /// Its arguments, after the program's own name.
    pub args: Vec<OsString>,
    /// `read-only` or `workspace-write`; `full-access` is refused.
    pub mode: SandboxMode,
    /// Whether the program may use the network.
    pub network: bool,
    /// What confines it; where the tier cannot be had, the program never runs.
    pub tier: SandboxTier,
    /// The workspace roots: writable in `workspace-write` mode (but their `.git`).
    pub roots: Vec<PathBuf>,
    /// What the program never sees or changes (by default the credential locations of the
    /// user's home).
    pub protected: ProtectedPaths,
    /// Writable in every mode; it must exist. Its parent folder is read-only to the program.
    pub private_tmp: PathBuf,
    /// The folder the program starts in.
    pub workdir: PathBuf,
    /// Every variable the program sees, and nothing else.
    pub env: Vec<(OsString, OsString)>,
    /// Limits on the program and everything it starts.
    pub limits: ResourceLimits,
}

impl ConfinedCommand {
    /// `program` in read-only mode without network, on the default tier, running in
    /// `workdir` with `private_tmp` as its one writable folder.
    pub fn new(
        program: impl Into<OsString>,
        private_tmp: impl Into<PathBuf>,
        workdir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            mode: SandboxMode::ReadOnly,
            network: false,
            tier: SandboxTier::default(),
            roots: Vec::new(),
            protected: ProtectedPaths::for_current_user(),
            private_tmp: private_tmp.into(),
            workdir: workdir.into(),
            env: Vec::new(),
            limits: ResourceLimits::default(),
        }
    }

    /// Starts the program with stdin, stdout and stderr piped, as the leader of its own
    /// process group in a PID namespace, inside its sandbox. If the sandbox cannot be made
    /// the program never runs: the spawn fails with [`ConfineError::Unavailable`], or the
    /// process ends at once and [`ConfinedChild::sandbox_failure`] says why.
    pub fn spawn(&self) -> Result<ConfinedChild, ConfineError> {
        if self.mode == SandboxMode::FullAccess {
            return Err(ConfineError::Unavailable(
                "a confined program cannot run with full access".to_owned(),
            ));
        }
        let spill_dir = self
            .private_tmp
            .parent()
            .map_or_else(|| self.private_tmp.clone(), PathBuf::from);
        let confinement = Confinement {
            mode: self.mode,
            network: self.network,
            tier: &self.tier,
            roots: &self.roots,
            protected: &self.protected,
            spill_dir: &spill_dir,
            private_tmp: &self.private_tmp,
            workdir: &self.workdir,
            limits: self.limits,
            walk_cache: None,
            terminal: None,
        };
        let argv = std::iter::once(self.program.clone()).chain(self.args.iter().cloned());
        let mut prepared = confinement
            .prepare(argv)
            .map_err(ConfineError::Unavailable)?;
        prepared
            .command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .env_clear()
            .envs(self.env.iter().map(|(name, value)| (name, value)));
        match prepared.command.spawn() {
            Ok(child) => Ok(ConfinedChild {
                child,
                check: prepared.check,
            }),
            Err(error) => Err(match prepared.check.setup_failure("") {
                Some(why) => ConfineError::Unavailable(why),
                None => ConfineError::Spawn(error),
            }),
        }
    }
}

/// A running confined program.
pub struct ConfinedChild {
    child: Child,
    check: SetupCheck,
}

impl ConfinedChild {
    /// The pipe to the program's stdin; `None` once taken.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The pipe from the program's stdout; `None` once taken.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The pipe from the program's stderr; `None` once taken.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Waits for the program to end; past `timeout`, or once `cancel` fires, stops it the
    /// way `bash` is stopped: SIGTERM to its group, `grace`, then SIGKILL to everything in
    /// its namespace.
    pub async fn wait_or_stop(
        &mut self,
        timeout: Duration,
        grace: Duration,
        cancel: &CancellationToken,
    ) -> std::io::Result<Ended> {
        wait_or_stop(&mut self.child, timeout, grace, cancel).await
    }

    /// After the program ended: why its sandbox could not be made, if it could not (then
    /// the program never ran). Read from the sandbox's status channel, not from anything
    /// the program could print; `stderr` is the process's stderr, which names bubblewrap's
    /// own failures.
    pub fn sandbox_failure(&self, stderr: &str) -> Option<String> {
        self.check.setup_failure(stderr)
    }
}
