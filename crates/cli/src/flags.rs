//! The flags `chat` and `run --prompt` share: a session configuration (`--config`, or the
//! workspace's `toolrail.toml`) with flags laid over it, and how approvals are answered.
//! What a flag sets is a field of [`SessionConfig`], validated with it: an error names the
//! flag.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use toolrail_runtime::{
    CodeLanguage, ModelConfig, PresetName, ProviderName, RuleEntry, SandboxModeName, SessionConfig,
};
use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

use crate::{absolute_dir, bad_input};

#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct AgentFlags {
    /// The session configuration (TOML or JSON; docs/config.md). Default: `toolrail.toml`
    /// in the workspace, if there is one. The flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The folder the tools work in (default: the current folder).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The model's wire format: `openai` (OpenAI-compatible chat completions: OpenAI,
    /// DeepSeek, vLLM, llama.cpp, Ollama) or `anthropic`.
    #[arg(long, value_enum)]
    pub provider: Option<ProviderArg>,
    /// The model's name on the server.
    #[arg(long)]
    pub model: Option<String>,
    /// The server's base URL (default: OpenAI's or Anthropic's own API).
    #[arg(long)]
    pub base_url: Option<String>,
    /// The environment variable holding the API key (default: OPENAI_API_KEY or
    /// ANTHROPIC_API_KEY, if set). The key is never printed or logged.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// The system prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Sampling temperature.
    #[arg(long)]
    pub temperature: Option<f64>,
    /// The most model requests one turn may make.
    #[arg(long)]
    pub max_steps: Option<u32>,
    /// The longest one try of a model request may take, from sending to the answer's end:
    /// `90s`, `20m` (default 20m). Keepalives and other bytes do not extend it.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub request_timeout: Option<Duration>,
    /// The longest one model request may take, every try and the waits between tries
    /// included (default 30m).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub step_timeout: Option<Duration>,
    /// The longest silence while waiting for the answer's next bytes (default 2m).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub idle_timeout: Option<Duration>,
    /// OpenAI strict mode: schemas adapted so the server holds the model to them.
    #[arg(long)]
    pub strict: bool,
    /// How `bash` is confined.
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxArg>,
    /// MCP servers to start (JSON or TOML, the `mcpServers` shape); their tools join.
    #[arg(long)]
    pub mcp: Option<PathBuf>,
    /// Code mode: the languages `run_code` programs may be written in.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub code: Vec<CodeArg>,
    /// Tools offered through `tool_search` instead of up front, e.g. `grep,glob`.
    #[arg(long, value_delimiter = ',')]
    pub deferred: Vec<String>,
    /// Where sessions are kept: `jsonl:DIR`, `sqlite:FILE` or `postgres://…` (default: the
    /// workspace's `.toolrail/sessions`).
    #[arg(long)]
    pub store: Option<String>,
    /// The permission preset: untrusted (read-only tools run, the rest asks), workspace,
    /// never-ask, full-auto.
    #[arg(long)]
    pub preset: Option<String>,
    /// A rule that allows, e.g. `read`, `bash(cargo test*)` (repeat for more).
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,
    /// A rule that denies, e.g. `bash(git push*)` (repeat for more).
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,
    /// Who answers a call that asks: `ask` (you, on this terminal; the default on one),
    /// `never` (nothing is approved: each such call is rejected), `rules-only` (no call
    /// asks: what the rules and the preset do not allow is denied). Without a terminal,
    /// choose one.
    #[arg(long, value_enum)]
    pub approve: Option<ApproveArg>,
    /// Answer approvals over HTTP instead of here: a JSON endpoint on this loopback address
    /// (`127.0.0.1:PORT`; port 0 picks one) with a bearer token printed once at start;
    /// `GET /pending` lists what waits, `POST /answer {"id", "answer"}` answers it.
    #[arg(long = "approvals-listen", value_name = "ADDR")]
    pub approvals_listen: Option<std::net::SocketAddr>,
    /// Export the session's turns, model requests and tool calls as OpenTelemetry spans
    /// and metrics over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, default
    /// `http://localhost:4318`; arguments and results only with `[telemetry]
    /// capture_content`).
    #[arg(long)]
    pub otlp: bool,
}

