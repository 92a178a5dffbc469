//! The terminal while a session runs: one owner for everything written to it. The model's
//! words stream as they arrive; each call is a live line while it waits, asks or runs, and
//! its card once it commits (in model order); a question is shown whole with the live area
//! paused, and whatever happens meanwhile is held until it is answered. With `--json-stream`
//! the same events are JSON lines instead.

mod keyboard;
mod turn;

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use serde_json::{Value, json};
use toolrail_presenters::{Presenters, approval_note, duration, parse_arguments};
use toolrail_runtime::AgentEvent;
use toolrail_session_log::{CallId, event::ApprovalAnswer};

pub(crate) use keyboard::{Keyboard, Line, read_answer};
pub(crate) use turn::{Interrupts, TurnOutcome, drive, reply_to_question};

use crate::session::render;

/// How the console writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Text for a person: streamed words, live lines (redrawn in place on a terminal),
    /// cards.
    Human { terminal: bool, colour: bool },
    /// One JSON object a line, for programs (`--json-stream`).
    JsonLines,
    /// Nothing while running (`--json` prints one report at the end).
    Quiet,
}

/// Where a call stands, for its live line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Waiting,
    Running,
    Settling,
}

struct LiveCall {
    name: String,
    /// What the live line says the call does (`$ cargo test`), made once.
    title: String,
    stage: Stage,
    since: Instant,
    /// The newest progress the call reported as text (a background shell's last line).
    latest: Option<String>,
}

/// An approval a call went through: what was asked, and the answer once given.
struct Asked {
    reason: String,
    answer: Option<ApprovalAnswer>,
}

pub(crate) struct Console {
    mode: Mode,
    presenters: Presenters,
    calls: HashMap<CallId, LiveCall>,
    /// Approvals, by call (asked before the call is prepared: preparing includes asking).
    asked: HashMap<CallId, Asked>,
    /// Each call of the latest message as the model wrote it (a call refused at parse time
    /// is shown with these).
    written: HashMap<CallId, (String, Arc<Value>)>,
    /// Calls with a live line, in model order.
    order: Vec<CallId>,
    /// Live lines on the screen.
    drawn: usize,
    /// The cursor is after text on its line (streamed words without their newline).
    mid_line: bool,
    /// Whether this model request's words were streamed (a model that does not stream has
    /// its message printed whole).
    streamed: bool,
    paused: bool,
    /// What arrived while a question was shown, in order.
    held: Vec<Held>,
}

/// Output held while a question is on the screen.
enum Held {
    Event(AgentEvent),
    Note(String),
}

impl Console {
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            mode,
            presenters: Presenters::new(),
            calls: HashMap::new(),
            asked: HashMap::new(),
            written: HashMap::new(),
            order: Vec::new(),
            drawn: 0,
            mid_line: false,
            streamed: false,
            paused: false,
            held: Vec::new(),
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    fn terminal(&self) -> bool {
        matches!(self.mode, Mode::Human { terminal: true, .. })
    }

    /// Shows `event`, or holds it while a question is on the screen.
    pub(crate) fn on(&mut self, event: AgentEvent) {
        if self.paused {
            self.held.push(Held::Event(event));
            return;
        }
        self.show(event);
    }

    fn show(&mut self, event: AgentEvent) {
        if self.mode == Mode::JsonLines {
            self.track(&event);
            if let Some(line) = json_line(&event) {
                emit(&line);
            }
            return;
        }
        match event {
            AgentEvent::StepStarted { .. } => self.streamed = false,
            AgentEvent::TextDelta(text) => {
                self.streamed = true;
                self.words(&text);
            }
            AgentEvent::ReasoningDelta(_)
            | AgentEvent::ToolCallStreaming { .. }
            | AgentEvent::ToolCallDelta { .. } => {}
            AgentEvent::AnswerRestarted { why } => {
                self.line(&format!("(the answer starts again: {why})"));
            }
            AgentEvent::Message(message) => {
                self.written = message
                    .tool_calls()
                    .into_iter()
                    .map(|call| {
                        let arguments = Arc::new(parse_arguments(call.arguments_raw));
                        (call.call_id, (call.name.to_owned(), arguments))
                    })
                    .collect();
                let text = message.text();
                if !self.streamed && !text.trim().is_empty() {
                    self.words(&text);
                }
                self.end_line();
            }
            AgentEvent::Context { source, content } => {
                let text: Vec<&str> = content.iter().filter_map(|block| block.as_text()).collect();
                self.line(&format!("({source}: {})", text.join(" ")));
            }
            other @ (AgentEvent::CallPrepared { .. }
            | AgentEvent::ApprovalAsked { .. }
            | AgentEvent::ApprovalDecided { .. }
            | AgentEvent::CallStarted { .. }
            | AgentEvent::CallProgress { .. }
            | AgentEvent::CallFinished { .. }
            | AgentEvent::CallCommitted { .. }
            | AgentEvent::TurnEnded(_)) => self.track(&other),
        }
        self.redraw();
    }

