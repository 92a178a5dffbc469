//! `toolrail sandbox [--tier namespaces|bubblewrap] [--bwrap PATH]`: which sandbox tier
//! runs commands here, what it enforces, and — when it cannot run — why and what to do.
//! Exit code 1 when the tier asked about (by default the namespaces tier) is unavailable.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use toolrail_shell_tool::{SandboxTier, diagnose};

#[derive(clap::Args)]
pub(crate) struct SandboxArgs {
    /// The tier to check: `namespaces` (the default, built in) or `bubblewrap`; `all`
    /// checks both and fails only if neither is usable.
    #[arg(long, default_value = "namespaces", value_parser = ["namespaces", "bubblewrap", "all"])]
    tier: String,
    /// Where bubblewrap is.
    #[arg(long, default_value = "/usr/bin/bwrap")]
    bwrap: PathBuf,
}

pub(crate) fn run(args: SandboxArgs) -> Result<()> {
    let tiers = match args.tier.as_str() {
        "bubblewrap" => vec![SandboxTier::Bubblewrap(args.bwrap)],
        "all" => vec![SandboxTier::Namespaces, SandboxTier::Bubblewrap(args.bwrap)],
        _ => vec![SandboxTier::Namespaces],
    };
    let mut usable = 0;
    for tier in &tiers {
        let diagnosis = diagnose(tier);
        print!("{diagnosis}");
        usable += usize::from(diagnosis.problem.is_none());
    }
    if usable == 0 {
        return Err(anyhow!(
            "no sandbox tier is usable here: commands in read-only and workspace-write mode will not run (SANDBOX_UNAVAILABLE)"
        ));
    }
    Ok(())
}
