//! `toolrail mcp list --config FILE`: starts the configured MCP servers against the shipped
//! tools, prints each server's state and the tools as registered (name, kind, read-only,
//! concurrency), then ends the servers.

use std::path::PathBuf;

use anyhow::Result;
use toolrail_mcp::{McpConfig, McpServers, ServerState};
use toolrail_session_log::ToolSource;

use crate::{bad_input, runtime};

#[derive(clap::Args)]
pub struct McpArgs {
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
}

pub fn run(args: McpArgs) -> Result<()> {
    let McpCommand::List { config } = args.command;
    let text = std::fs::read_to_string(&config)
        .map_err(|error| bad_input!("cannot read {}: {error}", config.display()))?;
    let name = config.display().to_string();
    let parsed = if config
        .extension()
        .is_some_and(|extension| extension == "toml")
    {
        McpConfig::from_toml(&text, &name)
    } else {
        McpConfig::from_json(&text, &name)
    }
    .map_err(|error| bad_input!("{error}"))?;
    // The shipped tools first, so a name an MCP tool cannot have shows as taken.
    let registry = toolrail_runtime::Agent::builder()
        .workspace([std::env::current_dir()?])
        .tool_set()
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    runtime()?.block_on(async {
        let servers = McpServers::start(&parsed, &registry).await;
        let tools = registry.snapshot();
        for (server, state) in servers.states() {
            match &state {
                ServerState::Running { version, tools } => {
                    println!(
                        "{server}: running, version {version}, {} tools",
                        tools.len()
                    );
                }
                ServerState::Starting => println!("{server}: still starting"),
                ServerState::Disabled => println!("{server}: disabled"),
                ServerState::Withdrawn { why } => println!("{server}: withdrawn: {why}"),
            }
            let source = ToolSource::Mcp(server.as_str().into());
            for entry in tools.offered().filter(|entry| entry.source() == &source) {
                let spec = entry.spec();
                println!(
                    "  {:<48} {:<7} {:<9} {}",
                    spec.name(),
                    spec.tool_kind().as_str(),
                    if spec.is_read_only() { "read-only" } else { "" },
                    spec.concurrency_summary().unwrap_or("exclusive")
                );
            }
        }
        servers.shutdown().await;
    });
    Ok(())
}
