//! A session log named on the command line, and what every command prints about one: the
//! cards in log order, the summary line, the page.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use toolrail_presenters::{
    Card, Presenters, SessionItem, Summary, render_ansi, render_plain, session_items, session_page,
};
use toolrail_session_log::{Event, EventData, SessionId, call_records};
use toolrail_session_store::{Durability, JsonlStore};

use crate::bad_input;

/// `<dir>/<id>.jsonl`, as a store and an id.
pub(crate) struct SessionFile {
    pub store: JsonlStore,
    pub id: SessionId,
    pub path: PathBuf,
}

impl SessionFile {
    pub(crate) fn at(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(bad_input!(
                "{} does not exist; give the path of a session log or a session id (`toolrail sessions` lists them)",
                path.display()
            ));
        }
        if !path.is_file() {
            return Err(bad_input!(
                "{} is not a session log; give the path of a `<session>.jsonl` file",
                path.display()
            ));
        }
        let (Some(stem), Some("jsonl")) = (
            path.file_stem().and_then(|stem| stem.to_str()),
            path.extension().and_then(|extension| extension.to_str()),
        ) else {
            return Err(bad_input!(
                "{} is not named `<session>.jsonl`; session logs end in .jsonl",
                path.display()
            ));
        };
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(Self {
            store: JsonlStore::new(&dir, Durability::Strict)?,
            id: SessionId::new(stem),
            path: path.to_path_buf(),
        })
    }

    /// Every event, read without changing the file.
    pub(crate) fn events(&self) -> Result<Vec<Event>> {
        let read = self
            .store
            .read(&self.id)
            .map_err(|error| bad_input!("{error}"))?;
        if read.torn_bytes > 0 {
            eprintln!(
                "note: {} ends in a torn line ({} bytes) that was left out; `toolrail recover` repairs it",
                self.path.display(),
                read.torn_bytes
            );
        }
        Ok(read.events)
    }
}

/// The page title of a session: its id, as its `session/start` names it, so a run's page and
/// the page replayed from its log are the same page.
pub(crate) fn session_title(events: &[Event]) -> String {
    events
        .iter()
        .find_map(|event| {
            if let EventData::SessionStart(start) = &event.data {
                Some(format!("toolrail session {}", start.session_id.as_str()))
            } else {
                None
            }
        })
        .unwrap_or_else(|| "toolrail session".to_owned())
}

/// Writes the session page for `events` to `out`.
pub(crate) fn write_page(out: &Path, title: &str, events: &[Event]) -> Result<()> {
    let page = session_page(title, events, &Presenters::new());
    std::fs::write(out, page).with_context(|| format!("writing {}", out.display()))
}

/// The session as text, in log order: the conversation's lines and every call's card (the
/// cards are also returned, for `--json`).
pub(crate) fn replay_text(
    events: &[Event],
    presenters: &Presenters,
    colour: bool,
) -> (String, Vec<Card>) {
    let records = call_records(events);
    let mut out = String::new();
    let mut cards = Vec::new();
    for item in session_items(events, &records) {
        match item {
            SessionItem::User(text) => out.push_str(&format!("\nuser: {text}\n")),
            SessionItem::Assistant(text) => out.push_str(&format!("assistant: {text}\n")),
            SessionItem::Thinking(_) => {}
            SessionItem::Batch(calls) => {
                for record in calls {
                    let card = presenters.record_in(record, &records);
                    out.push_str(&render(&card, colour));
                    cards.push(card);
                }
            }
            SessionItem::Context { source, text } => {
                out.push_str(&format!("context from {source}: {text}\n"));
            }
            SessionItem::Recovery { note, calls } => {
                let plural = if calls == 1 { "" } else { "s" };
                out.push_str(&format!(
                    "(recovery: {note}; {calls} call{plural} repaired)\n"
                ));
            }
            SessionItem::TurnEnd { kind, message } => match message {
                Some(message) => out.push_str(&format!("(turn ended: {kind}: {message})\n")),
                None => out.push_str(&format!("(turn ended: {kind})\n")),
            },
        }
    }
    (out, cards)
}

/// A card as terminal text.
pub(crate) fn render(card: &Card, colour: bool) -> String {
    if colour {
        render_ansi(card)
    } else {
        render_plain(card)
    }
}

/// The summary of `events`.
pub(crate) fn summary_of(events: &[Event]) -> Summary {
    Summary::of(&call_records(events))
}

/// The events of `session`, named by the path of its log or by its id in `store` (default:
/// the current folder's sessions), read without changing anything.
pub(crate) fn events_of(session: &str, store: Option<&str>) -> Result<Vec<Event>> {
    Ok(crate::places::locate(session, store)?.events)
}