/// The configuration file: `explicit`, else `toolrail.toml` in `workspace` if there is one.
pub(crate) fn config_file(workspace: &Path, explicit: Option<PathBuf>) -> Option<PathBuf> {
    explicit.or_else(|| {
        let default = workspace.join("toolrail.toml");
        default.is_file().then_some(default)
    })
}

/// The configuration `file` holds, or the defaults without one.
pub(crate) fn read_config(file: Option<&Path>) -> Result<SessionConfig> {
    match file {
        Some(path) => SessionConfig::from_file(path).map_err(|error| bad_input!("{error}")),
        None => Ok(SessionConfig::default()),
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ProviderArg {
    Openai,
    Anthropic,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum SandboxArg {
    ReadOnly,
    WorkspaceWrite,
    FullAccess,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum CodeArg {
    Js,
    Python,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ApproveArg {
    Ask,
    Never,
    RulesOnly,
}

impl AgentFlags {
    /// The workspace: `--workspace`, else the current folder.
    pub(crate) fn workspace(&self) -> Result<PathBuf> {
        match &self.workspace {
            Some(dir) => {
                let dir = absolute_dir("--workspace", dir)?;
                if !dir.is_dir() {
                    return Err(bad_input!("--workspace {}: no such folder", dir.display()));
                }
                Ok(dir)
            }
            None => Ok(std::env::current_dir()?),
        }
    }

    /// The configuration the flags describe, over `--config` or the workspace's
    /// `toolrail.toml`; its store defaults to the workspace's sessions folder.
    pub(crate) fn config(&self) -> Result<SessionConfig> {
        let config = self.config_without_model()?;
        if config.model.is_none() {
            return Err(bad_input!(
                "no model to talk to: give --provider and --model (and --base-url for a local server), or a [model] section in toolrail.toml"
            ));
        }
        Ok(config)
    }

    /// [`AgentFlags::config`] for a session that may have no model (`mcp serve`).
    pub(crate) fn config_without_model(&self) -> Result<SessionConfig> {
        let workspace = self.workspace()?;
        let file = config_file(&workspace, self.config.clone());
        let mut config = read_config(file.as_deref())?;
        if config.workspace.roots.is_empty() || self.workspace.is_some() {
            config.workspace.roots = vec![workspace.clone()];
        }
        self.lay_model(&mut config)?;
        if let Some(steps) = self.max_steps {
            config.limits.max_steps = steps;
        }
        config.telemetry.otlp |= self.otlp;
        if let Some(mode) = self.sandbox {
            config.sandbox.mode = match mode {
                SandboxArg::ReadOnly => SandboxModeName::ReadOnly,
                SandboxArg::WorkspaceWrite => SandboxModeName::WorkspaceWrite,
                SandboxArg::FullAccess => SandboxModeName::FullAccess,
            };
        }
        if let Some(path) = &self.mcp {
            config
                .mcp_servers
                .extend(crate::mcp::read_config(path)?.servers);
        }
        for language in &self.code {
            let language = match language {
                CodeArg::Js => CodeLanguage::Javascript,
                CodeArg::Python => CodeLanguage::Python,
            };
            if !config.code.languages.contains(&language) {
                config.code.languages.push(language);
            }
        }
        for name in &self.deferred {
            if !config.tools.enabled.contains(name) {
                config.tools.enabled.push(name.clone());
            }
            if !config.tools.deferred.contains(name) {
                config.tools.deferred.push(name.clone());
            }
        }
        if let Some(preset) = &self.preset {
            config.permissions.preset = Some(preset_named(preset)?);
        }
        config
            .permissions
            .allow
            .extend(self.allow.iter().cloned().map(RuleEntry::Pattern));
        config
            .permissions
            .deny
            .extend(self.deny.iter().cloned().map(RuleEntry::Pattern));
        // The file's own `[store]`, if it has one (reading anchors its paths, so the
        // value alone cannot say whether it was written).
        let store_written = file.as_ref().is_some_and(|path| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.parse::<toml::Table>().ok())
                .is_some_and(|table| table.contains_key("store"))
        });
        match &self.store {
            Some(url) => config.store.url.clone_from(url),
            None if !store_written => {
                config.store.url = format!(
                    "jsonl:{}",
                    crate::places::sessions_folder(&workspace)?.display()
                );
            }
            None => {}
        }
        config
            .validate()
            .map_err(|error| bad_input!("{}", flag_error(&error.to_string())))?;
        Ok(config)
    }

    fn lay_model(&self, config: &mut SessionConfig) -> Result<()> {
        if let Some(provider) = self.provider {
            let provider = match provider {
                ProviderArg::Openai => ProviderName::Openai,
                ProviderArg::Anthropic => ProviderName::Anthropic,
            };
            match (&mut config.model, &self.model) {
                // The configured model, named again or renamed: its settings stay.
                (Some(model), name) if model.provider == provider => {
                    if let Some(name) = name {
                        model.model.clone_from(name);
                    }
                }
                (_, Some(name)) => config.model = Some(ModelConfig::new(provider, name.clone())),
                (Some(_), None) => {
                    return Err(bad_input!(
                        "--provider names another provider than toolrail.toml's [model]: give --model NAME too"
                    ));
                }
                (None, None) => return Err(bad_input!("--provider needs --model NAME")),
            }
        }
        let Some(model) = config.model.as_mut() else {
            if self.model.is_some() || self.base_url.is_some() {
                return Err(bad_input!(
                    "--model and --base-url need --provider openai|anthropic (or a [model] section in toolrail.toml)"
                ));
            }
            return Ok(());
        };
        if let Some(name) = &self.model {
            model.model.clone_from(name);
        }
        if self.base_url.is_some() {
            model.base_url.clone_from(&self.base_url);
        }
        if self.api_key_env.is_some() {
            model.api_key_env.clone_from(&self.api_key_env);
        }
        if self.system.is_some() {
            model.system.clone_from(&self.system);
        }
        if self.temperature.is_some() {
            model.temperature = self.temperature;
        }
        model.strict |= self.strict;
        for (flag, field) in [
            (self.request_timeout, &mut model.request_timeout_ms),
            (self.step_timeout, &mut model.step_timeout_ms),
            (self.idle_timeout, &mut model.idle_timeout_ms),
        ] {
            if let Some(length) = flag {
                *field = u64::try_from(length.as_millis()).unwrap_or(u64::MAX);
            }
        }
        Ok(())
    }

    /// Who answers approvals, given whether a person is at a terminal; sets what the policy
    /// must know (`rules-only` asks no one).
    pub(crate) fn approvals(&self, terminal: bool, config: &mut SessionConfig) -> Result<Approve> {
        if let Some(address) = self.approvals_listen {
            return match self.approve {
                None | Some(ApproveArg::Ask) => Ok(Approve::Listen(address)),
                Some(_) => Err(bad_input!(
                    "--approvals-listen answers approvals over HTTP; it cannot go with --approve never or rules-only (choose one)"
                )),
            };
        }
        let chosen = match (self.approve, terminal) {
            (Some(ApproveArg::Ask), false) => {
                return Err(bad_input!(
                    "--approve ask needs a terminal to ask on (stdin and stdout are not one); choose --approve never or --approve rules-only"
                ));
            }
            (Some(chosen), _) => chosen,
            (None, true) => ApproveArg::Ask,
            (None, false) => {
                return Err(bad_input!(
                    "no terminal to ask for approvals on: choose --approve never (calls that ask are rejected) or --approve rules-only (only what the rules allow runs; add --allow RULE)"
                ));
            }
        };
        Ok(match chosen {
            ApproveArg::Ask => Approve::Ask,
            ApproveArg::Never => Approve::Refuse(Arc::new(Refuse {
                reason: "this run approves nothing (--approve never)",
            })),
            ApproveArg::RulesOnly => {
                config.permissions.unattended = true;
                // Tools that ask whatever the rules say still meet a closed door.
                Approve::Refuse(Arc::new(Refuse {
                    reason: "this run decides by its rules only (--approve rules-only)",
                }))
            }
        })
    }
}

/// How the session's approvals are answered.
pub(crate) enum Approve {
    /// By the person at the terminal.
    Ask,
    /// By a service that rejects every request.
    Refuse(Arc<Refuse>),
    /// Over HTTP, at an endpoint on this loopback address.
    Listen(std::net::SocketAddr),
}

/// Rejects every request, saying why.
#[derive(Debug)]
pub(crate) struct Refuse {
    reason: &'static str,
}

impl ApprovalService for Refuse {
    fn request<'a>(
        &'a self,
        _request: &'a ApprovalRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(std::future::ready(ApprovalAnswer::Rejected {
            reason: Some(self.reason.to_owned()),
        }))
    }
}

