//! `bash {command, description, timeout_ms?, workdir?}`: a fresh `bash -c` per call, stdin
//! closed, a scrubbed environment, in its own process group and its own PID namespace, so
//! that when the call returns nothing it started is alive (a `setsid` or double-forked
//! child dies with the namespace). Cancel and timeout: SIGTERM to the group, a grace, then
//! SIGKILL.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::process::{Child, Command};
use toolrail_tools_core::{
    Concurrency, SubjectKind, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool, WorkspaceRoots, is_simple_command,
};

use crate::output::{Captured, capture};

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

/// How the tool runs commands.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    pub roots: WorkspaceRoots,
    /// Where full outputs are spilled (the session folder).
    pub spill_dir: PathBuf,
    pub mode: SandboxMode,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// When the call gives no `timeout_ms`.
    pub default_timeout: Duration,
    /// Bytes of each stream shown (head and tail halves).
    pub output_cap: usize,
    /// Variables passed through from this process's environment, when set.
    pub env_allow: Vec<String>,
    /// Variables the embedder sets; the model cannot set any.
    pub env_extra: Vec<(String, String)>,
    /// The `toolrail-sandbox` helper binary (built with this crate). Without it the
    /// `read-only` and `workspace-write` modes cannot be enforced, and nothing runs in them.
    pub sandbox_helper: Option<PathBuf>,
    /// Globs of commands the embedder declares read-only (`git status*`, `ls*`): a matching
    /// simple command may run beside other calls. Everything else runs alone.
    pub read_only_commands: Vec<String>,
}

