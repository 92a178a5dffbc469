//! The sections of a `toolrail.toml`, each with its defaults (docs/config.md lists them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[workspace]`: the folders the session may touch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// The workspace roots; the first is where relative paths start. Default: `["."]`.
    pub roots: Vec<PathBuf>,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self {
            roots: vec![PathBuf::from(".")],
        }
    }
}

/// `[tools]`: which shipped tools the session has (names from the tool catalog), which of
/// them wait behind `tool_search`, and their options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Default: every tool of the catalog but the interactive ones: `read`, `write`,
    /// `edit`, `glob`, `grep`, `bash`, `shell_output`, `shell_write`, `shell_kill`,
    /// `shell_list`, `todo_write`.
    pub enabled: Vec<String>,
    /// Tools offered only through `tool_search` (from the next request once found).
    pub deferred: Vec<String>,
    /// `[tools.bash]`.
    pub bash: BashConfig,
    /// `[tools.files]`: bounds of `read`, `glob` and `grep`.
    pub files: FilesConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            enabled: DEFAULT_TOOLS.map(str::to_owned).to_vec(),
            deferred: Vec::new(),
            bash: BashConfig::default(),
            files: FilesConfig::default(),
        }
    }
}

/// The tools a session has when the configuration names none.
pub const DEFAULT_TOOLS: [&str; 11] = [
    "read",
    "write",
    "edit",
    "glob",
    "grep",
    "bash",
    "shell_output",
    "shell_write",
    "shell_kill",
    "shell_list",
    "todo_write",
];

/// `[tools.bash]`: the shell tool's own options (its sandbox is `[sandbox]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BashConfig {
    /// A command's deadline when the call sets none, in milliseconds (default 120,000).
    pub timeout_ms: u64,
    /// Bytes of each of a command's streams shown to the model (default 30,720); the rest is
    /// kept in a file the result names.
    pub output_cap_bytes: usize,
    /// Commands that only read and may run beside other calls (`git status*`, `ls*`),
    /// judged as a shell parses the line: every simple command must match one.
    pub read_only_commands: Vec<String>,
    /// Variables of this process a command sees (default: `PATH`, `HOME`, `LANG`,
    /// `LC_ALL`, `LC_CTYPE`, `USER`, `LOGNAME`, `TZ`).
    pub env_allow: Option<Vec<String>>,
    /// Variables set for every command, over the allowed ones.
    pub env: BTreeMap<String, String>,
    /// Background shells that may run at once (default 16).
    pub max_background_shells: usize,
    /// Seconds a background shell may run before it is stopped (default 3,600).
    pub background_lifetime_s: u64,
    /// A foreground command still running after this many milliseconds is moved to the
    /// background instead of being stopped at its deadline (default: never).
    pub auto_background_after_ms: Option<u64>,
    /// Programs that read commands (shells, REPLs), added to the defaults (common shells
    /// and REPLs — bash, sh, zsh, python3, node, psql, …): input `shell_write` sends to a
    /// shell running one is judged by the rules as a `bash` command.
    pub interpreters: Option<Vec<String>>,
}

impl Default for BashConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 120_000,
            output_cap_bytes: 30 * 1024,
            read_only_commands: Vec::new(),
            env_allow: None,
            env: BTreeMap::new(),
            max_background_shells: 16,
            background_lifetime_s: 3600,
            auto_background_after_ms: None,
            interpreters: None,
        }
    }
}

/// `[tools.files]`: how much `read`, `glob` and `grep` return at most (unset: the tools'
/// own defaults).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesConfig {
    /// Lines of one `read` window.
    pub read_lines: Option<usize>,
    /// Bytes of one `read` window.
    pub read_bytes: Option<usize>,
    /// Paths one `glob` lists.
    pub glob_results: Option<usize>,
    /// Matches one `grep` reports.
    pub grep_results: Option<usize>,
}

/// A sandbox mode, as configurations name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxModeName {
    /// Commands read everything they may see and write nothing but their temp folder.
    #[default]
    ReadOnly,
    /// Commands also write inside the workspace roots (never a `.git`).
    WorkspaceWrite,
    /// No confinement.
    FullAccess,
}

