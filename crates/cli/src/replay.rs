//! `toolrail replay SESSION [--html OUT]`: a session from its log alone — the conversation
//! and every call's card, as they were shown live — and optionally its page.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;
use toolrail_presenters::{Presenters, colour_wanted};

use crate::session::{SessionFile, replay_text, session_title, summary_of, write_page};

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The session log (`<session>.jsonl`).
    session: PathBuf,
    /// Write the session page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print the cards and summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ReplayArgs) -> Result<()> {
    if let Some(out) = &args.html {
        crate::run::writable_target(out)?;
    }
    let file = SessionFile::at(&args.session)?;
    let events = file.events()?;
    let colour = colour_wanted(std::io::stdout().is_terminal());
    let (text, cards) = replay_text(&events, &Presenters::new(), colour);
    let summary = summary_of(&events);
    if let Some(out) = &args.html {
        write_page(out, &session_title(&events), &events)?;
    }
    if args.json {
        let report = json!({"summary": summary, "cards": cards, "page": args.html});
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print!("{text}");
    println!("\n{}", summary.line());
    if let Some(out) = &args.html {
        println!("page: {}", out.display());
    }
    Ok(())
}
