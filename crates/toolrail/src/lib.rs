//! Reliable tool calls for LLM agents. A tool call here is not a function call: it is
//! recorded before it may act, passes stages with different powers (rules, approvals,
//! deny-only guards, a kernel sandbox), runs beside others when it is safe to, is committed
//! in the order the model asked, and always ends with an honest outcome — also when it is
//! cancelled, times out, or the process is killed — which the log, the model and the UI all
//! read the same way.
//!
//! This is the crate to depend on. [`Agent`] puts a session together from a
//! [`SessionConfig`] (a `toolrail.toml`, or code) and the tools you add:
//!
//! ```
//! use toolrail::prelude::*;
//! use toolrail::scenario::ScriptedModel;
//!
//! /// Counts the words of a text.
//! struct WordCount;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct WordCountArgs {
//!     /// The text to count.
//!     text: String,
//! }
//!
//! impl TypedTool for WordCount {
//!     type Args = WordCountArgs;
//!
//!     fn spec(&self) -> ToolSpec {
//!         ToolSpec::for_args::<WordCountArgs>("word_count", "Count the words of a text.")
//!             .read_only()
//!             .parallel_safe()
//!             .build()
//!     }
//!
//!     async fn run(&self, _ctx: &ToolContext, args: WordCountArgs) -> ToolResult {
//!         Ok(ToolOutput::text(args.text.split_whitespace().count().to_string()))
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let folder = tempfile::tempdir()?;
//! // A scripted model stands in for a real one here; `.model(ModelConfig::new(..))` names a
//! // server instead.
//! let model = std::sync::Arc::new(ScriptedModel::new([
//!     ScriptedModel::tool_call("c1", "word_count", r#"{"text": "one two three"}"#),
//!     ScriptedModel::text("Three words."),
//! ]));
//! let agent = Agent::builder()
//!     .workspace([folder.path()])
//!     .store(Store::jsonl(folder.path().join("sessions"))?)
//!     .tools(["read", "grep"])
//!     .tool(Typed::new(WordCount))
//!     .deny("bash(curl *)")
//!     .model_client(model)
//!     .build()
//!     .await?;
//! let answer = agent.prompt("How many words in 'one two three'?").await?;
//! assert_eq!(answer.text, "Three words.");
//! assert_eq!(answer.results[0].text(), "3");
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! Guides: `docs/embedding.md` (a custom tool, the shipped tools, rules, a store, a real
//! provider, streaming, cancel, crash and resume), `docs/config.md` (every field of a
//! `toolrail.toml`), `docs/rules.md`, `docs/scenarios.md`, `docs/design.md`.
//!
//! Cargo features, all on by default and each removable: `postgres` and `sqlite` (stores),
//! `providers` (OpenAI-compatible and Anthropic clients), `mcp` (MCP servers' tools, and
//! serving the session's tools to MCP clients),
//! `code-js` and `code-python` (code mode). Without any, an agent keeps JSONL sessions and
//! takes a model client you give it. Off by default: `otlp` (OpenTelemetry spans and
//! metrics over OTLP/HTTP, `docs/observability.md`).

pub use toolrail_runtime::ClientCall;
pub use toolrail_runtime::{
    Agent, AgentBuilder, AgentError, AgentEvent, AgentStream, Answer, BashConfig, BuildError,
    Canceller, CodeConfig, CodeLanguage, CodePresentation, ConfigError, DEFAULT_TOOLS,
    DurabilityName, FilesConfig, LimitsConfig, McpServerConfig, ModelConfig, PermissionsConfig,
    PresetName, ProviderName, Recovery, RepairedCall, Resumed, RetryConfig, RuleEntry,
    SandboxConfig, SandboxModeName, SandboxRuleConfig, SandboxTierName, SessionConfig, Store,
    StoreConfig, StoreOpenError, StoreUrl, TelemetryConfig, ToolsConfig, WorkspaceConfig, catalog,
    scenario,
};

/// A session served to MCP clients (`toolrail mcp serve`): the agent as an MCP server's
/// host, with `toolrail_mcp::serve` for the server itself.
#[cfg(feature = "mcp")]
pub use toolrail_runtime::serve;

/// OpenTelemetry export of sessions: GenAI spans and metrics over OTLP/HTTP.
#[cfg(feature = "otlp")]
pub use toolrail_runtime::telemetry;

/// The fleet worker: sessions shared by many processes through PostgreSQL.
#[cfg(feature = "postgres")]
pub use toolrail_runtime::fleet;

pub use toolrail_agent_loop::{
    DeltaSink, Live, LiveEvent, LiveSink, ModelClient, ModelDelta, ModelError, ModelFailure,
    ModelRequest, ModelResponse,
};
pub use toolrail_interaction::{
    ChannelApprovals, QuestionService, ScriptedApprovals, ScriptedQuestions, TerminalApprovals,
};
pub use toolrail_permissions::{Permissions, Preset, Rule, RuleEffect, RuleFile};
pub use toolrail_session_log::{
    ContentBlock, ErrorCode, Event, EventData, SessionId, ToolResultRecord, event::TurnEndKind,
    recover,
};
pub use toolrail_session_store::{Durability, JsonlStore};
pub use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken, ClaimMode, Concurrency,
    Exposure, ResourceClaim, ResourceKey, Tool, ToolCode, ToolContext, ToolFailure, ToolKind,
    ToolOutput, ToolResult, ToolSpec, Typed, TypedTool, tool_code,
};

