//! `toolrail sessions [--store URL]`: the sessions of a store (default: the current
//! folder's `.toolrail/sessions`), newest first for a folder: each with how it stands (its
//! last turn's end, or open) and its first prompt; in PostgreSQL, by id, with where it is in
//! the work queue (queued sessions without events too), why it failed or waits again, and
//! who holds its lease.

use anyhow::Result;
use toolrail_runtime::{Store, StoreUrl};
use toolrail_session_log::{EventData, SessionId, event::TurnEndKind};
use toolrail_session_store::{ScannedSession, StoreError};

use crate::bad_input;
use crate::places::open_store;

#[derive(clap::Args)]
pub(crate) struct SessionsArgs {
    /// The store: `jsonl:DIR`, `postgres://user@host:port/database` (default: the current
    /// folder's sessions).
    #[arg(long)]
    store: Option<String>,
}

pub(crate) fn run(args: SessionsArgs) -> Result<()> {
    let store = open_store(args.store.as_deref())?;
    list(&store)
}

/// Prints the sessions of `store`.
pub(crate) fn list(store: &Store) -> Result<()> {
    match StoreUrl::parse(store.url()).map_err(|error| bad_input!("{error}"))? {
        StoreUrl::Jsonl(folder) => {
            let mut logs: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(&folder)
                .map_err(|error| bad_input!("{}: {error}", folder.display()))?
                .filter_map(Result::ok)
                .filter_map(|entry| {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let id = name.strip_suffix(".jsonl")?.to_owned();
                    let modified = entry.metadata().ok()?.modified().ok()?;
                    Some((modified, id))
                })
                .collect();
            logs.sort();
            logs.reverse();
            if logs.is_empty() {
                println!("no sessions in {}", folder.display());
                return Ok(());
            }
            println!(
                "{:<24} {:>6} {:<20} first prompt",
                "session", "turns", "state"
            );
            let Some(files) = store.jsonl_store() else {
                return Err(bad_input!("{}: not a JSONL store", store.url()));
            };
            for (_, id) in logs {
                // Scanned, not read whole: two payloads of each session are decoded.
                match files
                    .scan(&SessionId::new(&id))
                    .and_then(|scanned| described(&scanned))
                {
                    Ok((turns, state, prompt)) => {
                        println!("{id:<24} {turns:>6} {state:<20} {prompt}");
                    }
                    // Said, not hidden: a log that cannot be read is worth a look.
                    Err(error) => println!("{id:<24} {:>6} unreadable: {error}", "?"),
                }
            }
            println!(
                "(in {}; `toolrail resume SESSION` goes on with one)",
                folder.display()
            );
        }
        StoreUrl::Postgres(_) => {
            let Some(postgres) = store.postgres() else {
                return Err(bad_input!("{}: not a PostgreSQL store", store.url()));
            };
            let sessions = postgres.sessions()?;
            if sessions.is_empty() {
                println!("no sessions in the store");
                return Ok(());
            }
            println!(
                "{:<28} {:>7} {:<18} {:<18} {:<8} {:<30} reason",
                "session", "events", "log", "last event", "queue", "lease"
            );
            for session in sessions {
                // How the log stands, and apart from it how the queue does: a session may be
                // queued with no event yet, or hold events from a run outside the queue.
                let log = match (&session.ended, session.events) {
                    (Some(kind), _) => format!("ended: {kind}"),
                    (None, 0) => "(no events)".to_owned(),
                    (None, _) => "open".to_owned(),
                };
                let lease = match (&session.owner, session.leased) {
                    (Some(owner), true) => format!("held by {owner}"),
                    (Some(owner), false) => format!("expired ({owner})"),
                    (None, _) => "none".to_owned(),
                };
                let line = format!(
                    "{:<28} {:>7} {:<18} {:<18} {:<8} {:<30} {}",
                    session.session,
                    session.events,
                    log,
                    session.last_kind,
                    session.queue.as_deref().unwrap_or("-"),
                    lease,
                    session.reason.as_deref().unwrap_or_default()
                );
                println!("{}", line.trim_end());
            }
            println!(
                "(queue: waiting, running, done, failed, or - when a run outside the queue wrote it; `toolrail enqueue --retry` queues a failed session again)"
            );
        }
        StoreUrl::Sqlite(path) => {
            return Err(bad_input!(
                "listing the sessions of a SQLite store ({}) is not built yet; name a session by its id",
                path.display()
            ));
        }
    }
    Ok(())
}

/// How many turns a session had, how it stands, and its first prompt (cut to a line): read
/// from the envelopes, decoding only the first `turn/start` and the last turn's end.
fn described(scanned: &ScannedSession) -> Result<(usize, String, String), StoreError> {
    let is_turn = |kind: &str| kind == "turn/start";
    let turns = scanned
        .envelopes()
        .filter(|envelope| is_turn(envelope.kind()))
        .count();
    let prompt = match scanned
        .envelopes()
        .position(|envelope| is_turn(envelope.kind()))
    {
        Some(first) => {
            if let EventData::TurnStart(turn) = scanned.event(first)?.data {
                turn.user
                    .iter()
                    .filter_map(|block| block.as_text())
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                String::new()
            }
        }
        None => String::new(),
    };
    // The last turn's start or end says how the session stands.
    let last = scanned
        .envelopes()
        .rposition(|envelope| matches!(envelope.kind(), "turn/start" | "turn/end"));
    let state = match last {
        None if scanned.is_empty() => "empty".to_owned(),
        None => "no turn yet".to_owned(),
        Some(index) => {
            if let EventData::TurnEnd(end) = scanned.event(index)?.data {
                if end.kind == TurnEndKind::Completed {
                    "completed".to_owned()
                } else {
                    serde_json::to_value(end.kind)
                        .ok()
                        .and_then(|kind| kind.as_str().map(|kind| format!("ended: {kind}")))
                        .unwrap_or_default()
                }
            } else {
                "open (interrupted?)".to_owned()
            }
        }
    };
    let line: String = prompt
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(60)
        .collect();
    Ok((turns, state, line))
}
