//! `bash {command, description, timeout_ms?, workdir?, escalate?, justification?}`: a fresh
//! `bash -c` per call, stdin closed, a scrubbed environment, confined (see `sandbox`) in its
//! own process group and its own PID namespace, so that when the call returns nothing it
//! started is alive. A call may ask for a wider sandbox; only an approval grants it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use toolrail_tools_core::log::details::{Details, SandboxRefusals, Terminal};
use toolrail_tools_core::{ToolCode, tool_code};

use nix::sys::signal::Signal;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::{
    Concurrency, ProtectedPaths, SubjectKind, ToolContext, ToolFailure, ToolKind, ToolOutput,
    ToolResult, ToolSpec, TypedTool, WorkspaceRoots,
};

use crate::file_view::WalkCache;
use crate::limits_hit::limits_hit;
use crate::mode_rules::{ModeRule, rule_for};
use crate::output::{Captured, capture};
use crate::process::{Ended, Stop, wait_or_stop};
use crate::sandbox::{
    Confinement, Escalation, ResourceLimits, SandboxMode, SandboxTier, TierCheck,
};

/// The sandbox could not be made or cannot contain a command here; nothing ran.
const SANDBOX_UNAVAILABLE: ToolCode = tool_code!("SANDBOX_UNAVAILABLE");
/// The command asked for more than its sandbox allows and no approval granted it.
const SANDBOX_NOT_GRANTED: ToolCode = tool_code!("SANDBOX_NOT_GRANTED");
/// The working folder leads outside the workspace.
const OUTSIDE_WORKSPACE: ToolCode = tool_code!("FS_OUTSIDE_WORKSPACE");

/// How the tool runs commands.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    pub roots: WorkspaceRoots,
    /// Where full outputs are spilled (the session folder).
    pub spill_dir: PathBuf,
    /// The sandbox of a command no rule of `mode_rules` takes.
    pub mode: SandboxMode,
    /// The sandbox policy per command: the first rule whose glob matches every simple command
    /// of the line whole (as a shell parses it; nothing unknown before run time, nothing
    /// redirected to a file) sets that call's mode instead of `mode`.
    pub mode_rules: Vec<ModeRule>,
    /// What enforces the mode.
    pub tier: SandboxTier,
    /// Whether commands may use the network outside full-access mode.
    pub network: bool,
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
    /// What commands never see (masked) or change: the credential locations of the user's
    /// home by default, plus what the embedder adds (the session folder, the deny rules'
    /// paths). Every `.git` in the workspace stays read-only unless it opts in.
    pub protected: ProtectedPaths,
    /// Limits on each command and what it starts (documented defaults).
    pub limits: ResourceLimits,
    /// Bytes of each stream kept in its spill file (default 64 MiB); past it the file
    /// stops and the result says so.
    pub spill_cap: u64,
    /// Globs of commands the embedder declares read-only (`git status*`, `ls*`): a line
    /// whose every simple command matches one (as a shell parses it, nothing unknown, nothing
    /// redirected to a file) may run beside other calls. Everything else runs alone.
    pub read_only_commands: Vec<String>,
}