/// What a result shows a UI, in the shape of its card: a tool returns one of these with
/// `ToolOutput::with_details`, and its card is drawn from it.
pub use toolrail_session_log::details;

/// Model clients for OpenAI-compatible and Anthropic servers.
#[cfg(feature = "providers")]
pub use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, ToolChoice, Wire};

/// The SQLite store.
#[cfg(feature = "sqlite")]
pub use toolrail_session_store::SqliteStore;

/// The PostgreSQL store (leases, the work queue).
#[cfg(feature = "postgres")]
pub use toolrail_session_store::PostgresStore;

/// What a program that builds an agent names most.
pub mod prelude {
    pub use toolrail_runtime::{
        Agent, AgentEvent, Answer, ModelConfig, PresetName, ProviderName, SessionConfig, Store,
    };
    pub use toolrail_tools_core::{
        Concurrency, Tool, ToolCode, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult,
        ToolSpec, Typed, TypedTool, tool_code,
    };
}

/// Each layer whole, for what the names above leave out.
pub mod layers {
    /// The batch scheduler, the agent loop, the model seam, `tool_search`.
    pub use toolrail_agent_loop as agent_loop;
    /// Code mode (`run_code`).
    #[cfg(any(feature = "code-js", feature = "code-python"))]
    pub use toolrail_code_mode as code;
    /// read, write, edit, glob, grep.
    pub use toolrail_fs_tools as fs;
    /// Approvals, questions, the todo board, plan mode.
    pub use toolrail_interaction as interaction;
    /// MCP servers' tools.
    #[cfg(feature = "mcp")]
    pub use toolrail_mcp as mcp;
    /// Rules, presets, session approvals.
    pub use toolrail_permissions as permissions;
    /// Deny-only guards.
    pub use toolrail_policy_guards as guards;
    /// Cards and renderers.
    pub use toolrail_presenters as presenters;
    /// Model clients.
    #[cfg(feature = "providers")]
    pub use toolrail_providers as providers;
    /// Ids, content blocks, results, details, the event vocabulary, sinks, replay, recovery.
    pub use toolrail_session_log as log;
    /// The JSONL, SQLite and PostgreSQL stores.
    pub use toolrail_session_store as store;
    /// bash and its kernel sandbox.
    pub use toolrail_shell_tool as shell;
    /// Tool definitions, the registry, contracts, the single-call pipeline, stage traits.
    pub use toolrail_tools_core as tools;
}

/// The schema crate typed tools derive their argument schemas with.
pub use schemars;
/// JSON values, as tools read and return them.
pub use serde_json;
