//! Lines typed at the terminal: the chat's prompts (with a history kept in the sessions
//! folder) and the answers to questions, read by one line editor so they never compete for
//! the input. A read is blocking: it runs on a thread of its own, and a read whose answer
//! stopped being wanted (its question was withdrawn) is kept for the next one.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Config, Editor};
use tokio::task::JoinHandle;

/// What one read gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Text(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D, or the input is closed.
    Closed,
}

type LineEditor = Editor<(), FileHistory>;

pub struct Keyboard {
    editor: Arc<Mutex<Option<LineEditor>>>,
    history: Option<PathBuf>,
    /// A read under way whose line nobody took yet.
    pending: Option<JoinHandle<Line>>,
}

impl Keyboard {
    /// The terminal's keyboard; `history` is where the prompts typed are kept between
    /// sessions.
    pub fn open(history: Option<PathBuf>) -> Self {
        let config = Config::builder()
            .auto_add_history(false)
            .max_history_size(1000)
            .map(|builder| builder.build())
            .unwrap_or_default();
        let editor = LineEditor::with_config(config).ok().map(|mut editor| {
            if let Some(path) = &history {
                let _ = editor.load_history(path);
            }
            editor
        });
        Self {
            editor: Arc::new(Mutex::new(editor)),
            history,
            pending: None,
        }
    }

    /// Reads one line after showing `prompt`; the read already under way, if one is.
    pub fn read(&mut self, prompt: String) -> JoinHandle<Line> {
        if let Some(pending) = self.pending.take() {
            return pending;
        }
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

    /// Keeps a read whose line is no longer wanted for the next [`Keyboard::read`].
    pub fn keep(&mut self, read: JoinHandle<Line>) {
        self.pending = Some(read);
    }

    /// Adds a prompt to the history, and saves it.
    pub fn remember(&self, line: &str) {
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
