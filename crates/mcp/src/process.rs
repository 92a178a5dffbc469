//! A server's process: the root of a process tree that ends whole (its own PID namespace,
//! from the shell tool's kill path, so a descendant that calls `setsid` ends with it and
//! nothing outlives a runtime killed by SIGKILL), or — where namespaces cannot be made —
//! the leader of a process group, which such a descendant escapes. Either way the server
//! sees the files and network its user has: it is not sandboxed.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use toolrail_shell_tool::{ConfineError, ProcessTree, TreeChild};

use crate::config::ServerConfig;

/// Environment variables a server inherits; the configuration adds its own.
const ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "USER",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// The process behind a connection, kept for its drop (which kills it).
enum Process {
    Tree { root: TreeChild },
    Group { leader: tokio::process::Child },
}

/// A started server: its pipes, and the handle that ends it when dropped.
pub(crate) struct Spawned {
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
    /// The pid to signal: the tree's root, or the group's leader.
    pub(crate) pid: Option<u32>,
    /// Whether the whole tree ends with it.
    pub(crate) contained: bool,
    /// Kept so the process is killed when the connection is dropped.
    process: Process,
}

impl Spawned {
    /// Starts `config`'s server, in a process tree where one can be made; says why it could
    /// not be started otherwise.
    pub(crate) fn start(config: &ServerConfig) -> Result<Self, String> {
        let workdir = match &config.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir()
                .map_err(|error| format!("the current folder cannot be read: {error}"))?,
        };
        let env = environment(config);
        let tree = env
            .iter()
            .fold(
                ProcessTree::new(&config.command, &workdir).args(&config.args),
                |tree, (name, value)| tree.env(name, value),
            )
            .spawn();
        let why_not = match tree {
            Ok(mut child) => {
                return Ok(Self {
                    stdin: child.take_stdin(),
                    stdout: child.take_stdout(),
                    stderr: child.take_stderr(),
                    pid: child.id(),
                    contained: true,
                    process: Process::Tree { root: child },
                });
            }
            Err(ConfineError::Spawn(error)) => {
                return Err(format!(
                    "`{}` could not be started: {error}",
                    config.command
                ));
            }
            Err(ConfineError::Unavailable(why)) => why,
        };
        tracing::warn!(
            command = %config.command,
            "no PID namespace for the MCP server ({why_not}); it runs as a process group, which a descendant that calls setsid escapes"
        );
        let mut command = tokio::process::Command::new(&config.command);
        command
            .args(&config.args)
            .current_dir(&workdir)
            .env_clear()
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|error| format!("`{}` could not be started: {error}", config.command))?;
        Ok(Self {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            pid: child.id(),
            contained: false,
            process: Process::Group { leader: child },
        })
    }
}

impl Spawned {
    /// Waits up to `grace` for the server, whose stdin was closed, to end by itself; then
    /// sends its group SIGTERM and waits up to `term` more. Whether it ended (and was
    /// reaped); the caller kills what is left.
    pub(crate) async fn end_gracefully(&mut self, grace: Duration, term: Duration) -> bool {
        if tokio::time::timeout(grace, self.process.wait())
            .await
            .is_ok()
        {
            return true;
        }
        match &self.process {
            Process::Tree { root } => root.terminate(),
            Process::Group { .. } => signal_group(self.pid, nix::sys::signal::Signal::SIGTERM),
        }
        tokio::time::timeout(term, self.process.wait())
            .await
            .is_ok()
    }
}

impl Process {
    /// Until the server's process ended (at once if it cannot be waited for).
    async fn wait(&mut self) {
        // Only the end matters here, not how it ended.
        let _ = match self {
            Self::Tree { root } => root.wait().await,
            Self::Group { leader } => leader.wait().await,
        };
    }
}

/// What the server's environment holds: the allowed part of this process's, then the
/// configuration's own.
fn environment(config: &ServerConfig) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = ENV_ALLOW
        .iter()
        .filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?)))
        .collect();
    for (name, value) in &config.env {
        env.retain(|(kept, _)| kept.as_os_str() != name.as_str());
        env.push((name.into(), value.into()));
    }
    env
}

/// SIGKILL to a server's whole process group: with a process tree, its root, whose death
/// ends every process in the tree's namespace.
pub(crate) fn kill_group(group: Option<u32>) {
    signal_group(group, nix::sys::signal::Signal::SIGKILL);
}

/// `signal` to a server's process group (see [`kill_group`]).
fn signal_group(group: Option<u32>, signal: nix::sys::signal::Signal) {
    use nix::sys::signal::killpg;
    use nix::unistd::Pid;
    if let Some(pid) = group.and_then(|pid| i32::try_from(pid).ok()) {
        // A group that is gone has nothing left to end.
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}