/// A preset by its name on the command line.
pub(crate) fn preset_named(name: &str) -> Result<PresetName> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).map_err(|_| {
        bad_input!("--preset {name}: use one of untrusted, workspace, never-ask, full-auto")
    })
}

/// A configuration error as the flags that set the field name it.
pub(crate) fn flag_error(message: &str) -> String {
    message
        .replace("`model.strict`", "--strict")
        .replace("`model.api_key_env`", "--api-key-env")
        .replace("`model.base_url`", "--base-url")
        .replace("`model.model`", "--model")
        .replace("`model.temperature`", "--temperature")
        .replace("`limits.max_steps`", "--max-steps")
        .replace("`model.request_timeout_ms`", "--request-timeout")
        .replace("`model.step_timeout_ms`", "--step-timeout")
        .replace("`model.idle_timeout_ms`", "--idle-timeout")
}

/// A length of time on the command line: a number and its unit, `500ms`, `90s`, `1.5m`,
/// `20m`, `2h`. The unit is required: a bare `600` could be read as seconds or as the
/// milliseconds of toolrail.toml's `_ms` fields, and the wrong reading is a factor of 1,000.
fn duration_arg(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a length of time: write 500ms, 90s, 20m or 2h"))?;
    let seconds_per = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3_600.0,
        "" => {
            return Err(format!("`{text}` needs a unit: 500ms, 90s, 20m or 2h"));
        }
        other => {
            return Err(format!(
                "`{other}` is not a unit of time: use ms, s, m or h (500ms, 90s, 20m, 2h)"
            ));
        }
    };
    Duration::try_from_secs_f64(value * seconds_per)
        .map_err(|_| format!("`{text}` is too long a time"))
}

