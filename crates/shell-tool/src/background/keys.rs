//! Keys `shell_write` types by name, and the bytes a terminal sends for each.

use schemars::JsonSchema;
use serde::Deserialize;

/// A key typed into a shell's terminal after the call's `input`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Key {
    /// Return: ends a line.
    Enter,
    /// Tab: completion in most shells.
    Tab,
    /// Escape.
    Escape,
    /// Backspace: deletes the character before the cursor.
    Backspace,
    /// The arrow keys.
    Up,
    /// Down arrow.
    Down,
    /// Right arrow.
    Right,
    /// Left arrow.
    Left,
    /// Interrupt the foreground program (SIGINT through the terminal).
    CtrlC,
    /// End of input at the start of a line: ends a REPL or a shell.
    CtrlD,
    /// Suspend the foreground program.
    CtrlZ,
    /// Quit (SIGQUIT through the terminal).
    CtrlBackslash,
    /// Clear the line before the cursor.
    CtrlU,
    /// Clear the screen.
    CtrlL,
    /// Delete the word before the cursor.
    CtrlW,
    /// Cursor to the start of the line.
    CtrlA,
    /// Cursor to the end of the line.
    CtrlE,
    /// Search the history backwards.
    CtrlR,
}

impl Key {
    /// The bytes a terminal sends for the key.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            Self::Enter => b"\r",
            Self::Tab => b"\t",
            Self::Escape => b"\x1b",
            Self::Backspace => b"\x7f",
            Self::Up => b"\x1b[A",
            Self::Down => b"\x1b[B",
            Self::Right => b"\x1b[C",
            Self::Left => b"\x1b[D",
            Self::CtrlC => b"\x03",
            Self::CtrlD => b"\x04",
            Self::CtrlZ => b"\x1a",
            Self::CtrlBackslash => b"\x1c",
            Self::CtrlU => b"\x15",
            Self::CtrlL => b"\x0c",
            Self::CtrlW => b"\x17",
            Self::CtrlA => b"\x01",
            Self::CtrlE => b"\x05",
            Self::CtrlR => b"\x12",
        }
    }

    /// Whether a pipe can carry the key's meaning: only plain characters can; a control
    /// key means something only to a terminal.
    pub(crate) fn works_on_a_pipe(self) -> bool {
        matches!(self, Self::Enter | Self::Tab)
    }

    /// The bytes on a pipe (a line end is `\n` there).
    pub(crate) fn pipe_bytes(self) -> &'static [u8] {
        if self == Self::Enter {
            b"\n"
        } else {
            self.bytes()
        }
    }

    /// The key's name as the model writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Enter => "enter",
            Self::Tab => "tab",
            Self::Escape => "escape",
            Self::Backspace => "backspace",
            Self::Up => "up",
            Self::Down => "down",
            Self::Right => "right",
            Self::Left => "left",
            Self::CtrlC => "ctrl-c",
            Self::CtrlD => "ctrl-d",
            Self::CtrlZ => "ctrl-z",
            Self::CtrlBackslash => "ctrl-backslash",
            Self::CtrlU => "ctrl-u",
            Self::CtrlL => "ctrl-l",
            Self::CtrlW => "ctrl-w",
            Self::CtrlA => "ctrl-a",
            Self::CtrlE => "ctrl-e",
            Self::CtrlR => "ctrl-r",
        }
    }
}