/// Which kernel mechanism confines commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxTierName {
    /// Built in: user, PID and mount namespaces, Landlock, seccomp.
    #[default]
    Namespaces,
    /// Debian's `bwrap`, with the same view, seccomp program and limits.
    Bubblewrap,
}

/// `[sandbox]`: how `bash` (and code mode's Python) is confined.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// `read-only` (default), `workspace-write` or `full-access`.
    pub mode: SandboxModeName,
    /// `namespaces` (default, built in) or `bubblewrap`.
    pub tier: SandboxTierName,
    /// Where bubblewrap is (default `/usr/bin/bwrap`).
    pub bwrap: PathBuf,
    /// Whether commands may use the network outside full-access mode (default false).
    pub network: bool,
    /// Per command: the first rule whose `command` glob matches every simple command of
    /// the line runs it in the rule's `mode`.
    pub rules: Vec<SandboxRuleConfig>,
    /// Credential locations of the home folder shown to tools after all (`.npmrc`, `.ssh`):
    /// relative to the home folder, or absolute.
    pub unhide: Vec<PathBuf>,
    /// More paths hidden from every tool and command.
    pub hide: Vec<PathBuf>,
    /// Let tools and commands write into `.git` folders (default false: a hook written
    /// there runs on the user's next `git` command).
    pub allow_git_writes: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: SandboxModeName::default(),
            tier: SandboxTierName::default(),
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            network: false,
            rules: Vec::new(),
            unhide: Vec::new(),
            hide: Vec::new(),
            allow_git_writes: false,
        }
    }
}

/// One entry of `[sandbox].rules`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRuleConfig {
    /// A glob over a simple command (`cargo test*`).
    pub command: String,
    /// The mode a line runs in when every simple command of it matches `command`.
    pub mode: SandboxModeName,
}

/// A permission preset, as configurations name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PresetName {
    /// Read-only tools run; everything else asks.
    #[default]
    Untrusted,
    /// Read-only tools and confined edits run; commands and the rest ask.
    Workspace,
    /// Like `workspace`, but what would ask is denied (nobody to answer).
    NeverAsk,
    /// Everything runs unless a rule says otherwise; guards still apply.
    FullAuto,
}

/// `[permissions]`: a preset and rules, inline or from a rule file (docs/rules.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    /// `untrusted` (default), `workspace`, `never-ask` or `full-auto`; a rule file's own
    /// preset is used when this is unset.
    pub preset: Option<PresetName>,
    /// A rule file (TOML or JSON) whose rules come before the inline ones.
    pub file: Option<PathBuf>,
    /// Rules whose calls run without asking (`"read"`, `"bash(git status*)"`), unless a
    /// deny or ask rule also matches.
    pub allow: Vec<RuleEntry>,
    /// Rules whose calls run only once the approval service allows them.
    pub ask: Vec<RuleEntry>,
    /// Rules whose calls never run; a deny always holds, whatever else matches.
    pub deny: Vec<RuleEntry>,
    /// Start in plan mode: calls that are not read-only are denied until the person
    /// approves the plan (`exit_plan_mode` joins the tools).
    pub plan_mode: bool,
    /// Nobody is there to answer: a call that would ask is denied instead, whatever the
    /// preset (what the rules and the preset allow still runs).
    pub unattended: bool,
}

/// One inline rule: a pattern (`bash(curl *)`), or a pattern with the reason said when it
/// denies or asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RuleEntry {
    /// A bare pattern: `"bash(curl *)"`.
    Pattern(String),
    /// A table: `{ rule = "bash(curl *)", reason = "no network from here" }`.
    WithReason {
        /// The pattern (`TOOL` or `TOOL(SUBJECT)`, docs/rules.md).
        rule: String,
        /// What the call is told when the rule denies or asks; `None`: it is told only the
        /// rule and where it is written.
        #[serde(default)]
        reason: Option<String>,
    },
}

