//! `toolrail tools [--toolset …]`: the tool set a session would get, one line per tool,
//! made by the runtime as a session makes it (nothing is started or written).

use std::path::PathBuf;

use anyhow::Result;
use toolrail_runtime::{Agent, catalog};
use toolrail_tools_core::Exposure;

use crate::bad_input;

#[derive(clap::Args)]
pub(crate) struct ToolsArgs {
    /// The shipped tools, by catalog name (default: every one).
    #[arg(long, value_delimiter = ',')]
    toolset: Option<Vec<String>>,
    /// The workspace the file tools and bash would be confined to.
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
}

pub(crate) fn run(args: ToolsArgs) -> Result<()> {
    let names = args
        .toolset
        .unwrap_or_else(|| catalog::names().map(str::to_owned).collect());
    let registry = Agent::builder()
        .workspace([&args.workspace])
        .tools(names)
        .tool_set()
        .map_err(|error| {
            bad_input!(
                "{}",
                error.to_string().replace(
                    "the configuration cannot be used: `tools.enabled`",
                    "--toolset"
                )
            )
        })?;
    let tools = registry.snapshot();
    println!(
        "{:<16} {:<8} {:<9} {:<8} {:<9} {:<9} concurrency",
        "name", "kind", "source", "version", "exposure", "read-only"
    );
    for entry in tools.offered() {
        let spec = entry.spec();
        let exposure = match spec.exposure() {
            Exposure::Direct => "direct",
            Exposure::Deferred => "deferred",
            Exposure::Hidden => "hidden",
        };
        println!(
            "{:<16} {:<8} {:<9} {:<8} {:<9} {:<9} {}",
            spec.name(),
            spec.kind().as_str(),
            entry.source().to_string(),
            spec.version(),
            exposure,
            if spec.is_read_only() { "yes" } else { "no" },
            spec.concurrency_summary().unwrap_or("exclusive")
        );
    }
    Ok(())
}