/// Reads a prompt from `--prompt` or `--prompt-file` (`-` is stdin).
pub(crate) fn prompt_text(prompt: Option<&str>, file: Option<&Path>) -> Result<Option<String>> {
    match (prompt, file) {
        (Some(text), None) => Ok(Some(text.to_owned())),
        (None, Some(path)) if path == Path::new("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
            Ok(Some(text))
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .map(Some)
            .map_err(|error| bad_input!("--prompt-file {}: {error}", path.display())),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(bad_input!("give --prompt or --prompt-file, not both")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::duration_arg;

    #[test]
    fn lengths_of_time_need_a_unit_and_say_which_ones_there_are() {
        let read: Vec<_> = ["500ms", "90s", "1.5m", "20m", "20min", "2h", " 1s "]
            .into_iter()
            .map(duration_arg)
            .collect();
        assert_eq!(
            read,
            [
                Ok(Duration::from_millis(500)),
                Ok(Duration::from_secs(90)),
                Ok(Duration::from_secs(90)),
                Ok(Duration::from_secs(1_200)),
                Ok(Duration::from_secs(1_200)),
                Ok(Duration::from_secs(7_200)),
                Ok(Duration::from_secs(1)),
            ]
        );
        assert_eq!(
            duration_arg("600"),
            Err("`600` needs a unit: 500ms, 90s, 20m or 2h".to_owned())
        );
        assert_eq!(
            duration_arg("10d"),
            Err("`d` is not a unit of time: use ms, s, m or h (500ms, 90s, 20m, 2h)".to_owned())
        );
        for bad in ["-5s", "s", "1.2.3s", ""] {
            assert!(
                duration_arg(bad).is_err_and(|error| error.contains("not a length of time")),
                "{bad}"
            );
        }
    }
}