impl ShellConfig {
    pub fn new(roots: WorkspaceRoots, spill_dir: impl Into<PathBuf>) -> Self {
        Self {
            roots,
            spill_dir: spill_dir.into(),
            mode: SandboxMode::default(),
            grace: Duration::from_secs(2),
            default_timeout: Duration::from_secs(120),
            output_cap: 30 * 1024,
            env_allow: [
                "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "USER", "LOGNAME", "TZ",
            ]
            .map(str::to_owned)
            .to_vec(),
            env_extra: Vec::new(),
            read_only_commands: Vec::new(),
            sandbox_helper: None,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command line, run by `bash -c`.
    pub command: String,
    /// What the command does, in a few words, for the person watching.
    pub description: String,
    /// Stop the command after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The folder to run in (default: the workspace root); it must be inside the workspace.
    #[serde(default)]
    pub workdir: Option<String>,
}

pub struct BashTool {
    spec: ToolSpec,
    config: ShellConfig,
    read_only: Option<globset::GlobSet>,
}

impl BashTool {
    pub const NAME: &'static str = "bash";

    pub fn new(config: ShellConfig) -> Self {
        let description = format!(
            "Run a command with `bash -c` in the workspace (stdin closed, a clean environment). Output over {} KiB per stream is cut in the middle (head and tail kept) and the full output saved to a file named in the result. A non-zero exit code is reported, not treated as a failure. The command is stopped after `timeout_ms` (default {} s): SIGTERM, then SIGKILL. Background processes do not outlive the call.",
            config.output_cap / 1024,
            config.default_timeout.as_secs()
        );
        let spec = ToolSpec::for_args::<BashArgs>(Self::NAME, description)
            .kind(ToolKind::Execute)
            .subject("command", SubjectKind::Command);
        let mut globs = globset::GlobSetBuilder::new();
        for pattern in &config.read_only_commands {
            // A bad pattern only means fewer commands share: the safe side.
            if let Ok(glob) = globset::GlobBuilder::new(pattern)
                .literal_separator(false)
                .build()
            {
                globs.add(glob);
            }
        }
        let read_only = globs.build().ok().filter(|set| !set.is_empty());
        Self {
            spec,
            config,
            read_only,
        }
    }

    /// Whether the embedder declared this command read-only: one simple command (nothing
    /// chained, nested or redirected) matching one of its globs.
    fn declared_read_only(&self, command: &str) -> bool {
        let command = command.trim();
        is_simple_command(command)
            && self
                .read_only
                .as_ref()
                .is_some_and(|set| set.is_match(command))
    }
}

impl TypedTool for BashTool {
    type Args = BashArgs;

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    /// Exclusive (a command may touch anything) unless declared read-only.
    fn concurrency(&self, args: &BashArgs) -> Concurrency {
        if self.declared_read_only(&args.command) {
            Concurrency::shared()
        } else {
            Concurrency::Exclusive
        }
    }

    fn check(&self, args: &BashArgs) -> Result<(), Vec<String>> {
        if args.command.trim().is_empty() {
            return Err(vec!["/command: must not be empty".to_owned()]);
        }
        Ok(())
    }

    async fn run(&self, ctx: &ToolContext, args: BashArgs) -> ToolResult {
        let helper = match (self.config.mode, &self.config.sandbox_helper) {
            (SandboxMode::FullAccess, _) => None,
            (_, Some(helper)) if helper.is_file() => Some(helper.clone()),
            (mode, _) => {
                return Err(ToolFailure::with_custom_code(
                    "SANDBOX_UNAVAILABLE",
                    format!(
                        "the `{}` sandbox needs the toolrail-sandbox helper, which is not configured or not found, so the command did not run",
                        mode.as_str()
                    ),
                ));
            }
        };
        if !containment_available() {
            return Err(ToolFailure::with_custom_code(
                "SANDBOX_UNAVAILABLE",
                "no PID namespace can be created here (`unshare --user --pid` failed), so the command's processes could outlive it; it did not run",
            ));
        }
        let workdir = match &args.workdir {
            Some(path) => self.config.roots.confine(path).map_err(|real| {
                ToolFailure::with_custom_code(
                    "FS_OUTSIDE_WORKSPACE",
                    format!(
                        "workdir `{path}` leads to `{}`, outside the workspace; nothing ran",
                        real.display()
                    ),
                )
            })?,
            None => self
                .config
                .roots
                .as_slice()
                .first()
                .cloned()
                .ok_or_else(|| ToolFailure::new("the workspace has no root to run in"))?,
        };
        let timeout = args
            .timeout_ms
            .map_or(self.config.default_timeout, Duration::from_millis);
        // A private temp folder: the one writable place in read-only mode.
        let id = ctx.identity().call_id.as_str().replace(['/', ':'], "_");
        let private_tmp = self.config.spill_dir.join(format!("{id}.tmp"));
        tokio::fs::create_dir_all(&private_tmp)
            .await
            .map_err(|error| {
                ToolFailure::new(format!("the temp folder could not be made: {error}"))
            })?;
        let mut command = match &helper {
            None => contained(&[], &args.command),
            Some(helper) => {
                let mut sandbox = vec![
                    helper.display().to_string(),
                    "--mode".to_owned(),
                    self.config.mode.as_str().to_owned(),
                    "--write".to_owned(),
                    private_tmp.display().to_string(),
                ];
                for root in self.config.roots.as_slice() {
                    sandbox.push("--root".to_owned());
                    sandbox.push(root.display().to_string());
                }
                sandbox.push("--".to_owned());
                contained(&sandbox, &args.command)
            }
        };
        command
            .current_dir(&workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .env_clear();
        for name in &self.config.env_allow {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .env("TERM", "dumb")
            .env("SHELL", "/bin/bash")
            .env("TMPDIR", &private_tmp);
        for (name, value) in &self.config.env_extra {
            command.env(name, value);
        }
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|error| ToolFailure::new(format!("bash could not be started: {error}")))?;
        let (stdout, stderr) = match (child.stdout.take(), child.stderr.take()) {
            (Some(stdout), Some(stderr)) => (stdout, stderr),
            _ => {
                return Err(ToolFailure::new(
                    "the command's output could not be captured",
                ));
            }
        };
        let out_file = self.config.spill_dir.join(format!("{id}.stdout"));
        let err_file = self.config.spill_dir.join(format!("{id}.stderr"));
        let cap = self.config.output_cap;
        let reading = async {
            tokio::join!(
                capture(stdout, cap, &out_file),
                capture(stderr, cap, &err_file)
            )
        };
        let waiting = wait_or_stop(&mut child, timeout, self.config.grace, ctx);
        let (((out, out_spill), (err, err_spill)), ended) = tokio::join!(reading, waiting);
        let ended =
            ended.map_err(|error| ToolFailure::new(format!("waiting for bash failed: {error}")))?;
        let _ = tokio::fs::remove_dir_all(&private_tmp).await;
        let stderr_text = err.shown();
        if helper.is_some()
            && ended.status.code() == Some(126)
            && let Some(why) = stderr_text.strip_prefix("SANDBOX_UNAVAILABLE: ")
        {
            return Err(ToolFailure::with_custom_code(
                "SANDBOX_UNAVAILABLE",
                format!(
                    "the `{}` sandbox could not be applied ({}); the command did not run",
                    self.config.mode.as_str(),
                    why.trim()
                ),
            ));
        }
        if matches!(ended.stop, Some(Stop::Cancelled)) {
            return Err(ToolFailure::new(format!(
                "cancelled after {} ms; the command's processes were stopped",
                started.elapsed().as_millis()
            )));
        }
        let truncated = out.omitted() > 0 || err.omitted() > 0;
        let spills = if truncated {
            json!({"stdout": out_spill.map(|p| p.display().to_string()), "stderr": err_spill.map(|p| p.display().to_string())})
        } else {
            // Nothing was cut: the result holds everything, the spill files are not needed.
            for path in [&out_file, &err_file] {
                let _ = tokio::fs::remove_file(path).await;
            }
            json!(null)
        };
        let mut output = report(
            &args,
            &ended,
            &out,
            &err,
            &spills,
            started.elapsed(),
            timeout,
        );
        let denied = helper.is_some()
            && ["Permission denied", "Operation not permitted"]
                .iter()
                .any(|sign| stderr_text.contains(sign));
        if denied
            && let Some(toolrail_tools_core::log::ContentBlock::Text { text }) =
                output.content.first_mut()
        {
            text.push_str(&format!(
                "\n[sandbox: some operations were refused ({} mode)]",
                self.config.mode.as_str()
            ));
        }
        Ok(output)
    }
}

/// Why the command was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    TimedOut,
    Cancelled,
}

struct Ended {
    status: ExitStatus,
    stop: Option<Stop>,
}

async fn wait_or_stop(
    child: &mut Child,
    timeout: Duration,
    grace: Duration,
    ctx: &ToolContext,
) -> std::io::Result<Ended> {
    let stop = tokio::select! {
        status = child.wait() => return status.map(|status| Ended { status, stop: None }),
        () = tokio::time::sleep(timeout) => Stop::TimedOut,
        () = ctx.cancellation().cancelled() => Stop::Cancelled,
    };
    // The kill path needs only process ids: no lock of anyone else's. The command's group
    // is led by bash (see `contained`); signalling it spares the wrapper, which must live
    // until bash ends or the namespace would end at once, without the grace.
    let wrapper = child.id();
    let group = wrapper.and_then(command_group).or_else(|| {
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
            // The wrapper too; its death SIGKILLs bash, and with it the namespace.
            let _ = child.start_kill();
            child.wait().await?
        }
    };
    Ok(Ended {
        status,
        stop: Some(stop),
    })
}

/// `bash -c COMMAND` as the first process of a new PID namespace (in a new user namespace,
/// so no privilege is needed): when it ends, the kernel ends every process left in it, and
/// if the `unshare` wrapper dies first, bash is killed (`--kill-child`). `setsid` makes bash
/// the leader of its own process group, which stop signals go to.
fn contained(sandbox: &[String], command: &str) -> Command {
    let mut contained = Command::new("unshare");
    contained
        .args(NAMESPACE)
        .args(["--", "setsid"])
        .args(sandbox)
        .args(["bash", "-c", command]);
    contained
}

/// `unshare`'s flags: a user namespace (no privilege needed) holding a PID namespace whose
/// first process is killed when `unshare` dies.
const NAMESPACE: [&str; 5] = [
    "--user",
    "--map-current-user",
    "--pid",
    "--fork",
    "--kill-child",
];

/// The process group bash leads: the pid of the wrapper's child, read from `/proc`.
fn command_group(wrapper: u32) -> Option<Pid> {
    let children =
        std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children")).ok()?;
    let pid: i32 = children.split_whitespace().next()?.parse().ok()?;
    Some(Pid::from_raw(pid))
}

/// Whether PID namespaces can be created here; checked once.
fn containment_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::process::Command::new("unshare")
            .args(NAMESPACE)
            .arg("true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

fn report(
    args: &BashArgs,
    ended: &Ended,
    out: &Captured,
    err: &Captured,
    spills: &serde_json::Value,
    took: Duration,
    timeout: Duration,
) -> ToolOutput {
    use std::os::unix::process::ExitStatusExt;
    let exit_code = ended.status.code();
    let signal = ended.status.signal();
    let mut text = out.shown();
    if err.total > 0 {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(&err.shown());
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if ended.stop == Some(Stop::TimedOut) {
        text.push_str(&format!(
            "[timed out after {} ms; the command's processes were stopped]\n",
            timeout.as_millis()
        ));
    }
    match (exit_code, signal) {
        (Some(code), _) => text.push_str(&format!("[exit code {code}]")),
        (None, Some(signal)) => text.push_str(&format!(
            "[killed by signal {signal} ({})]",
            Signal::try_from(signal).map_or("unknown", Signal::as_str)
        )),
        (None, None) => text.push_str("[ended without an exit code]"),
    }
    if let (Some(stdout), stderr) = (spills.get("stdout"), spills.get("stderr")) {
        text.push_str(&format!(
            "\n[full output: {} {}]",
            stdout.as_str().unwrap_or("(not saved)"),
            stderr
                .and_then(|path| path.as_str())
                .unwrap_or("(not saved)")
        ));
    }
    let value = json!({
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": ended.stop == Some(Stop::TimedOut),
        "stdout_bytes": out.total,
        "stderr_bytes": err.total,
        "truncated": out.omitted() > 0 || err.omitted() > 0,
        "full_output": spills,
        "took_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
    });
    let details = json!({
        "type": "terminal",
        "command": args.command,
        "description": args.description,
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": ended.stop == Some(Stop::TimedOut),
        "output_tail": text,
        "truncated": out.omitted() > 0 || err.omitted() > 0,
    });
    ToolOutput {
        value: Some(value),
        ..ToolOutput::text(text)
    }
    .with_details(details)
}
