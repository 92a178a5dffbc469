//! `toolrail mcp list --config FILE`: starts the configured MCP servers against the shipped
//! tools, prints each server's state and the tools as registered (name, kind, read-only,
//! concurrency), then ends the servers.
//!
//! `toolrail mcp serve`: the workspace's tools served to an MCP client (stdio, or streamable
//! HTTP on a loopback address), every call a call of one toolrail session.

use std::path::{Path, PathBuf};

use anyhow::Result;
use toolrail_mcp::{McpConfig, McpServers, ServerState};
use toolrail_session_log::ToolSource;

use crate::flags::AgentFlags;
use crate::{bad_input, runtime};

#[derive(clap::Args)]
pub(crate) struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(clap::Subcommand)]
enum McpCommand {
    /// Start the servers of a configuration and list their tools as registered.
    List {
        /// The servers (JSON or TOML, the `mcpServers` shape).
        #[arg(long)]
        config: PathBuf,
    },
    /// Serve this workspace's tools to an MCP client: every call is recorded in a session,
    /// judged by the rules, asked through the client where a rule says ask, and confined.
    Serve(Box<ServeArgs>),
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Serve streamable HTTP at `http://ADDR/mcp` (loopback only: 127.0.0.1:PORT) instead
    /// of stdio.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub(crate) flags: AgentFlags,
}

/// An MCP configuration file (JSON or TOML, the `mcpServers` shape).
pub(crate) fn read_config(config: &Path) -> Result<McpConfig> {
    let text = std::fs::read_to_string(config)
        .map_err(|error| bad_input!("cannot read {}: {error}", config.display()))?;
    let name = config.display().to_string();
    if config
        .extension()
        .is_some_and(|extension| extension == "toml")
    {
        McpConfig::from_toml(&text, &name)
    } else {
        McpConfig::from_json(&text, &name)
    }
    .map_err(|error| bad_input!("{error}"))
}

/// A server that is not running, with why: `mcp list` fails (exit 1) when any is.
#[derive(Debug)]
struct NotRunning(Vec<String>);

impl std::fmt::Display for NotRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.0.len();
        write!(
            f,
            "{count} server{} not running: {}",
            if count == 1 { " is" } else { "s are" },
            self.0.join(", ")
        )
    }
}

impl std::error::Error for NotRunning {}

pub(crate) fn run(args: McpArgs) -> Result<()> {
    let config = match args.command {
        McpCommand::List { config } => config,
        McpCommand::Serve(serve) => return crate::mcp_serve::run(*serve),
    };
    let parsed = read_config(&config)?;
    // The shipped tools first, so a name an MCP tool cannot have shows as taken.
    let registry = toolrail_runtime::Agent::builder()
        .workspace([std::env::current_dir()?])
        .tool_set()
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    runtime()?.block_on(async {
        let servers = McpServers::start(&parsed, &registry).await;
        let tools = registry.snapshot();
        let mut failed = Vec::new();
        for (server, state) in servers.states() {
            match &state {
                ServerState::Running {
                    version,
                    protocol,
                    tools,
                    skipped,
                } => {
                    println!(
                        "{server}: running, version {version}, protocol {protocol}, {} tool{}",
                        tools.len(),
                        if tools.len() == 1 { "" } else { "s" }
                    );
                    for tool in skipped {
                        println!("  not offered: {}: {}", tool.name, tool.why);
                    }
                    if servers.contained(&server) == Some(false) {
                        println!(
                            "  (no PID namespace here: a process it starts with setsid may outlive it)"
                        );
                    }
                }
                // Lazy servers connect at their first call: not started is not failed.
                ServerState::Starting => {
                    println!("{server}: still connecting in the background (start = \"lazy\")")
                }
                ServerState::Disabled => println!("{server}: disabled"),
                ServerState::Restarting { why, restarts } => {
                    println!("{server}: failed: {why} (restart {restarts} pending)");
                    failed.push(server.clone());
                }
                ServerState::Withdrawn { why } => {
                    println!("{server}: withdrawn: {why}");
                    failed.push(server.clone());
                }
            }
            let source = ToolSource::Mcp(server.as_str().into());
            for entry in tools.offered().filter(|entry| entry.source() == &source) {
                let spec = entry.spec();
                println!(
                    "  {:<48} {:<7} {:<9} {}",
                    spec.name(),
                    spec.kind().as_str(),
                    if spec.is_read_only() { "read-only" } else { "" },
                    spec.concurrency_summary().unwrap_or("exclusive")
                );
            }
        }
        servers.shutdown().await;
        if failed.is_empty() {
            Ok(())
        } else {
            Err(anyhow::Error::new(NotRunning(failed)))
        }
    })
}
