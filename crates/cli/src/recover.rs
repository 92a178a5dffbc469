//! `toolrail recover SESSION [--store URL] [--dry-run]`: opens a session as resuming it
//! would — a torn last line is cut, every call of an interrupted turn gets an honest
//! synthetic result (file writes are probed for what really happened) — and says what was
//! repaired and why; `--dry-run` says what it would repair and writes nothing.

use anyhow::Result;
use toolrail_runtime::RecoverMode;

use crate::places::locate;
use crate::runtime;

#[derive(clap::Args)]
pub(crate) struct RecoverArgs {
    /// The session: the path of its log (`<session>.jsonl`), or its id in a store.
    session: String,
    /// The store the session is in (default: the current folder's sessions).
    #[arg(long)]
    store: Option<String>,
    /// Say what would be repaired; write nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn run(args: RecoverArgs) -> Result<()> {
    let located = locate(&args.session, args.store.as_deref())?;
    let mode = if args.dry_run {
        RecoverMode::DryRun
    } else {
        RecoverMode::Repair
    };
    // A store that fails while recovering is a failure inside (exit 1), not bad input.
    let recovery = runtime()?
        .block_on(located.store.recover(&located.id, mode))
        .map_err(crate::run::build_error)?;
    let place = format!("{} in {}", located.id, located.store.url());
    match (recovery.is_empty(), args.dry_run) {
        (true, _) => println!("{place}: nothing to repair"),
        (false, true) => println!("{place}: would repair (nothing was written):\n{recovery}"),
        (false, false) => println!("{recovery}"),
    }
    Ok(())
}