    /// Follows a call's life; a commit prints its card.
    fn track(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::CallPrepared {
                call_id,
                name,
                arguments,
            } => {
                let title = self.presenters.call(name, arguments).title;
                self.calls.insert(
                    call_id.clone(),
                    LiveCall {
                        name: name.clone(),
                        title,
                        stage: Stage::Waiting,
                        since: Instant::now(),
                        latest: None,
                    },
                );
                // A call asked about before it was prepared has its line already.
                if !self.order.contains(call_id) {
                    self.order.push(call_id.clone());
                }
            }
            AgentEvent::ApprovalAsked {
                call_id,
                reason,
                session_key,
                ..
            } => {
                // Asked before it is prepared: when someone elsewhere answers (the approvals
                // endpoint), its line says what it waits for meanwhile.
                if !self.calls.contains_key(call_id) {
                    self.calls.insert(
                        call_id.clone(),
                        LiveCall {
                            name: String::new(),
                            title: session_key.clone().unwrap_or_default(),
                            stage: Stage::Waiting,
                            since: Instant::now(),
                            latest: None,
                        },
                    );
                    self.order.push(call_id.clone());
                }
                self.asked.insert(
                    call_id.clone(),
                    Asked {
                        reason: reason.clone(),
                        answer: None,
                    },
                );
            }
            AgentEvent::ApprovalDecided { call_id, answer } => {
                if let Some(asked) = self.asked.get_mut(call_id) {
                    asked.answer = Some(answer.clone());
                }
            }
            AgentEvent::CallStarted { call_id } => {
                if let Some(call) = self.calls.get_mut(call_id) {
                    call.stage = Stage::Running;
                    call.since = Instant::now();
                }
            }
            AgentEvent::CallFinished { call_id } => {
                if let Some(call) = self.calls.get_mut(call_id) {
                    call.stage = Stage::Settling;
                }
            }
            AgentEvent::CallProgress { call_id, data } => {
                if let (Some(call), Some(text)) = (
                    self.calls.get_mut(call_id),
                    data.get("text").and_then(|text| text.as_str()),
                ) {
                    call.latest = Some(text.to_owned());
                }
            }
            AgentEvent::CallCommitted {
                call_id,
                name,
                arguments,
                record,
            } => {
                let live = self.calls.remove(call_id);
                self.order.retain(|id| id != call_id);
                // A call refused before its arguments were judged (or one of a cut-off
                // message) is shown as the model wrote it.
                let written = self.written.get(call_id);
                let name = match (&live, written) {
                    _ if !name.is_empty() => name.clone(),
                    (Some(live), _) => live.name.clone(),
                    (None, Some((name, _))) => name.clone(),
                    (None, None) => String::new(),
                };
                let arguments = match written {
                    Some((_, raw)) if arguments.is_null() => Arc::clone(raw),
                    _ => Arc::clone(arguments),
                };
                let mut card = self.presenters.result(&name, &arguments, record);
                if let Some(asked) = self.asked.remove(call_id) {
                    card.notes
                        .insert(0, approval_note(&asked.reason, asked.answer.as_ref()));
                }
                if let Mode::Human { colour, .. } = self.mode {
                    self.clear();
                    self.end_line();
                    print!("{}", render(&card, colour));
                }
            }
            AgentEvent::StepStarted { .. }
            | AgentEvent::TextDelta(_)
            | AgentEvent::ReasoningDelta(_)
            | AgentEvent::ToolCallStreaming { .. }
            | AgentEvent::ToolCallDelta { .. }
            | AgentEvent::AnswerRestarted { .. }
            | AgentEvent::Message(_)
            | AgentEvent::Context { .. }
            | AgentEvent::TurnEnded(_) => {}
        }
    }

    /// The model's words, as they come (control characters but newlines and tabs shown
    /// as escapes: model text must not move the cursor).
    fn words(&mut self, text: &str) {
        if !matches!(self.mode, Mode::Human { .. }) || text.is_empty() {
            return;
        }
        self.clear();
        print!("{}", harmless(text));
        self.mid_line = !text.ends_with('\n');
        let _ = std::io::stdout().flush();
    }

    /// A whole line of its own (a note), between the words and the live lines; held while a
    /// question is shown.
    pub(crate) fn line(&mut self, text: &str) {
        if self.paused {
            self.held.push(Held::Note(text.to_owned()));
            return;
        }
        match self.mode {
            Mode::Human { .. } => {
                self.clear();
                self.end_line();
                println!("{}", harmless(text));
                self.redraw();
            }
            Mode::JsonLines => emit(&json!({"type": "note", "text": text})),
            Mode::Quiet => {}
        }
    }

    fn end_line(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }

    /// Part of a question (asked while the screen is paused): on the terminal; with JSON on
    /// stdout, on stderr, so stdout stays JSON.
    pub(crate) fn question(&mut self, text: &str) {
        if let Mode::Human { .. } = self.mode {
            print!("{text}");
            let _ = std::io::stdout().flush();
        } else {
            eprint!("{text}");
        }
    }

    /// Takes the screen for a question: the live lines go, and what happens until
    /// [`Console::resume`] is held.
    pub(crate) fn pause(&mut self) {
        self.clear();
        self.end_line();
        self.paused = true;
        let _ = std::io::stdout().flush();
    }

    /// Gives the screen back: what was held is shown, in order.
    pub(crate) fn resume(&mut self) {
        self.paused = false;
        self.release();
        self.redraw();
    }

    /// Shows what was held, in order.
    fn release(&mut self) {
        for held in std::mem::take(&mut self.held) {
            match held {
                Held::Event(event) => self.show(event),
                Held::Note(text) => self.line(&text),
            }
        }
    }

    /// The turn is over: no live line is left on the screen.
    pub(crate) fn settle(&mut self) {
        self.paused = false;
        self.release();
        self.clear();
        self.end_line();
        self.calls.clear();
        self.asked.clear();
        self.order.clear();
        let _ = std::io::stdout().flush();
    }

    /// Erases the live lines (terminal only).
    fn clear(&mut self) {
        if self.drawn > 0 {
            // Up one line and clear it, once per drawn line.
            print!("{}", "\u{1b}[1A\u{1b}[2K".repeat(self.drawn));
            self.drawn = 0;
        }
    }

    /// One line per call not yet committed (terminal only, and not while a question is
    /// shown).
    pub(crate) fn redraw(&mut self) {
        if !self.terminal() || self.paused {
            let _ = std::io::stdout().flush();
            return;
        }
        self.clear();
        if self.order.is_empty() {
            let _ = std::io::stdout().flush();
            return;
        }
        self.end_line();
        let width = terminal_width().saturating_sub(1).max(20);
        let colour = matches!(self.mode, Mode::Human { colour: true, .. });
        for call_id in &self.order {
            let Some(call) = self.calls.get(call_id) else {
                continue;
            };
            let title = &call.title;
            let (mark, state) = match call.stage {
                // Asked and not answered here: someone elsewhere (the approvals endpoint)
                // is being asked.
                Stage::Waiting => match self.asked.get(call_id) {
                    Some(Asked {
                        reason,
                        answer: None,
                    }) => ("?", format!("waiting for approval: {reason}")),
                    Some(_) | None => ("·", "waiting".to_owned()),
                },
                Stage::Running => (
                    "⟳",
                    duration(u64::try_from(call.since.elapsed().as_micros()).unwrap_or(u64::MAX)),
                ),
                Stage::Settling => ("…", "committing".to_owned()),
            };
            // Model text on one row: every control character escaped, newlines too.
            let latest = call
                .latest
                .as_deref()
                .map_or_else(String::new, |text| format!(" · {text}"));
            let line = fit(
                &one_row(&format!("  {mark} {call_id} {title} · {state}{latest}")),
                width,
            );
            if colour {
                println!("\u{1b}[2m{line}\u{1b}[0m");
            } else {
                println!("{line}");
            }
        }
        self.drawn = self.order.len();
        let _ = std::io::stdout().flush();
    }
}

