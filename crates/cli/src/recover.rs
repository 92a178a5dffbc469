//! `toolrail recover SESSION`: opens a log as a resuming session would — a torn last line is
//! cut, every call of an interrupted turn gets an honest synthetic result (file writes are
//! probed for what really happened) — and says what was repaired and why.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use toolrail_fs_tools::FsEffectProbe;
use toolrail_runtime::Recovery;
use toolrail_session_log::{EffectProbe, SessionStore, recover};

use crate::session::SessionFile;
use crate::{bad_input, runtime};

#[derive(clap::Args)]
pub struct RecoverArgs {
    /// The session log (`<session>.jsonl`).
    session: PathBuf,
}

pub fn run(args: RecoverArgs) -> Result<()> {
    let file = SessionFile::at(&args.session)?;
    let opened = file
        .store
        .open(&file.id)
        .map_err(|error| bad_input!("{error}"))?;
    let probes: Vec<Arc<dyn EffectProbe>> = vec![Arc::new(FsEffectProbe::new())];
    let report = runtime()?.block_on(recover(
        &opened.events,
        opened.torn_bytes_dropped,
        &probes,
        &opened.log,
    ))?;
    let recovery = Recovery::new(&report, &opened.events);
    if recovery.is_empty() {
        println!("{}: nothing to repair", file.path.display());
    } else {
        println!("{recovery}");
    }
    Ok(())
}
