//! `toolrail replay SESSION [--store URL] [--html OUT]`: a session from its log alone — the conversation
//! and every call's card, as they were shown live — and optionally its page.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;
use toolrail_presenters::{Presenters, colour_wanted};

use crate::session::{events_of, replay_text, session_title, summary_of, write_page};

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The session: the path of its log (`<session>.jsonl`), or its id in a store.
    session: String,
    /// The store the session is in (`jsonl:DIR`, `sqlite:FILE`, `postgres://…`; default:
    /// the current folder's sessions).
    #[arg(long)]
    store: Option<String>,
    /// Write the session page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print the cards and summary as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: ReplayArgs) -> Result<()> {
    if let Some(out) = &args.html {
        crate::run::writable_target(out)?;
    }
    let events = events_of(&args.session, args.store.as_deref())?;
    let colour = colour_wanted(std::io::stdout().is_terminal());
    let (text, cards) = replay_text(&events, &Presenters::new(), colour);
    let summary = summary_of(&events);
    if let Some(out) = &args.html {
        write_page(out, &session_title(&events), &events)?;
    }
    if args.json {
        let mut report = crate::run::report(&events);
        report["cards"] = json!(cards);
        report["page"] = json!(args.html);
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
