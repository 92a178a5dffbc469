//! The live view of a running session: a card printed as each call commits (made from the
//! log, as a replay makes it, so both show the same card), and a progress line per running
//! call with its elapsed time — redrawn in place on a terminal, plain lines otherwise.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;
use toolrail_agent_loop::LiveEvent;
use toolrail_presenters::{Card, Presenters, duration};
use toolrail_session_log::{CallId, Event, EventData, SessionId, call_records};
use toolrail_session_store::JsonlStore;

use crate::session::render;

/// How the live view prints.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveStyle {
    /// Redraw progress lines in place (a terminal).
    pub terminal: bool,
    pub colour: bool,
    /// Print nothing (machine output); cards are still collected.
    pub quiet: bool,
}

/// Follows session `id` of `store` while `live` delivers the scheduler's events; returns
/// every card printed, in commit order, once the session's events stop.
pub(crate) async fn follow(
    mut live: UnboundedReceiver<LiveEvent>,
    store: JsonlStore,
    id: SessionId,
    style: LiveStyle,
) -> Vec<Card> {
    let log = store.path_of(&id).unwrap_or_default();
    let mut view = View {
        store,
        id,
        log,
        offset: 0,
        partial: Vec::new(),
        events: Vec::new(),
        running: Vec::new(),
        drawn: 0,
        cards: Vec::new(),
        committed: Vec::new(),
        printed: HashSet::new(),
        names: HashMap::new(),
        style,
        presenters: Presenters::new(),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            event = live.recv() => match event {
                Some(event) => view.on(event),
                None => break,
            },
            _ = tick.tick(), if style.terminal && !style.quiet => view.redraw(),
        }
    }
    // The session is over and its log synced: what a lax durability mode had not yet
    // written when its call was reported committed is there now, and so are results no
    // live event announced (a truncated message's calls).
    view.read_log();
    view.print_committed(Scope::WholeLog);
    view.committed = call_records(&view.events)
        .into_iter()
        .filter(|record| record.result.is_some() && !view.printed.contains(&record.call_id))
        .map(|record| record.call_id)
        .collect();
    view.print_committed(Scope::WholeLog);
    view.clear();
    view.cards
}

/// Which events a card is looked for in.
#[derive(Clone, Copy)]
enum Scope {
    LatestMessage,
    WholeLog,
}

struct View {
    store: JsonlStore,
    id: SessionId,
    log: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    events: Vec<Event>,
    /// Calls whose bodies run, with when they started.
    running: Vec<(CallId, Instant)>,
    /// Progress lines on screen (terminal only).
    drawn: usize,
    cards: Vec<Card>,
    /// Committed calls not printed yet (their result not yet read from the log), in
    /// commit order.
    committed: Vec<CallId>,
    printed: HashSet<CallId>,
    /// Tool names, from the prepared events.
    names: HashMap<CallId, String>,
    style: LiveStyle,
    presenters: Presenters,
}

impl View {
    fn on(&mut self, event: LiveEvent) {
        match event {
            LiveEvent::Prepared { call_id, name, .. } => {
                self.names.insert(call_id, name);
            }
            // The model's words are printed with its message once whole (for now).
            LiveEvent::Progress { .. } | LiveEvent::Model(_) => {}
            LiveEvent::Started { call_id } => {
                if !self.style.terminal && !self.style.quiet {
                    println!("  … {} {} started", call_id, self.name_of(&call_id));
                }
                self.running.push((call_id, Instant::now()));
                self.redraw();
            }
            LiveEvent::Finished { call_id } => {
                if let Some(at) = self.running.iter().position(|(id, _)| *id == call_id) {
                    let (_, started) = self.running.remove(at);
                    if !self.style.terminal && !self.style.quiet {
                        println!(
                            "  … {} {} finished after {}",
                            call_id,
                            self.name_of(&call_id),
                            duration(
                                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
                            )
                        );
                    }
                }
                self.redraw();
            }
            LiveEvent::Committed { call_id, .. } => {
                self.running.retain(|(id, _)| *id != call_id);
                self.committed.push(call_id);
                self.read_log();
                self.print_committed(Scope::LatestMessage);
            }
        }
    }

    /// Reads the lines appended to the log since the last read. A committed call's result
    /// is durable before it is reported, and the log is written in `seq` order, so every
    /// event up to it is there.
    fn read_log(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.log) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut fresh = Vec::new();
        let Ok(read) = file.read_to_end(&mut fresh) else {
            return;
        };
        self.offset += read as u64;
        self.partial.extend_from_slice(&fresh);
        while let Some(end) = self.partial.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            // A value kept beside the log for its size is put back, as a replay would.
            if let Ok(event) = self.store.decode_line(&self.id, &line) {
                self.events.push(event);
            }
        }
    }

    fn name_of(&self, call_id: &CallId) -> &str {
        self.names.get(call_id).map_or("", String::as_str)
    }

    /// Prints the cards of committed calls whose results the log holds, in commit order,
    /// stopping at the first that is not there yet.
    fn print_committed(&mut self, scope: Scope) {
        // A live commit belongs to the latest assistant message: its records are built from
        // the events since, not from the whole session again at every commit.
        let from = match scope {
            Scope::WholeLog => 0,
            Scope::LatestMessage => self
                .events
                .iter()
                .rposition(|event| matches!(event.data, EventData::AssistantMessage(_)))
                .unwrap_or(0),
        };
        let records = call_records(self.events.get(from..).unwrap_or_default());
        let mut done = 0;
        let mut ready = Vec::new();
        for call_id in &self.committed {
            let Some(record) = records
                .iter()
                .find(|record| record.call_id == *call_id && record.result.is_some())
            else {
                break;
            };
            done += 1;
            if self.printed.insert(call_id.clone()) {
                ready.push(self.presenters.record_in(record, &records));
            }
        }
        self.committed.drain(..done);
        for card in ready {
            if !self.style.quiet {
                self.clear();
                print!("{}", render(&card, self.style.colour));
            }
            self.cards.push(card);
        }
        self.redraw();
    }

    /// Erases the progress lines (terminal only).
    fn clear(&mut self) {
        if self.drawn > 0 {
            // Up one line and clear it, once per drawn line.
            print!("{}", "\u{1b}[1A\u{1b}[2K".repeat(self.drawn));
            self.drawn = 0;
        }
    }

    /// One line per running call with its elapsed time (terminal only).
    fn redraw(&mut self) {
        if !self.style.terminal || self.style.quiet {
            return;
        }
        self.clear();
        for (call_id, started) in &self.running {
            println!(
                "  ⟳ {} {} {}",
                call_id,
                self.name_of(call_id),
                duration(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
            );
        }
        self.drawn = self.running.len();
        let _ = std::io::stdout().flush();
    }
}
