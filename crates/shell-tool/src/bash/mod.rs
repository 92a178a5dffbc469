//! `bash {command, description, timeout_ms?, workdir?, escalate?, justification?}`: a fresh
//! `bash -c` per call, stdin closed, a scrubbed environment, confined (see `sandbox`) in its
//! own process group and its own PID namespace, so that when the call returns nothing it
//! started is alive. A call may ask for a wider sandbox; only an approval grants it.

use std::path::PathBuf;
use std::time::Duration;
use toolrail_tools_core::{ToolCode, tool_code};

use schemars::JsonSchema;
use serde::Deserialize;
use toolrail_tools_core::{
    Concurrency, ProtectedPaths, ToolContext, ToolFailure, ToolKind, ToolResult, ToolSpec,
    TypedTool, WorkspaceRoots, spec::SubjectKind,
};

mod run;
mod shells;

use run::{Place, remove_private_tmp, unique_name};

use crate::background::{BackgroundConfig, Shells};
use crate::file_view::WalkCache;
use crate::mode_rules::{ModeRule, rule_for};
use crate::sandbox::{Escalation, ResourceLimits, SandboxMode, SandboxTier, TierCheck};

/// The sandbox could not be made or cannot contain a command here; nothing ran.
const SANDBOX_UNAVAILABLE: ToolCode = tool_code!("SANDBOX_UNAVAILABLE");
/// The command asked for more than its sandbox allows and no approval granted it.
const SANDBOX_NOT_GRANTED: ToolCode = tool_code!("SANDBOX_NOT_GRANTED");
/// The working folder leads outside the workspace.
const OUTSIDE_WORKSPACE: ToolCode = tool_code!("FS_OUTSIDE_WORKSPACE");

/// How the tool runs commands.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// The workspace roots: commands start in the first (or in `workdir`, inside them), and
    /// write inside them in `workspace-write` mode.
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
    /// How background shells run: their limit, lifetime, yield window, and whether a
    /// foreground command that overruns moves to the background.
    pub background: BackgroundConfig,
    /// Globs of commands the embedder declares read-only (`git status*`, `ls*`): a line
    /// whose every simple command matches one (as a shell parses it, nothing unknown, nothing
    /// redirected to a file) may run beside other calls. Everything else runs alone.
    pub read_only_commands: Vec<String>,
}

impl ShellConfig {
    /// Commands in `roots`, full outputs spilled under `spill_dir`, and every other field at
    /// its default: read-only mode on the namespaces tier, no network, a 120 s deadline,
    /// 30 KiB of each stream shown, a 2 s grace, the home folder's credential locations
    /// protected.
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
            background: BackgroundConfig::default(),
        }
    }
}

/// The arguments of `bash`.
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
    /// Start the command in the background and return at once with its shell id and its
    /// first output: for servers, watchers and long builds. Read it with `shell_output`,
    /// write to it with `shell_write`, end it with `shell_kill`.
    #[serde(default)]
    pub background: bool,
    /// Run the command on a pseudo-terminal, for programs that insist on one (prompts,
    /// REPLs); with `background`, `shell_write` can then type keys such as `ctrl-c`.
    /// Without it, a foreground command's input is closed.
    #[serde(default)]
    pub tty: bool,
}

/// `bash`: a command line run by `bash -c` in the sandbox, with capped output and an
/// enforced deadline; nothing it starts outlives the call.
pub struct BashTool {
    spec: ToolSpec,
    config: ShellConfig,
    read_only: Option<globset::GlobSet>,
    /// Whether the tier can contain commands here, checked on the first call.
    tier_usable: TierCheck,
    /// The workspace's folder listings, for finding every `.git` quickly.
    walk_cache: WalkCache,
    /// The session's background shells.
    shells: Shells,
    /// Whether the shell tools read them (only then may a command start in the background).
    background_tools: bool,
}

impl BashTool {
    /// The tool's name, as the model calls it and rules match it.
    pub const NAME: &'static str = "bash";

    /// `bash` as `config` says; its description states the output cap and the default
    /// deadline. Whether the sandbox can be had here is checked at the first call. Without
    /// [`BashTool::with_shells`] a command cannot start in the background (there would be
    /// no tool to read or end it).
    pub fn new(config: ShellConfig) -> Self {
        let shells = Shells::new(config.background.clone());
        Self::build(config, shells, false)
    }

    /// `bash` whose background shells go to `shells`, the table the shell tools
    /// ([`Shells::tools`]) read.
    ///
    /// ```
    /// use toolrail_shell_tool::{BashTool, ShellConfig, Shells};
    /// use toolrail_tools_core::{RegistryBuilder, Typed, WorkspaceRoots};
    ///
    /// let workspace = tempfile::tempdir()?;
    /// let config = ShellConfig::new(WorkspaceRoots::new([workspace.path()])?, workspace.path().join("out"));
    /// let shells = Shells::new(config.background.clone());
    /// let bash = Typed::new(BashTool::with_shells(config, shells.clone()));
    /// let builder = shells.tools().into_iter().fold(RegistryBuilder::new().builtin(bash), |builder, tool| builder.builtin(tool));
    /// let (registry, _) = builder.build()?;
    /// assert!(registry.snapshot().names().contains(&"shell_output"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_shells(config: ShellConfig, shells: Shells) -> Self {
        Self::build(config, shells, true)
    }

    fn build(mut config: ShellConfig, shells: Shells, background_tools: bool) -> Self {
        // A relative folder would mean something else to every process started elsewhere.
        if let Ok(absolute) = std::path::absolute(&config.spill_dir) {
            config.spill_dir = absolute;
        }
        let description = format!(
            "Run a command with `bash -c` in the workspace (stdin closed, a clean environment). Output over {} KiB per stream is cut in the middle (head and tail kept) and the full output saved to a file named in the result. A non-zero exit code is reported, not treated as a failure. The command is stopped after `timeout_ms` (default {} s): SIGTERM, then SIGKILL. Processes it leaves behind (`&`, `nohup`) do not outlive the call: for a server, a watcher or a long build use `background: true`, which returns a shell id at once; `tty: true` gives the command a terminal.",
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
            spec: spec.build(),
            config,
            read_only,
            tier_usable: TierCheck::new(),
            walk_cache: WalkCache::default(),
            shells,
            background_tools,
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
            toolrail_tools_core::command_line::CommandLine::parse(command)
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
        let admitted = self.admit(ctx, &args).await?;
        let workdir = self.workdir(&args)?;
        let timeout = args
            .timeout_ms
            .map_or(self.config.default_timeout, Duration::from_millis);
        if args.background {
            return self.run_background(ctx, &args, &admitted, &workdir).await;
        }
        if args.tty
            || (self.background_tools && self.config.background.auto_background_after.is_some())
        {
            return self
                .run_watched(ctx, &args, &admitted, &workdir, timeout)
                .await;
        }
        let id = unique_name(ctx.identity().call_id.as_str());
        let private_tmp = self.private_tmp(&id)?;
        let place = Place {
            workdir: &workdir,
            private_tmp: &private_tmp,
            id: &id,
            timeout,
        };
        let ran = self.execute(ctx, &args, &admitted, &place).await;
        // However the run went, the call's temp folder goes with it.
        remove_private_tmp(&private_tmp).await;
        self.outcome(&args, &admitted, ran?, timeout)
    }
}
