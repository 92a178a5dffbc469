//! MCP tools (DESIGN §2): servers of the Model Context Protocol, started as child processes
//! and spoken to with the official SDK (`rmcp`), their tools registered as external tools —
//! `mcp__<server>__<tool>`, provenance `mcp(<server>)`, the server's version on every call —
//! so every MCP call passes the same pipeline, policy, scheduler and log as a built-in one.
//!
//! Depends on `tools-core` and `session-log`.
//!
//! # Example
//!
//! A server configured in the common `mcpServers` JSON shape, and the same in TOML; the
//! defaults fill what is left out, and a mistake names the file.
//!
//! ```
//! use std::time::Duration;
//!
//! use toolrail_mcp::{McpConfig, Parallel, Start};
//!
//! let json = McpConfig::from_json(
//!     r#"{"mcpServers": {"github": {
//!         "command": "npx",
//!         "args": ["-y", "@modelcontextprotocol/server-github"],
//!         "env": {"LOG_LEVEL": "warn"},
//!         "disabledTools": ["delete_repository"]
//!     }}}"#,
//!     "servers.json",
//! )?;
//! let github = &json.servers["github"];
//! assert!(github.offers("search_code") && !github.offers("delete_repository"));
//! assert_eq!((github.parallel, github.start), (Parallel::Auto, Start::Session));
//! assert_eq!(github.call_timeout(), Duration::from_secs(120));
//!
//! let toml = McpConfig::from_toml(
//!     r#"
//!     [mcp_servers.github]
//!     command = "npx"
//!     args = ["-y", "@modelcontextprotocol/server-github"]
//!     env = { LOG_LEVEL = "warn" }
//!     disabled_tools = ["delete_repository"]
//!     "#,
//!     "servers.toml",
//! )?;
//! assert_eq!(toml, json);
//!
//! let typo = McpConfig::from_json(r#"{"mcpServers": {"x": {"comand": "npx"}}}"#, "bad.json");
//! assert!(typo.is_err_and(|error| error.to_string().starts_with("bad.json: ")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod call;
mod config;
mod naming;
mod process;
pub mod serve;
mod server;
mod stderr;
mod tool;
mod wire;

pub use config::{ConfigError, McpConfig, Parallel, ServerConfig, Start};
pub use naming::{MAX_NAME, name_of};
pub use server::{McpOptions, McpServers, ServerState};
pub use tool::{Listed, McpTool};
pub use wire::SkippedTool;
