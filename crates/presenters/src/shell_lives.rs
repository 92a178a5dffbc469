//! Each background shell's life across a session: how it started, every call whose result
//! reported it, and how it ended. A pure walk over the events (`shell/started`, the terminal
//! details of `tool/result`, `shell/exited`), so the page shows the same lives live and on
//! replay; the session page's "background shells" section is made from it.

use std::collections::HashMap;

use serde::Serialize;
use toolrail_session_log::details::{Details, ShellState};
use toolrail_session_log::event::ShellEnd;
use toolrail_session_log::{Event, EventData};

use crate::card::TerminalFact;
use crate::shell::state_words;

/// One background shell, as the log tells its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellLife {
    /// The shell's id (`sh1`).
    pub id: String,
    /// Its command line: as `shell/started` gave it, or, when the log holds no start, as the
    /// first result that reported the shell named it (empty when none did).
    pub command: String,
    /// How it started; `None` when the log holds no `shell/started` for it.
    pub started: Option<ShellStart>,
    /// Each call whose result reported the shell, in log order: the call that started it
    /// first, when its result says how it left the shell.
    pub touches: Vec<ShellTouch>,
    /// How it ended; `None` when the log holds no `shell/exited` for it: it was running
    /// when the log ends.
    pub ended: Option<ShellEnding>,
}

/// A call, as a shell's life names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellCall {
    /// The call's id.
    pub call_id: String,
    /// The tool it called, as its `tool/call` named it; `None` when the log has no
    /// `tool/call` for the id.
    pub tool: Option<String>,
}

/// Data of a shell's `shell/started`, and the call that recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellStart {
    /// The call that started the shell (`bash` with `background`); `None` when the event
    /// names none.
    pub by: Option<ShellCall>,
    /// The sandbox mode it runs in (`workspace-write`).
    pub mode: String,
    /// It runs on a pseudo-terminal.
    pub tty: bool,
    /// The PID namespace its processes live in, when known.
    pub pid_namespace: Option<String>,
    /// The file its whole output is written to.
    pub output: String,
}

/// A call whose result reported the shell, and how it left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellTouch {
    /// The call.
    pub call: ShellCall,
    /// Where the shell stood when the call ended.
    pub state: ShellState,
    /// The output cursor after the call: bytes of output read up to.
    pub cursor: u64,
    /// The error code of the call's result, when it failed.
    pub error: Option<String>,
}

/// Data of a shell's `shell/exited`, and the call that recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellEnding {
    /// The call that first saw the end; `None` when the runtime recorded it (on resume, for
    /// a shell that ended with the runtime that ran it).
    pub by: Option<ShellCall>,
    /// How it ended.
    pub end: ShellEnd,
    /// Its exit code, when it exited.
    pub exit_code: Option<i64>,
    /// The signal that ended it, when one did.
    pub signal: Option<i64>,
    /// Bytes it wrote in all.
    pub output_bytes: u64,
}

/// The background shells of `events`, in the order the log first names them. A second
/// `shell/started` under an id already started begins a new life (a resumed session may
/// number its shells afresh); results and ends go to the latest life under their id.
pub fn shell_lives(events: &[Event]) -> Vec<ShellLife> {
    // Call id → tool, as the latest `tool/call` under the id named it: a result or a shell
    // event comes after its call's `tool/call`.
    let mut tools: HashMap<String, String> = HashMap::new();
    let mut lives: Vec<ShellLife> = Vec::new();
    for event in events {
        let call_id = event.call_id.as_ref().map(|id| id.as_str());
        let call = |id: &str| ShellCall {
            call_id: id.to_owned(),
            tool: tools.get(id).cloned(),
        };
        if let EventData::ToolCall(called) = &event.data {
            if let Some(id) = call_id {
                tools.insert(id.to_owned(), called.name.clone());
            }
        } else if let EventData::ShellStarted(started) = &event.data {
            let start = ShellStart {
                by: call_id.map(call),
                mode: started.mode.clone(),
                tty: started.tty,
                pid_namespace: started.pid_namespace.clone(),
                output: started.output.clone(),
            };
            match lives.iter_mut().rev().find(|life| life.id == started.id) {
                // A life the log named before any start (a result came first) takes this
                // start; a start under an id already started or ended begins a new life.
                Some(life) if life.started.is_none() && life.ended.is_none() => {
                    life.started = Some(start);
                    life.command.clone_from(&started.command);
                }
                Some(_) | None => lives.push(ShellLife {
                    id: started.id.clone(),
                    command: started.command.clone(),
                    started: Some(start),
                    touches: Vec::new(),
                    ended: None,
                }),
            }
        } else if let EventData::ToolResult(result) = &event.data {
            let Some(Details::Terminal(terminal)) = &result.details else {
                continue;
            };
            let (Some(facts), Some(id)) = (&terminal.shell, call_id) else {
                continue;
            };
            let touch = ShellTouch {
                call: call(id),
                state: facts.state,
                cursor: facts.cursor,
                error: result.error_code().map(|code| code.as_str().to_owned()),
            };
            let life = latest(&mut lives, &facts.id);
            if life.command.is_empty() {
                life.command.clone_from(&terminal.command);
            }
            life.touches.push(touch);
        } else if let EventData::ShellExited(exited) = &event.data {
            let ending = ShellEnding {
                by: call_id.map(call),
                end: exited.end,
                exit_code: exited.exit_code,
                signal: exited.signal,
                output_bytes: exited.output_bytes,
            };
            // The first call to see the end records it; should the log hold a second end,
            // the first one stands.
            latest(&mut lives, &exited.id).ended.get_or_insert(ending);
        }
    }
    lives
}