/// `text` cut to `width` columns of the terminal (a live line that wrapped could not be
/// erased).
fn fit(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_owned();
    }
    let mut cut = String::new();
    let mut used = 0;
    for c in text.chars() {
        let columns = c.width().unwrap_or(0);
        if used + columns + 1 > width {
            break;
        }
        used += columns;
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// `text` with every control character shown as an escape, so it stays on one row.
fn one_row(text: &str) -> String {
    toolrail_presenters::escape_controls(text, toolrail_presenters::Newlines::Escape)
}

/// The terminal's width in columns (80 when it cannot be told).
fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|columns| *columns > 0)
        .unwrap_or(80)
}

/// Control characters other than newline and tab, shown as escapes.
fn harmless(text: &str) -> String {
    toolrail_presenters::escape_controls(text, toolrail_presenters::Newlines::Keep)
}

/// One JSON line on stdout. A reader that went away (`| head`) does not stop the session:
/// its calls still end honestly in the log, the lines go nowhere.
pub(crate) fn emit(line: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// An event as one JSON line (`--json-stream`; docs/cli.md lists the shapes).
fn json_line(event: &AgentEvent) -> Option<Value> {
    Some(match event {
        AgentEvent::StepStarted { step } => json!({"type": "step", "step": step}),
        AgentEvent::TextDelta(text) => json!({"type": "text", "text": text}),
        AgentEvent::ReasoningDelta(text) => json!({"type": "reasoning", "text": text}),
        AgentEvent::ToolCallStreaming { .. } | AgentEvent::ToolCallDelta { .. } => return None,
        AgentEvent::AnswerRestarted { why } => json!({"type": "answer_restarted", "why": why}),
        AgentEvent::Message(message) => json!({"type": "message", "text": message.text(),
            "tool_calls": message.tool_calls().iter().map(|call| json!({
                "call_id": call.call_id.as_str(), "name": call.name,
            })).collect::<Vec<_>>()}),
        AgentEvent::CallPrepared {
            call_id,
            name,
            arguments,
        } => json!({"type": "call_prepared", "call_id": call_id.as_str(), "name": name,
            "arguments": arguments.as_ref()}),
        AgentEvent::ApprovalAsked {
            call_id,
            reason,
            arguments,
            session_key,
        } => json!({"type": "approval_asked", "call_id": call_id.as_str(), "reason": reason,
            "arguments": arguments, "session_key": session_key}),
        AgentEvent::ApprovalDecided { call_id, answer } => json!({"type": "approval_decided",
            "call_id": call_id.as_str(), "answer": answer}),
        AgentEvent::CallStarted { call_id } => {
            json!({"type": "call_started", "call_id": call_id.as_str()})
        }
        AgentEvent::CallProgress { call_id, data } => {
            json!({"type": "call_progress", "call_id": call_id.as_str(), "data": data})
        }
        AgentEvent::CallFinished { call_id } => {
            json!({"type": "call_finished", "call_id": call_id.as_str()})
        }
        AgentEvent::CallCommitted {
            call_id,
            name,
            arguments,
            record,
        } => json!({"type": "call_committed", "call_id": call_id.as_str(), "name": name,
            "arguments": arguments.as_ref(), "is_error": record.is_error(),
            "error": record.error.as_ref().map(|error| json!({
                "code": error.code.to_string(), "message": error.message,
            })),
            "text": record.text(), "value": record.value}),
        AgentEvent::Context { source, content } => json!({"type": "context", "source": source,
            "text": content.iter().filter_map(|block| block.as_text()).collect::<Vec<_>>().join("\n")}),
        AgentEvent::TurnEnded(answer) => json!({"type": "turn_ended", "end": answer.end,
            "text": answer.text, "usage": answer.usage}),
    })
}