impl RuleEntry {
    /// The pattern and its reason.
    pub fn parts(&self) -> (&str, Option<&str>) {
        match self {
            Self::Pattern(pattern) => (pattern, None),
            Self::WithReason { rule, reason } => (rule, reason.as_deref()),
        }
    }
}

/// Which wire format a model server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderName {
    /// OpenAI Chat Completions: OpenAI, DeepSeek, vLLM, llama.cpp, Ollama, llm-katan.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// `[model]`: which model answers, where, and how it is asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The wire format the server speaks: `openai` or `anthropic`.
    pub provider: ProviderName,
    /// The model's name on the server (`gpt-4.1`, `claude-sonnet-4-5`, `qwen3`).
    pub model: String,
    /// Default: `https://api.openai.com/v1` or `https://api.anthropic.com`.
    pub base_url: Option<String>,
    /// The variable holding the key; it must be set. Unset: `OPENAI_API_KEY` or
    /// `ANTHROPIC_API_KEY`, used when set. The key itself never goes in the file.
    pub api_key_env: Option<String>,
    /// The system prompt.
    pub system: Option<String>,
    /// 0 to 2 (unset: the server's default).
    pub temperature: Option<f64>,
    /// 0 to 1 (unset: the server's default).
    pub top_p: Option<f64>,
    /// The answer's length limit (Anthropic needs one: 4096 when unset).
    pub max_tokens: Option<u32>,
    /// `auto` (default), `none`, `required`, or a tool's name.
    pub tool_choice: Option<String>,
    /// Merged into every request body last: the escape hatch for a server's own fields.
    #[serde(default)]
    pub extra_body: BTreeMap<String, serde_json::Value>,
    /// OpenAI strict mode for tool schemas (default false).
    #[serde(default)]
    pub strict: bool,
    /// `[model.retry]`: when a failed request is tried again.
    #[serde(default)]
    pub retry: RetryConfig,
    /// The longest silence while waiting for the answer's next bytes (default 120,000 ms):
    /// the detector of a dead connection; a keepalive resets it.
    #[serde(default = "default_idle_ms")]
    pub idle_timeout_ms: u64,
    /// The longest one try may take, from sending to the answer's end; nothing the server
    /// sends extends it (default 1,200,000 ms: 20 minutes, the providers crate says why).
    #[serde(default = "default_request_ms")]
    pub request_timeout_ms: u64,
    /// The longest one model request of a step may take, every try and the waits between
    /// them included (default 1,800,000 ms: 30 minutes).
    #[serde(default = "default_step_ms")]
    pub step_timeout_ms: u64,
}

/// `[model.retry]`: tries on 429, 5xx, broken connections and streams, never on other
/// 4xx answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Tries in all, the first included (default 4; 1 means no retry).
    pub attempts: u32,
    /// The ceiling of the wait before the second try, doubled each time; each wait is drawn
    /// at random below its ceiling (default 500 ms).
    pub first_delay_ms: u64,
    /// The highest ceiling of a wait between tries (default 8,000 ms).
    pub max_delay_ms: u64,
    /// The longest `Retry-After` a server is waited for, exactly (default 60,000 ms); one
    /// that asks for longer fails the request, saying so.
    pub max_retry_after_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            attempts: 4,
            first_delay_ms: 500,
            max_delay_ms: 8_000,
            max_retry_after_ms: 60_000,
        }
    }
}

fn default_idle_ms() -> u64 {
    120_000
}

// The providers' defaults (`toolrail_providers::DEFAULT_REQUEST_TIMEOUT`, `…STEP…`), written
// out: this crate reads configurations without the `providers` feature too.
fn default_request_ms() -> u64 {
    1_200_000
}

fn default_step_ms() -> u64 {
    1_800_000
}

