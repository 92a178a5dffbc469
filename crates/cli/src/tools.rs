//! `toolrail tools [--toolset …]`: the tool set a session would get, one line per tool.

use std::path::PathBuf;

use anyhow::Result;
use toolrail_testkit::Scenario;
use toolrail_tools_core::Exposure;

use crate::bad_input;

#[derive(clap::Args)]
pub struct ToolsArgs {
    /// The tools, by name (as in a scenario's `toolset`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "read,write,edit,glob,grep,bash,todo_write,ask_user"
    )]
    toolset: Vec<String>,
    /// The workspace the file tools and bash would be confined to.
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
}

pub fn run(args: ToolsArgs) -> Result<()> {
    let scenario =
        Scenario::from_json(&serde_json::json!({"toolset": args.toolset, "turns": []}).to_string())
            .map_err(|error| bad_input!("{error}"))?;
    let workspace = std::fs::canonicalize(&args.workspace)
        .map_err(|error| bad_input!("workspace {}: {error}", args.workspace.display()))?;
    let registry = scenario
        .tools(
            &workspace,
            &crate::absolute_dir("TMPDIR", &std::env::temp_dir())?,
        )
        .map_err(|error| bad_input!("{error}"))?;
    let tools = registry.snapshot();
    println!(
        "{:<16} {:<8} {:<9} {:<8} {:<9} {:<9} concurrency",
        "name", "kind", "source", "version", "exposure", "read-only"
    );
    for entry in tools.offered() {
        let spec = entry.spec();
        let exposure = match spec.tool_exposure() {
            Exposure::Direct => "direct",
            Exposure::Deferred => "deferred",
            Exposure::Hidden => "hidden",
        };
        println!(
            "{:<16} {:<8} {:<9} {:<8} {:<9} {:<9} {}",
            spec.name(),
            spec.tool_kind().as_str(),
            entry.source().to_string(),
            spec.tool_version(),
            exposure,
            if spec.is_read_only() { "yes" } else { "no" },
            spec.concurrency_summary().unwrap_or("exclusive")
        );
    }
    Ok(())
}
