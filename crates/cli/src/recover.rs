//! `toolrail recover SESSION`: opens a log as a resuming session would — a torn last line is
//! cut, every call of an interrupted turn gets an honest synthetic result (file writes are
//! probed for what really happened) — and says what was repaired and why.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use toolrail_fs_tools::FsEffectProbe;
use toolrail_session_log::{EffectProbe, EventData, SessionStore, call_records, recover};

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
    if report.is_empty() {
        println!("{}: nothing to repair", file.path.display());
        return Ok(());
    }
    if report.torn_bytes_dropped > 0 {
        println!(
            "cut a torn last line ({} bytes): a write the crash interrupted",
            report.torn_bytes_dropped
        );
    }
    let records = call_records(&opened.events);
    for (call_id, code) in &report.repaired {
        let name = records
            .iter()
            .find(|record| record.call_id == *call_id)
            .map_or("?", |record| record.name.as_str());
        let why = match code.as_ref().map(|code| code.as_str()) {
            Some("TOOL_NOT_STARTED") => "it never started: safe to retry if still needed",
            Some("TOOL_OUTCOME_UNKNOWN") => "it started and may have acted: verify before retrying",
            Some(_) => "it started; the probe settled what happened",
            None => "it started, and the file probe found its change complete",
        };
        let code = code.as_ref().map_or("completed", |code| code.as_str());
        println!("{call_id} ({name}): {code} — {why}");
    }
    if let Some(turn) = report.closed_turn {
        println!("turn {} closed as interrupted", turn.0);
    }
    let repaired = opened
        .events
        .iter()
        .filter(|event| matches!(event.data, EventData::RecoveryRepaired(_)))
        .count();
    if repaired > 0 {
        println!("(the log holds {repaired} earlier repairs)");
    }
    Ok(())
}