/// The latest life under `id`, made when the log names the shell before any start.
fn latest<'a>(lives: &'a mut Vec<ShellLife>, id: &str) -> &'a mut ShellLife {
    let at = match lives.iter().rposition(|life| life.id == id) {
        Some(at) => at,
        None => {
            lives.push(ShellLife {
                id: id.to_owned(),
                command: String::new(),
                started: None,
                touches: Vec::new(),
                ended: None,
            });
            lives.len() - 1
        }
    };
    &mut lives[at]
}

impl ShellCall {
    /// `c1 bash`, or the id alone when the tool is not known.
    pub fn words(&self) -> String {
        match &self.tool {
            Some(tool) => format!("{} {tool}", self.call_id),
            None => self.call_id.clone(),
        }
    }
}

impl ShellLife {
    /// The command's first line (`…` when it has more), or that the log does not say it.
    pub fn command_words(&self) -> String {
        let mut lines = self.command.lines();
        match (lines.next(), lines.next()) {
            (None, _) => "(command not in the log)".to_owned(),
            (Some(first), None) => first.to_owned(),
            (Some(first), Some(_)) => format!("{first} …"),
        }
    }

    /// Where the shell stands at the end of the log: how it ended when the log holds its
    /// end, else as the last call that touched it saw it, else running.
    pub fn fate(&self) -> ShellState {
        match (&self.ended, self.touches.last()) {
            (Some(ending), _) => state_of(ending.end),
            (None, Some(last)) => last.state,
            (None, None) => ShellState::Running,
        }
    }

    /// [`ShellLife::fate`] as the heading says it: `killed`, `running at the end of the
    /// log`, or `exited (no shell/exited in the log)` when only a call's result says so.
    pub fn fate_words(&self) -> String {
        match (&self.ended, self.fate()) {
            (Some(_), fate) => state_words(fate).to_owned(),
            (None, ShellState::Running) => "running at the end of the log".to_owned(),
            (None, fate) => format!("{} (no shell/exited in the log)", state_words(fate)),
        }
    }

    /// How it started: `started by c1 bash · workspace-write · tty · pid:[4026532001] ·
    /// output in /tmp/sh1.out`; `None` when the log holds no start.
    pub fn start_words(&self) -> Option<String> {
        let start = self.started.as_ref()?;
        let mut parts = vec![match &start.by {
            Some(by) => format!("started by {}", by.words()),
            None => "started".to_owned(),
        }];
        parts.push(start.mode.clone());
        if start.tty {
            parts.push(TerminalFact::Tty.words());
        }
        if let Some(namespace) = &start.pid_namespace {
            parts.push(namespace.clone());
        }
        parts.push(format!("output in {}", start.output));
        Some(parts.join(" · "))
    }

    /// How it ended: `exited · exit 0 · 4096 bytes of output · seen by c4 shell_output`;
    /// without an end, that the log holds none, and the state the last call saw when that
    /// was not `running`.
    pub fn end_words(&self) -> String {
        let Some(ending) = &self.ended else {
            return match self.touches.last() {
                Some(last) if last.state != ShellState::Running => format!(
                    "no shell/exited in the log; {} last saw it {}",
                    last.call.words(),
                    state_words(last.state)
                ),
                Some(_) | None => "no shell/exited in the log: still running".to_owned(),
            };
        };
        let mut parts = vec![state_words(state_of(ending.end)).to_owned()];
        let ended = match (ending.exit_code, ending.signal) {
            (Some(code), _) => Some(TerminalFact::Exit(code)),
            (None, Some(signal)) => Some(TerminalFact::Signal(signal)),
            (None, None) => None,
        };
        parts.extend(ended.map(TerminalFact::words));
        parts.push(format!("{} bytes of output", ending.output_bytes));
        parts.push(match &ending.by {
            Some(by) => format!("seen by {}", by.words()),
            None => "recorded by the runtime".to_owned(),
        });
        parts.join(" · ")
    }

    /// The life as plain lines: the heading (`sh1 · npm run dev · running at the end of the
    /// log`), the start, each call that touched it, the end. The page shows the same words.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{} · {} · {}",
            self.id,
            self.command_words(),
            self.fate_words()
        )];
        lines.extend(self.start_words());
        lines.extend(self.touches.iter().map(ShellTouch::words));
        lines.push(self.end_words());
        lines
    }
}

impl ShellTouch {
    /// `c2 shell_output → running · read to byte 1024`, and the error code when the call
    /// failed.
    pub fn words(&self) -> String {
        let mut words = format!(
            "{} → {} · {}",
            self.call.words(),
            state_words(self.state),
            TerminalFact::Cursor(self.cursor).words()
        );
        if let Some(code) = &self.error {
            words.push_str(&format!(" · {code}"));
        }
        words
    }
}

/// The state a shell's end leaves it in.
fn state_of(end: ShellEnd) -> ShellState {
    match end {
        ShellEnd::Exited => ShellState::Exited,
        ShellEnd::Killed => ShellState::Killed,
        ShellEnd::LifetimeEnded => ShellState::LifetimeEnded,
        ShellEnd::EndedWithRuntime => ShellState::EndedWithRuntime,
        ShellEnd::NeverRan => ShellState::NeverRan,
    }
}