impl ShellConfig {
    pub fn new(roots: WorkspaceRoots, spill_dir: impl Into<PathBuf>) -> Self {
        Self {
            roots,
            spill_dir: spill_dir.into(),
            mode: SandboxMode::default(),
            mode_rules: Vec::new(),
            tier: SandboxTier::default(),
            network: false,
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
            protected: ProtectedPaths::for_current_user(),
            limits: ResourceLimits::default(),
            spill_cap: 64 << 20,
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
    /// More than the sandbox allows by default, if the command needs it: `workspace-write`
    /// to change files in the workspace, `network` to reach the network. A person is asked;
    /// give a `justification`.
    #[serde(default)]
    pub escalate: Vec<Escalation>,
    /// Why the command needs what `escalate` asks for, shown to the person asked.
    #[serde(default)]
    pub justification: Option<String>,
}

pub struct BashTool {
    spec: ToolSpec,
    config: ShellConfig,
    read_only: Option<globset::GlobSet>,
    /// Whether the tier can contain commands here, checked on the first call.
    tier_usable: TierCheck,
    /// The workspace's folder listings, for finding every `.git` quickly.
    walk_cache: WalkCache,
}

impl BashTool {
    pub const NAME: &'static str = "bash";

    pub fn new(mut config: ShellConfig) -> Self {
        // A relative folder would mean something else to every process started elsewhere.
        if let Ok(absolute) = std::path::absolute(&config.spill_dir) {
            config.spill_dir = absolute;
        }
        let description = format!(
            "Run a command with `bash -c` in the workspace (stdin closed, a clean environment). Output over {} KiB per stream is cut in the middle (head and tail kept) and the full output saved to a file named in the result. A non-zero exit code is reported, not treated as a failure. The command is stopped after `timeout_ms` (default {} s): SIGTERM, then SIGKILL. Background processes do not outlive the call.",
            config.output_cap / 1024,
            config.default_timeout.as_secs()
        );
        let spec = ToolSpec::for_args::<BashArgs>(Self::NAME, description)
            .kind(ToolKind::Execute)
            .subject("command", SubjectKind::Command)
            .concurrency_note("exclusive, but shared for commands the embedder declares read-only");
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
            tier_usable: TierCheck::new(),
            walk_cache: WalkCache::default(),
        }
    }

    /// The sandbox policy's mode for this command, before any escalation.
    fn base_mode(&self, command: &str) -> SandboxMode {
        rule_for(&self.config.mode_rules, command).map_or(self.config.mode, ModeRule::mode)
    }

    /// What the call asks for beyond `base`, the sandbox its command gets.
    fn beyond_default(&self, args: &BashArgs, base: SandboxMode) -> Vec<Escalation> {
        let mut wanted: Vec<Escalation> = args
            .escalate
            .iter()
            .copied()
            .filter(|wanted| match (wanted, base) {
                (_, SandboxMode::FullAccess) => false,
                (Escalation::WorkspaceWrite, mode) => mode == SandboxMode::ReadOnly,
                (Escalation::Network, _) => !self.config.network,
            })
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted
    }

    /// The mode and network the call runs with: the policy's mode for its command, widened
    /// by what it asked for and an approval granted.
    fn effective(&self, base: SandboxMode, granted: &[Escalation]) -> (SandboxMode, bool) {
        let mode = if granted.contains(&Escalation::WorkspaceWrite) {
            SandboxMode::WorkspaceWrite
        } else {
            base
        };
        let network = self.config.network
            || mode == SandboxMode::FullAccess
            || granted.contains(&Escalation::Network);
        (mode, network)
    }

    /// Makes the call's private temp folder, fresh: never one that is there already (a
    /// symlink planted there would decide where the grant lands).
    fn private_tmp(&self, id: &str) -> Result<PathBuf, ToolFailure> {
        let private_tmp = self.config.spill_dir.join(format!("{id}.tmp"));
        // One `mkdir` (the spill folder usually exists): cheaper inline than a hop to the
        // blocking pool, which costs more than the call itself.
        let made = std::fs::create_dir(&private_tmp).or_else(|error| {
            if error.kind() == std::io::ErrorKind::NotFound {
                std::fs::create_dir_all(&self.config.spill_dir)?;
                std::fs::create_dir(&private_tmp)
            } else {
                Err(error)
            }
        });
        made.map_err(|error| {
            ToolFailure::new(format!(
                "the temp folder {} could not be made: {error}",
                private_tmp.display()
            ))
        })?;
        Ok(private_tmp)
    }

    /// Whether the embedder declared this command read-only: every simple command in it, as
    /// a shell parses them, known before run time and matching one of its globs, and nothing
    /// redirected to a file.
    fn declared_read_only(&self, command: &str) -> bool {
        self.read_only.as_ref().is_some_and(|set| {
            toolrail_tools_core::CommandLine::parse(command)
                .is_permitted_by(|text| set.is_match(text))
        })
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
        let mut violations = Vec::new();
        if args.command.trim().is_empty() {
            violations.push("/command: must not be empty".to_owned());
        }
        if !args.escalate.is_empty()
            && args
                .justification
                .as_deref()
                .is_none_or(|why| why.trim().is_empty())
        {
            violations.push(
                "/justification: required with `escalate`: say why the command needs it".to_owned(),
            );
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// A call asking for more than the configured sandbox is put to a person, whatever the
    /// permission rules say.
    fn must_ask(&self, args: &BashArgs) -> Option<String> {
        let base = self.base_mode(&args.command);
        let wanted = self.beyond_default(args, base);
        if wanted.is_empty() {
            return None;
        }
        let wanted: Vec<&str> = wanted.iter().map(|wanted| wanted.as_str()).collect();
        Some(format!(
            "the command asks to run with {} beyond the `{}` sandbox: {}",
            wanted.join(" and "),
            base.as_str(),
            args.justification
                .as_deref()
                .unwrap_or("(no justification)")
        ))
    }

    async fn run(&self, ctx: &ToolContext, args: BashArgs) -> ToolResult {
        // The policy's rule is matched once; the mode, the escalation and the record use it.
        let rule = rule_for(&self.config.mode_rules, &args.command);
        let base = rule.map_or(self.config.mode, ModeRule::mode);
        let granted = self.beyond_default(&args, base);
        if !granted.is_empty() && !ctx.approval_granted() {
            return Err(ToolFailure::with_code(
                SANDBOX_NOT_GRANTED,
                "the command asks for more than its sandbox allows and no approval granted it; nothing ran",
            ));
        }
        let (mode, network) = self.effective(base, &granted);
        if let Err(why) = self.tier_usable.ensure(&self.config.tier).await {
            return Err(ToolFailure::with_code(
                SANDBOX_UNAVAILABLE,
                format!(
                    "the {} tier cannot contain the command here ({why}): its processes could outlive it or escape its sandbox, so it did not run",
                    self.config.tier.as_str()
                ),
            ));
        }
        let workdir = match &args.workdir {
            Some(path) => self.config.roots.confine(path).map_err(|real| {
                ToolFailure::with_code(
                    OUTSIDE_WORKSPACE,
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
        let id = unique_name(ctx.identity().call_id.as_str());
        let private_tmp = self.private_tmp(&id)?;
        let confinement = Confinement {
            mode,
            network,
            tier: &self.config.tier,
            roots: self.config.roots.as_slice(),
            protected: &self.config.protected,
            spill_dir: &self.config.spill_dir,
            private_tmp: &private_tmp,
            workdir: &workdir,
            limits: self.config.limits,
            walk_cache: Some(&self.walk_cache),
        };
        let unavailable = |why: String| {
            ToolFailure::with_code(
                SANDBOX_UNAVAILABLE,
                format!(
                    "the `{}` sandbox could not be made ({why}); the command did not run",
                    mode.as_str()
                ),
            )
        };
        let mut prepared =
            match confinement.prepare(["bash", "-c", &args.command].map(OsString::from)) {
                Ok(prepared) => prepared,
                Err(why) => {
                    remove_private_tmp(&private_tmp).await;
                    return Err(unavailable(why));
                }
            };
        let command = &mut prepared.command;
        command
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
        let spawned = command.spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                remove_private_tmp(&private_tmp).await;
                return Err(match prepared.setup_failure("") {
                    Some(why) => unavailable(why),
                    None => ToolFailure::new(format!("bash could not be started: {error}")),
                });
            }
        };
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
        let spill_cap = self.config.spill_cap;
        let reading = async {
            tokio::join!(
                capture(stdout, cap, &out_file, spill_cap),
                capture(stderr, cap, &err_file, spill_cap)
            )
        };
        let waiting = wait_or_stop(&mut child, timeout, self.config.grace, ctx.cancellation());
        let (((out, out_spill), (err, err_spill)), ended) = tokio::join!(reading, waiting);
        let ended =
            ended.map_err(|error| ToolFailure::new(format!("waiting for bash failed: {error}")))?;
        remove_private_tmp(&private_tmp).await;
        let stderr_text = err.shown();
        // Whether the sandbox stood is read from its status channel, never from what the
        // command printed or how it exited: a command cannot forge it.
        if let Some(why) = prepared.setup_failure(&stderr_text) {
            return Err(unavailable(why));
        }
        if matches!(ended.stop, Some(Stop::Cancelled)) {
            return Err(ToolFailure::new(format!(
                "cancelled after {} ms; the command's processes were stopped",
                started.elapsed().as_millis()
            )));
        }
        let truncated = out.omitted() > 0 || err.omitted() > 0;
        // Only a stream that was cut has (and needs) a spill file.
        let spilled = |captured: &Captured, spill: Option<PathBuf>| {
            (captured.omitted() > 0).then(|| {
                spill.map_or_else(
                    || "(could not be saved)".to_owned(),
                    |path| path.display().to_string(),
                )
            })
        };
        let spills = if truncated {
            json!({"stdout": spilled(&out, out_spill), "stderr": spilled(&err, err_spill)})
        } else {
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
        if let Some(value) = output
            .value
            .as_mut()
            .and_then(|value| value.as_object_mut())
        {
            value.insert(
                "sandbox".to_owned(),
                json!({
                    "mode": mode.as_str(),
                    "network": network,
                    "tier": self.config.tier.as_str(),
                    "escalated": granted.iter().map(|granted| granted.as_str()).collect::<Vec<_>>(),
                    "rule": rule.map(ModeRule::command),
                    "limits": self.config.limits.to_json(),
                }),
            );
        }
        let hits = limits_hit(
            ended.status,
            &stderr_text,
            &self.config.limits,
            out.spill_cut || err.spill_cut,
        );
        if !hits.is_empty() {
            if let Some(value) = output
                .value
                .as_mut()
                .and_then(|value| value.as_object_mut())
            {
                value.insert(
                    "limits_hit".to_owned(),
                    json!(hits.iter().map(|hit| hit.as_str()).collect::<Vec<_>>()),
                );
            }
            if let Some(toolrail_tools_core::log::ContentBlock::Text { text }) =
                output.content.first_mut()
            {
                for hit in &hits {
                    text.push('\n');
                    text.push_str(&hit.note(&self.config.limits, self.config.spill_cap));
                }
            }
        }
        // What the sandbox refused, as the command's own words say it: on the card, in the
        // summary's count, and in a line the model reads.
        let refused: Vec<&str> = if mode == SandboxMode::FullAccess {
            Vec::new()
        } else {
            stderr_text
                .lines()
                .filter(|line| REFUSAL_SIGNS.iter().any(|sign| line.contains(sign)))
                .take(REFUSAL_LINES)
                .collect()
        };
        if !refused.is_empty() {
            if let Some(sandbox) = output
                .value
                .as_mut()
                .and_then(|value| value.get_mut("sandbox"))
                .and_then(|sandbox| sandbox.as_object_mut())
            {
                sandbox.insert("refused".to_owned(), json!(refused));
            }
            if let Some(Details::Terminal(terminal)) = output.details.as_mut() {
                terminal.sandbox_refused = Some(SandboxRefusals {
                    mode: mode.as_str().to_owned(),
                    lines: refused.iter().map(|line| (*line).to_owned()).collect(),
                });
            }
            if let Some(toolrail_tools_core::log::ContentBlock::Text { text }) =
                output.content.first_mut()
            {
                text.push_str(&format!(
                    "\n[sandbox: some operations were refused ({} mode)]",
                    mode.as_str()
                ));
            }
        }
        Ok(output)
    }
}

/// What a command says on stderr when the sandbox refused it something.
const REFUSAL_SIGNS: [&str; 3] = [
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
];
/// Lines of refusals kept for the card.
const REFUSAL_LINES: usize = 5;

/// A name for this call's files no earlier run used: the call id (ids repeat across
/// resumed sessions) with this process and a counter.
fn unique_name(call_id: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}.{}-{n}",
        call_id.replace(['/', ':'], "_"),
        std::process::id()
    )
}

/// Usually empty: one `rmdir`; what the command left there goes on the blocking pool.
async fn remove_private_tmp(private_tmp: &std::path::Path) {
    if std::fs::remove_dir(private_tmp).is_err() {
        let _ = tokio::fs::remove_dir_all(private_tmp).await;
    }
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
    let saved: Vec<String> = ["stdout", "stderr"]
        .into_iter()
        .filter_map(|stream| {
            let path = spills.get(stream)?.as_str()?;
            Some(format!("{stream} in {path}"))
        })
        .collect();
    if !saved.is_empty() {
        text.push_str(&format!("\n[full output: {}]", saved.join("; ")));
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
    let details = Terminal {
        command: args.command.clone(),
        description: Some(args.description.clone()),
        exit_code: exit_code.map(i64::from),
        signal: signal.map(i64::from),
        timed_out: ended.stop == Some(Stop::TimedOut),
        output_tail: Some(text.clone()),
        truncated: out.omitted() > 0 || err.omitted() > 0,
        sandbox_refused: None,
    };
    ToolOutput {
        value: Some(value),
        ..ToolOutput::text(text)
    }
    .with_details(details)
}
