//! `toolrail sessions --store postgres://…`: the sessions a PostgreSQL store holds, each with
//! its events, how it stands (its last turn's end, or open) and who holds its lease.

use anyhow::Result;
use toolrail_session_log::{Durability, PostgresStore};

use crate::bad_input;

#[derive(clap::Args)]
pub struct SessionsArgs {
    /// The store: `postgres://user@host:port/database`.
    #[arg(long)]
    store: String,
}

pub fn run(args: SessionsArgs) -> Result<()> {
    if !args.store.starts_with("postgres://") && !args.store.starts_with("postgresql://") {
        return Err(bad_input!(
            "--store: give a postgres:// URL (JSONL sessions are files: use `toolrail replay`)"
        ));
    }
    let store = PostgresStore::connect(&args.store, Durability::Strict)
        .map_err(|error| bad_input!("{error}"))?;
    let sessions = store.sessions()?;
    println!(
        "{:<28} {:>7} {:<14} {:<18} lease",
        "session", "events", "state", "last event"
    );
    for session in sessions {
        let state = session
            .ended
            .map_or_else(|| "open".to_owned(), |kind| format!("ended: {kind}"));
        let lease = match (&session.owner, session.leased) {
            (Some(owner), true) => format!("held by {owner}"),
            (Some(owner), false) => format!("expired ({owner})"),
            (None, _) => "none".to_owned(),
        };
        println!(
            "{:<28} {:>7} {:<14} {:<18} {lease}",
            session.session, session.events, state, session.last_kind
        );
    }
    Ok(())
}