impl ModelConfig {
    /// `model` on a server speaking `provider`'s format, every other field at its default.
    pub fn new(provider: ProviderName, model: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
            base_url: None,
            api_key_env: None,
            system: None,
            temperature: None,
            top_p: None,
            max_tokens: None,
            tool_choice: None,
            extra_body: BTreeMap::new(),
            strict: false,
            retry: RetryConfig::default(),
            idle_timeout_ms: default_idle_ms(),
            request_timeout_ms: default_request_ms(),
            step_timeout_ms: default_step_ms(),
        }
    }

    /// The same on `base_url`.
    pub fn at(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into());
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.model.trim().is_empty() {
            return Err(ConfigError::invalid(
                "model.model",
                "is empty; name the model the server serves (`gpt-4.1`, `claude-sonnet-4-5`)",
            ));
        }
        if let Some(temperature) = self.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Err(ConfigError::invalid(
                "model.temperature",
                format!("{temperature} is outside 0 to 2"),
            ));
        }
        if let Some(top_p) = self.top_p
            && !(0.0..=1.0).contains(&top_p)
        {
            return Err(ConfigError::invalid(
                "model.top_p",
                format!("{top_p} is outside 0 to 1"),
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(ConfigError::invalid(
                "model.max_tokens",
                "is 0: the model could not write a word; give a limit, or leave it unset",
            ));
        }
        if self.retry.attempts == 0 {
            return Err(ConfigError::invalid(
                "model.retry.attempts",
                "is 0: a request needs at least one try (1 means no retry)",
            ));
        }
        for (field, ms) in [
            ("model.idle_timeout_ms", self.idle_timeout_ms),
            ("model.request_timeout_ms", self.request_timeout_ms),
            ("model.step_timeout_ms", self.step_timeout_ms),
        ] {
            if ms == 0 {
                return Err(ConfigError::invalid(
                    field,
                    "is 0: no answer could arrive in time; give a length, or leave it unset for the default",
                ));
            }
        }
        if self.strict && self.provider == ProviderName::Anthropic {
            return Err(ConfigError::invalid(
                "model.strict",
                "is OpenAI's strict mode; the anthropic format has none: remove it",
            ));
        }
        if let Some(base) = &self.base_url
            && !(base.starts_with("http://") || base.starts_with("https://"))
        {
            return Err(ConfigError::invalid(
                "model.base_url",
                format!("`{base}` is not an http:// or https:// address"),
            ));
        }
        Ok(())
    }
}

/// How durably the log is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DurabilityName {
    /// Every start of a call that may act, and every result, synced before going on.
    #[default]
    Strict,
    /// Synced at the end of each batch.
    Batched,
    /// Left to the operating system.
    None,
}

/// `[store]`: where sessions are kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `jsonl:DIR` (default `jsonl:.toolrail/sessions`), `sqlite:FILE`, or
    /// `postgres://user@host/db`.
    pub url: String,
    /// `strict` (default), `batched` or `none`.
    pub durability: DurabilityName,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: "jsonl:.toolrail/sessions".to_owned(),
            durability: DurabilityName::default(),
        }
    }
}

impl StoreConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        crate::store::StoreUrl::parse(&self.url).map(|_| ())
    }

    pub(crate) fn anchor(&mut self, folder: &Path) {
        for scheme in ["jsonl:", "sqlite:"] {
            if let Some(path) = self.url.strip_prefix(scheme)
                && Path::new(path).is_relative()
            {
                self.url = format!("{scheme}{}", folder.join(path).display());
                return;
            }
        }
    }
}

/// A language programs may be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeLanguage {
    /// Embedded QuickJS: no filesystem, no network.
    Javascript,
    /// `python3 -I` in the sandbox, read-only, offline.
    Python,
}

/// How `run_code` is offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodePresentation {
    /// `run_code` beside the other tools.
    #[default]
    Both,
    /// Only `run_code`: the other tools are reachable from programs alone.
    Code,
}

/// `[code]`: code mode, where the model writes a program whose tool calls re-enter the
/// pipeline one by one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CodeConfig {
    /// The languages programs may use; empty (the default) turns code mode off.
    pub languages: Vec<CodeLanguage>,
    /// `both` (default) or `code`.
    pub presentation: CodePresentation,
    /// A program's wall time, in milliseconds (default 30,000).
    pub wall_ms: u64,
    /// JavaScript's heap, in MiB (default 64).
    pub memory_mb: usize,
    /// Bytes of one tool call's reply a program may receive (default 262,144).
    pub binding_bytes: usize,
    /// Bytes of printed output and returned value kept (default 65,536).
    pub output_bytes: usize,
}

