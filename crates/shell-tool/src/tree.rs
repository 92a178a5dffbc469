//! Programs that are not sandboxed but must end whole: a long-lived helper such as an MCP
//! server runs with the files, network and environment it is given, as the first process
//! of a PID namespace of its own, so when it is stopped — or when the runtime dies, even by
//! SIGKILL — every process it started ends with it, `setsid` and double-forked ones
//! included. It is the shell tool's kill path without the sandbox: the same waiter, init and
//! lifeline (`namespace`), no mounts, no Landlock, no seccomp, no limits.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};

use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use crate::confined::ConfineError;
use crate::namespace::{Containment, Report, StatusChannel, contain};

/// A program to start as the root of a process tree that ends whole.
///
/// ```no_run
/// use toolrail_shell_tool::ProcessTree;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // `sleep` started by a program that leaves it behind in a session of its own.
/// let mut tree = ProcessTree::new("bash", "/tmp")
///     .arg("-c")
///     .arg("setsid sleep 1000 & echo started")
///     .env("PATH", "/usr/bin:/bin")
///     .spawn()?;
/// tree.kill(); // the setsid'd `sleep` ends too: its PID namespace is gone
/// tree.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ProcessTree {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    workdir: PathBuf,
}

impl ProcessTree {
    /// `program` (a path, or a name looked up on the `PATH` of the environment given) in
    /// `workdir`, with an empty environment until [`ProcessTree::env`] adds to it.
    pub fn new(program: impl Into<OsString>, workdir: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            workdir: workdir.into(),
        }
    }

    /// Adds an argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    #[must_use]
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable of the program's environment (nothing is inherited).
    #[must_use]
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Starts the program with stdin, stdout and stderr piped, as the first process of a
    /// new PID namespace (inside a user namespace mapping this user to itself). Where the
    /// namespace cannot be made, the spawn fails with [`ConfineError::Unavailable`], or the
    /// process ends at once and [`TreeChild::setup_failure`] says why; the program never
    /// ran. A caller that can live with a weaker tree (a process group, which a `setsid`
    /// descendant escapes) decides so itself.
    pub fn spawn(&self) -> Result<TreeChild, ConfineError> {
        let workdir =
            std::ffi::CString::new(self.workdir.as_os_str().as_encoded_bytes()).map_err(|_| {
                ConfineError::Unavailable(format!(
                    "the folder {} has a NUL byte in its name",
                    self.workdir.display()
                ))
            })?;
        let containment = Containment {
            extra_namespaces: 0,
            join_network: None,
            mounts: Vec::new(),
            fresh_proc: false,
            pid_max: None,
            workdir,
            rlimits: Vec::new(),
            landlock: None,
            seccomp: Vec::new(),
            drop_capabilities: false,
            controlling_terminal: false,
        };
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.args).current_dir(&self.workdir);
        let status = contain(&mut command, containment).map_err(|error| {
            ConfineError::Unavailable(format!("the status channel could not be made: {error}"))
        })?;
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .env_clear()
            .envs(self.env.iter().map(|(name, value)| (name, value)));
        match command.spawn() {
            Ok(child) => Ok(TreeChild { child, status }),
            Err(error) => Err(match failure_of(&status) {
                Some(why) => ConfineError::Unavailable(why),
                None => ConfineError::Spawn(error),
            }),
        }
    }
}

/// A running process tree.
pub struct TreeChild {
    child: Child,
    status: StatusChannel,
}

impl std::fmt::Debug for TreeChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeChild")
            .field("id", &self.child.id())
            .finish_non_exhaustive()
    }
}

impl TreeChild {
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

    /// The process id of the tree's root outside the namespace (the process that holds the
    /// namespace open; killing it ends the whole tree); `None` once it has been waited for.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Ends the whole tree at once (SIGKILL to its root, whose death ends the namespace).
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }

    /// Asks the program to end: SIGTERM to its process group, which lives below the
    /// tree's root (the root must live on, or the namespace would end at once, with no
    /// time for the program to finish). Follow with [`TreeChild::kill`] after a grace.
    pub fn terminate(&self) {
        let group = self.child.id().and_then(crate::process::group_below);
        if let Some(group) = group {
            // A group already gone has nothing to end.
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
        }
    }

    /// Waits for the tree's root to end.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// After the program ended: why its namespace could not be made, if it could not (then
    /// the program never ran). Read from a channel the program cannot write.
    pub fn setup_failure(&self) -> Option<String> {
        failure_of(&self.status)
    }
}

fn failure_of(status: &StatusChannel) -> Option<String> {
    match status.read() {
        Report::Failed(failure) => Some(failure.describe(&[])),
        Report::Garbled => Some("the namespace's status channel held garbage".to_owned()),
        Report::Silent | Report::Started => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, BufReader};

    use toolrail_test_support::processes::alive;

    use super::ProcessTree;

    #[tokio::test]
    async fn a_setsid_grandchild_ends_with_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let spawned = ProcessTree::new("bash", dir.path())
            .arg("-c")
            // The grandchild is found by the odd number on its command line; the host's
            // /proc is the one the namespace sees too, but with the namespace's pids.
            .arg("setsid sleep 31.4159 </dev/null >/dev/null 2>&1 & echo up; exec sleep 30")
            .env("PATH", "/usr/bin:/bin")
            .spawn();
        let mut tree = match spawned {
            Ok(tree) => tree,
            // Without unprivileged user namespaces there is no tree to test here.
            Err(error) => {
                assert!(std::env::var_os("CI").is_none(), "{error}");
                return;
            }
        };
        let mut lines = BufReader::new(tree.take_stdout().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.as_deref(), Some("up"), "{:?}", tree.setup_failure());
        let sleeper = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(Result::ok)
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                .find(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|line| line.windows(7).any(|part| part == b"31.4159"))
                        && alive(*pid)
                })
        };
        // `up` may come before `setsid` has exec'd the sleeper: look for it a while.
        let mut found = None;
        for _ in 0..200 {
            found = sleeper();
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let pid = found.expect("the setsid sleep runs");
        tree.kill();
        tree.wait().await.unwrap();
        for _ in 0..200 {
            if !alive(pid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the setsid grandchild {pid} outlived its tree");
    }
}
