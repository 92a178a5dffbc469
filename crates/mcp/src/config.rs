//! Server configuration, in the common `mcpServers` shape (JSON or TOML): how to start each
//! server, how long to wait for it, which of its tools to offer, and whether its calls may
//! run beside others.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Every configured server, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The servers, by name (read from `mcpServers`, or `mcp_servers`); each one's tools
    /// join as `mcp__<server>__<tool>`.
    #[serde(rename = "mcpServers", alias = "mcp_servers", default)]
    pub servers: BTreeMap<String, ServerConfig>,
}

/// Whether a server's calls may overlap with other calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Parallel {
    /// Tools the server marks read-only (`readOnlyHint`) may; the rest run alone.
    #[default]
    Auto,
    /// Every call runs alone.
    Never,
    /// Every call may overlap (the server is known to cope).
    Always,
}

/// When a server starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// At session start: the session waits until its tools are listed (up to the startup
    /// timeout).
    #[default]
    Session,
    /// In the background: the session does not wait; its tools join from the first request
    /// after they are listed.
    Lazy,
}

/// One server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerConfig {
    /// The program that starts the server (`npx`, `uvx`): a path, or a name found on
    /// `PATH`.
    pub command: String,
    /// The arguments `command` is started with (`["mcp-server-time"]`).
    #[serde(default)]
    pub args: Vec<String>,
    /// Set for the server on top of an allow-listed part of this process's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The server's working folder.
    pub cwd: Option<PathBuf>,
    /// How long the handshake, and each listing of the server's tools, may take, in
    /// milliseconds (default 30,000); a server that starts with the session is waited for
    /// this long.
    #[serde(default = "default_startup_ms", alias = "startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    /// How long a call may go without an answer or a progress notification, in
    /// milliseconds (default 120,000): each progress notification starts the wait again, so
    /// a long call that reports progress is not cut off. Past it the request is cancelled
    /// (`notifications/cancelled`) and the call ends `TOOL_TIMEOUT`.
    #[serde(default = "default_call_ms", alias = "call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// The largest message read from the server, in bytes (default 128 MiB). A larger one
    /// is not read: the call it answers ends `TOOL_OUTCOME_UNKNOWN` at once, saying so.
    /// What is read is capped for the model like every tool's output (head and tail, the
    /// whole kept beside the log).
    #[serde(default = "default_max_message", alias = "max_message_bytes")]
    pub max_message_bytes: usize,
    /// Whether its calls may overlap with others (default `auto`).
    #[serde(default)]
    pub parallel: Parallel,
    /// Whether the session waits for it (default `session`) or it connects in the
    /// background (`lazy`).
    #[serde(default)]
    pub start: Start,
    /// Only these tools are offered, when given.
    #[serde(alias = "enabled_tools")]
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    #[serde(default, alias = "disabled_tools")]
    pub disabled_tools: Vec<String>,
    /// A disabled server is not started.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Take the server's annotations at their word: `readOnlyHint` makes a tool read-only
    /// (which the presets let run without asking) and, with `parallel: auto`, shared;
    /// `idempotentHint` makes it safe to retry after a crash. Off by default: hints from a
    /// server are claims, and only ones that ask for more care (`destructiveHint`) count
    /// without this.
    #[serde(default, alias = "trust_annotations")]
    pub trust_annotations: bool,
    /// Restarts after a crash before its tools are withdrawn.
    #[serde(default = "default_restarts", alias = "max_restarts")]
    pub max_restarts: u32,
}

fn default_startup_ms() -> u64 {
    30_000
}

fn default_call_ms() -> u64 {
    120_000
}

fn default_max_message() -> usize {
    128 << 20
}

fn default_restarts() -> u32 {
    3
}

fn yes() -> bool {
    true
}

impl ServerConfig {
    /// `startup_timeout_ms` as a duration.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.startup_timeout_ms)
    }

    /// `call_timeout_ms` as a duration.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    /// Whether the server's tool `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        !self.disabled_tools.iter().any(|disabled| disabled == name)
            && self
                .enabled_tools
                .as_ref()
                .is_none_or(|enabled| enabled.iter().any(|tool| tool == name))
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    /// The source, as the caller named it.
    pub file: String,
    /// What is wrong: the parser's message, or which server lacks a name or a command.
    pub message: String,
}

impl McpConfig {
    /// Reads JSON; `file` names the source in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Self, ConfigError> {
        Self::checked(serde_json::from_str(text), file)
    }

    /// Reads TOML; `file` names the source in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Self, ConfigError> {
        Self::checked(toml::from_str(text), file)
    }

    /// A parsed configuration, checked; either format's parser error becomes the message.
    fn checked(
        parsed: Result<Self, impl std::fmt::Display>,
        file: &str,
    ) -> Result<Self, ConfigError> {
        let config = parsed.map_err(|error| ConfigError {
            file: file.to_owned(),
            message: error.to_string(),
        })?;
        config.check(file)?;
        Ok(config)
    }

    /// Checks what parsing cannot (every server has a name and a command); `file` names
    /// the source in errors.
    pub fn check(&self, file: &str) -> Result<(), ConfigError> {
        for (name, server) in &self.servers {
            if name.is_empty() || server.command.trim().is_empty() {
                return Err(ConfigError {
                    file: file.to_owned(),
                    message: format!(
                        "server `{name}`: give it a name and a `command` to start it with"
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{McpConfig, Parallel, Start};

    #[test]
    fn both_shapes_read_with_defaults_and_unknown_fields_are_named() {
        let json = r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "x"],
            "parallel": "never", "start": "lazy", "disabledTools": ["write_file"]}}}"#;
        let config = McpConfig::from_json(json, "servers.json").unwrap();
        let fs = &config.servers["fs"];
        assert_eq!(fs.args, ["-y", "x"]);
        assert_eq!((fs.parallel, fs.start), (Parallel::Never, Start::Lazy));
        assert!(!fs.offers("write_file") && fs.offers("read_file"));
        assert_eq!(fs.call_timeout_ms, 120_000);
        let toml = "[mcp_servers.time]\ncommand = \"uvx\"\nenabled_tools = [\"now\"]\n";
        let config = McpConfig::from_toml(toml, "servers.toml").unwrap();
        assert!(config.servers["time"].offers("now") && !config.servers["time"].offers("later"));
        let error = McpConfig::from_json(
            r#"{"mcpServers": {"x": {"command": "a", "comand": "b"}}}"#,
            "bad.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("bad.json: ") && error.contains("comand"),
            "{error}"
        );
    }
}
