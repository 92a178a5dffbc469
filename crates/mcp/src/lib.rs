//! MCP tools (DESIGN §2): servers of the Model Context Protocol, started as child processes
//! and spoken to with the official SDK (`rmcp`), their tools registered as external tools —
//! `mcp__<server>__<tool>`, provenance `mcp(<server>)`, the server's version on every call —
//! so every MCP call passes the same pipeline, policy, scheduler and log as a built-in one.
//!
//! Depends on `tools-core` and `session-log`.

mod config;
mod naming;
mod server;
mod tool;

pub use config::{ConfigError, McpConfig, Parallel, ServerConfig, Start};
pub use naming::{MAX_NAME, assign, base_name};
pub use server::{McpServers, ServerState};
pub use tool::{Listed, McpTool};
