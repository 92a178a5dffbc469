//! `SessionConfig`: one typed description of a session — workspace, tools, code mode, MCP
//! servers, sandbox, permissions, model, store, limits — read from a `toolrail.toml` or
//! built in code. Every field has a default (docs/config.md lists them); an unknown field
//! or a bad value is an error that names the field's path and what to write instead.

mod sections;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use sections::{
    BashConfig, CodeConfig, CodeLanguage, CodePresentation, DEFAULT_TOOLS, DurabilityName,
    FilesConfig, LimitsConfig, ModelConfig, PermissionsConfig, PresetName, ProviderName,
    RetryConfig, RuleEntry, SandboxConfig, SandboxModeName, SandboxRuleConfig, SandboxTierName,
    StoreConfig, TelemetryConfig, ToolsConfig, WorkspaceConfig,
};

/// One MCP server, in the common `mcpServers` shape.
#[cfg(feature = "mcp")]
pub type McpServerConfig = toolrail_mcp::ServerConfig;

/// One MCP server. This build has no MCP client (the `mcp` feature is off): a
/// configuration that names a server is refused when the agent is built.
#[cfg(not(feature = "mcp"))]
pub type McpServerConfig = serde_json::Value;

/// A session, described whole.
///
/// ```
/// use toolrail_runtime::SessionConfig;
/// let config = SessionConfig::from_toml(r#"
///     [tools]
///     enabled = ["read", "grep", "bash"]
///
///     [permissions]
///     preset = "workspace"
///     deny = [{ rule = "bash(curl *)", reason = "no network from here" }]
/// "#)?;
/// assert_eq!(config.tools.enabled, ["read", "grep", "bash"]);
///
/// // A misspelt field is named, with where it is.
/// let error = SessionConfig::from_toml("[tools]\nenable = []").err();
/// assert!(error.is_some_and(|error| error.to_string().contains("tools.enable")));
/// # Ok::<(), toolrail_runtime::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionConfig {
    /// `[workspace]`: the folders the session may touch.
    #[serde(default)]
    pub workspace: WorkspaceConfig,
    /// `[tools]`: the shipped tools the session has, and their options.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// Code mode (`run_code`): off unless languages are named.
    #[serde(default)]
    pub code: CodeConfig,
    /// MCP servers, by name; their tools join the session as `mcp__<server>__<tool>`.
    #[serde(default, rename = "mcp_servers", alias = "mcpServers")]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// `[sandbox]`: how `bash` (and code mode's Python) is confined.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// `[permissions]`: the preset and the rules that decide each call.
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// The model; without one, the embedder gives a `ModelClient` to the builder.
    #[serde(default)]
    pub model: Option<ModelConfig>,
    /// `[store]`: where the session's log is kept, and how durably.
    #[serde(default)]
    pub store: StoreConfig,
    /// `[limits]`: the scheduler's and the loop's bounds.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `[telemetry]`: OpenTelemetry export (off by default).
    #[serde(default, skip_serializing_if = "TelemetryConfig::is_default")]
    pub telemetry: TelemetryConfig,
}

/// A configuration that cannot be used: where, what, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not TOML (or JSON), or a field is unknown or of the wrong type.
    #[error("{origin}: `{path}`: {message}")]
    Field {
        /// The file, or `toolrail.toml (inline)`.
        origin: String,
        /// The field's path (`model.temperature`, `permissions.deny[1].rule`); `.` for the
        /// whole document.
        path: String,
        /// What is wrong, on one line (the parser's source excerpt left out).
        message: String,
    },
    /// A value that parses but cannot be used.
    #[error("`{path}`: {message}")]
    Invalid {
        /// The field's path (`limits.max_parallel`), or the section's (`code`) when the
        /// fault lies between its fields.
        path: String,
        /// Why the value cannot be used, and what to write instead.
        message: String,
    },
    /// The file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The file, as given to [`SessionConfig::from_file`].
        path: PathBuf,
        /// Why it could not be read (`cannot be read: No such file or directory …`).
        message: String,
    },
}

impl ConfigError {
    pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl SessionConfig {
    /// Reads a `toolrail.toml` text; relative paths in it stay relative (to the folder the
    /// session runs in).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::parse_toml(text, "toolrail.toml (inline)")
    }

    /// Reads a `toolrail.toml` file; relative paths in it are taken from the file's folder.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            message: format!("cannot be read: {error}"),
        })?;
        let mut config = Self::parse_toml(&text, &path.display().to_string())?;
        if let Some(folder) = path.parent() {
            config.anchor(folder);
        }
        Ok(config)
    }

    /// Reads the same description as JSON (the shape scenario files embed).
    pub fn from_json_value(value: serde_json::Value, origin: &str) -> Result<Self, ConfigError> {
        Self::read(value, origin)
    }

    fn parse_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let deserializer = toml::Deserializer::parse(text).map_err(|error| ConfigError::Field {
            origin: origin.to_owned(),
            path: ".".to_owned(),
            message: one_line(&error.to_string()),
        })?;
        Self::read(deserializer, origin)
    }

    /// Deserializes and checks a configuration from any format, naming the field of an error.
    fn read<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
        origin: &str,
    ) -> Result<Self, ConfigError> {
        let config: Self = serde_path_to_error::deserialize(deserializer).map_err(|error| {
            let path = error.path().to_string();
            ConfigError::Field {
                origin: origin.to_owned(),
                path,
                message: one_line(&error.into_inner().to_string()),
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what parsing cannot: values that parse but cannot be used. The builder checks
    /// again, so a configuration made in code is held to the same rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate()?;
        self.code.validate()?;
        if let Some(model) = &self.model {
            model.validate()?;
        }
        self.store.validate()?;
        if self.workspace.roots.is_empty() {
            return Err(ConfigError::invalid(
                "workspace.roots",
                "is empty: give at least one folder (default `.`)",
            ));
        }
        for name in &self.tools.deferred {
            if !self.tools.enabled.contains(name) {
                return Err(ConfigError::invalid(
                    "tools.deferred",
                    format!(
                        "`{name}` is deferred but not in `tools.enabled`; add it there, or drop it here"
                    ),
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in &self.tools.enabled {
            if !seen.insert(name) {
                return Err(ConfigError::invalid(
                    "tools.enabled",
                    format!("`{name}` is named twice"),
                ));
            }
        }
        Ok(())
    }

    /// Makes the relative paths of the configuration relative to `folder`.
    pub fn anchor(&mut self, folder: &Path) {
        let anchor = |path: &mut PathBuf| {
            if path.is_relative() {
                *path = folder.join(&*path);
            }
        };
        self.workspace.roots.iter_mut().for_each(anchor);
        if let Some(file) = self.permissions.file.as_mut() {
            anchor(file);
        }
        self.sandbox.hide.iter_mut().for_each(anchor);
        self.store.anchor(folder);
    }
}

/// A parser's message on one line, without the source excerpt TOML draws under it
/// (`2 | enable = []` and a line of carets).
fn one_line(message: &str) -> String {
    let excerpt = |line: &str| {
        let numbered = line
            .split_once('|')
            .is_some_and(|(number, _)| number.trim().chars().all(|c| c.is_ascii_digit()));
        numbered || line.starts_with("-->") || line.chars().all(|c| matches!(c, '^' | '|' | ' '))
    };
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !excerpt(line))
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests;