impl Default for CodeConfig {
    fn default() -> Self {
        Self {
            languages: Vec::new(),
            presentation: CodePresentation::default(),
            wall_ms: 30_000,
            memory_mb: 64,
            binding_bytes: 256 << 10,
            output_bytes: 64 << 10,
        }
    }
}

impl CodeConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.languages.is_empty() && self.presentation == CodePresentation::Code {
            return Err(ConfigError::invalid(
                "code.presentation",
                "is `code` but `code.languages` is empty: the model would be offered no tool; name a language, or use `both`",
            ));
        }
        if self.wall_ms == 0 || self.memory_mb == 0 || self.output_bytes == 0 {
            return Err(ConfigError::invalid(
                "code",
                "`wall_ms`, `memory_mb` and `output_bytes` must be above 0",
            ));
        }
        Ok(())
    }
}

/// `[limits]`: the scheduler's and the loop's bounds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Calls running at once (default 8; 1 is strict serial; 0 is refused).
    pub max_parallel: usize,
    /// Model requests per turn (default 50).
    pub max_steps: u32,
    /// A call's deadline when its tool sets none, in milliseconds (default: none).
    pub call_timeout_ms: Option<u64>,
    /// How long a cancelled call may take to settle before it is abandoned (default 5,000
    /// ms).
    pub cancel_grace_ms: u64,
    /// How long an approval may wait for its answer before it is `APPROVAL_EXPIRED`
    /// (default: as long as the service takes).
    pub approval_timeout_ms: Option<u64>,
    /// A rejected approval stops the rest of its batch (default true).
    pub stop_batch_on_reject: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_parallel: 8,
            max_steps: 50,
            call_timeout_ms: None,
            cancel_grace_ms: 5_000,
            approval_timeout_ms: None,
            stop_batch_on_reject: true,
        }
    }
}

impl LimitsConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_parallel == 0 {
            return Err(ConfigError::invalid(
                "limits.max_parallel",
                "is 0: no call could ever start; use 1 for strict serial, or more (default 8)",
            ));
        }
        if self.max_steps == 0 {
            return Err(ConfigError::invalid(
                "limits.max_steps",
                "is 0: the model could never be asked; give at least 1 (default 50)",
            ));
        }
        Ok(())
    }
}

/// `[telemetry]`: OpenTelemetry export of the session's spans and metrics
/// (docs/observability.md). Exporting needs the `otlp` feature; `toolrail run` and `chat`
/// switch it on with `--otlp`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Export over OTLP/HTTP with protobuf bodies (default false).
    pub otlp: bool,
    /// The collector's base URL (`http://127.0.0.1:4318`; `/v1/traces` and `/v1/metrics`
    /// are appended). Unset: `OTEL_EXPORTER_OTLP_ENDPOINT`, else `http://localhost:4318`.
    pub endpoint: Option<String>,
    /// Export the arguments and result text of tool calls (`gen_ai.tool.call.arguments`,
    /// `gen_ai.tool.call.result`) too (default false: they can hold secrets).
    pub capture_content: bool,
    /// Spans waiting for export at most (default 8,192); past it spans are dropped and
    /// counted, so a slow or dead collector never grows memory. The default holds a burst
    /// of a thousand calls with every phase span (about 5 spans a call) even before the
    /// first export. It also bounds the events a session's telemetry thread may be behind.
    pub max_queue: usize,
    /// A call's phase spans (`toolrail.policy`, `queued`, `run`, `commit_wait`) are made
    /// only when the call took at least this long, record to commit (default 1 ms; 0: for
    /// every call). A sub-millisecond call shows nothing in a waterfall and its phases
    /// would be four of its five spans.
    pub phase_spans_min_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp: false,
            endpoint: None,
            capture_content: false,
            max_queue: 8_192,
            phase_spans_min_ms: 1,
        }
    }
}

impl TelemetryConfig {
    /// Nothing asked for: the section is left out of a recorded configuration.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}
