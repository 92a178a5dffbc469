//! The composition root of toolrail (DESIGN §2): one typed description of a session
//! ([`SessionConfig`], read from a `toolrail.toml` or built in code), the catalog of shipped
//! tools ([`catalog`]), and [`Agent`] — a session put together whole, that answers prompts,
//! streams what happens, can be cancelled and steered, and resumes after a crash in one call.
//! The scenario runner ([`scenario`]) and the fleet worker ([`fleet`]) are built on it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use toolrail_runtime::{Agent, SessionConfig};
//! let config = SessionConfig::from_toml(r#"
//!     [tools]
//!     enabled = ["read", "grep", "edit", "bash"]
//!     [permissions]
//!     preset = "workspace"
//!     deny = ["bash(curl *)"]
//!     [model]
//!     provider = "openai"
//!     base_url = "http://127.0.0.1:8000/v1"
//!     model = "qwen3"
//! "#)?;
//! let agent = Agent::from_config(config).await?;
//! let answer = agent.prompt("Fix the failing test.").await?;
//! println!("{} ({:?})", answer.text, answer.end);
//! # Ok(()) }
//! ```
//!
//! Depends on every library crate below it; the CLI, the test kit and the `toolrail`
//! facade build on it.

mod agent;
pub mod catalog;
mod config;
#[cfg(feature = "postgres")]
pub mod fleet;
mod recovery;
pub mod scenario;
#[cfg(feature = "mcp")]
pub mod serve;
mod store;
#[cfg(feature = "otlp")]
pub mod telemetry;

pub use agent::{
    Agent, AgentBuilder, AgentError, AgentEvent, AgentStream, Answer, BuildError, Canceller,
    ClientCall, Resumed,
};
pub use config::{
    BashConfig, CodeConfig, CodeLanguage, CodePresentation, ConfigError, DEFAULT_TOOLS,
    DurabilityName, FilesConfig, LimitsConfig, McpServerConfig, ModelConfig, PermissionsConfig,
    PresetName, ProviderName, RetryConfig, RuleEntry, SandboxConfig, SandboxModeName,
    SandboxRuleConfig, SandboxTierName, SessionConfig, StoreConfig, TelemetryConfig, ToolsConfig,
    WorkspaceConfig,
};
pub use recovery::{PendingApprovalCall, RecoverMode, Recovery, RepairedCall};
pub use store::{Store, StoreOpenError, StoreUrl};
