//! Lines typed at the terminal. The chat's prompts are read by a line editor (editing, and a
//! history kept in the state folder), only between turns. An answer to a question is read
//! in the terminal's own line mode by a reader that gives up as soon as its question is
//! withdrawn, so no line meant for one question can ever answer another, and no read
//! outlives its question.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use rustix::event::{PollFd, PollFlags};
use rustix::termios::{LocalModes, OptionalActions};
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Config, Editor};
use tokio::task::JoinHandle;

/// What one read gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Text(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D, or the input is closed.
    Closed,
}

type LineEditor = Editor<(), FileHistory>;

pub(crate) struct Keyboard {
    editor: Arc<Mutex<Option<LineEditor>>>,
    history: Option<PathBuf>,
}

impl Keyboard {
    /// The terminal's keyboard; `history` is where the prompts typed are kept between
    /// sessions.
    pub(crate) fn open(history: Option<PathBuf>) -> Self {
        let config = Config::builder()
            .auto_add_history(false)
            .max_history_size(1000)
            .map(|builder| builder.build())
            .unwrap_or_default();
        let editor = match LineEditor::with_config(config) {
            Ok(mut editor) => {
                if let Some(path) = &history {
                    let _ = editor.load_history(path);
                }
                Some(editor)
            }
            Err(error) => {
                eprintln!(
                    "toolrail: the line editor could not start ({error}); nothing can be read"
                );
                None
            }
        };
        Self {
            editor: Arc::new(Mutex::new(editor)),
            history,
        }
    }

    /// Reads one prompt after showing `prompt` (between turns only: nothing else reads the
    /// terminal then).
    pub(crate) fn read(&mut self, prompt: String) -> JoinHandle<Line> {
        // What was typed while a turn ran is not a prompt.
        discard_typed_ahead();
        let editor = Arc::clone(&self.editor);
        tokio::task::spawn_blocking(move || {
            let mut editor = editor.lock();
            let Some(editor) = editor.as_mut() else {
                return Line::Closed;
            };
            match editor.readline(&prompt) {
                Ok(line) => Line::Text(line),
                Err(ReadlineError::Interrupted) => Line::Interrupted,
                Err(_) => Line::Closed,
            }
        })
    }

    /// Adds a prompt to the history, and saves it.
    pub(crate) fn remember(&self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if let Some(editor) = self.editor.lock().as_mut() {
            let _ = editor.add_history_entry(line);
            if let Some(path) = &self.history {
                let _ = editor.save_history(path);
            }
        }
    }
}

/// Drops what was typed and not read yet (keys pressed while a turn ran).
pub(super) fn discard_typed_ahead() {
    let _ = rustix::termios::tcflush(std::io::stdin(), rustix::termios::QueueSelector::IFlush);
}

/// How often an answer reader looks whether its question was withdrawn.
const WATCH: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};

/// Reads one answer from the terminal in its line mode (it echoes and edits what is typed;
/// Ctrl-C is the interrupt the turn catches), giving up once `withdrawn` is set. What was
/// typed before the question was shown is dropped first.
pub(crate) fn read_answer(withdrawn: Arc<AtomicBool>) -> JoinHandle<Line> {
    discard_typed_ahead();
    tokio::task::spawn_blocking(move || {
        let stdin = std::io::stdin();
        let before = rustix::termios::tcgetattr(&stdin).ok();
        if let Some(before) = &before {
            let mut cooked = before.clone();
            cooked
                .local_modes
                .insert(LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG);
            let _ = rustix::termios::tcsetattr(&stdin, OptionalActions::Now, &cooked);
        }
        let line = loop {
            if withdrawn.load(Ordering::Acquire) {
                break Line::Closed;
            }
            let mut ready = [PollFd::new(&stdin, PollFlags::IN)];
            match rustix::event::poll(&mut ready, Some(&WATCH)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break Line::Closed,
                Ok(_) => {}
            }
            // In line mode a read gives at most the one line typed.
            let mut bytes = [0u8; 4096];
            match rustix::io::read(&stdin, &mut bytes) {
                Ok(0) => break Line::Closed,
                Ok(read) => {
                    let text = String::from_utf8_lossy(bytes.get(..read).unwrap_or_default());
                    break Line::Text(text.trim_end_matches(['\n', '\r']).to_owned());
                }
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
                Err(_) => break Line::Closed,
            }
        };
        if let Some(before) = &before {
            let _ = rustix::termios::tcsetattr(&stdin, OptionalActions::Now, before);
        }
        line
    })
}
