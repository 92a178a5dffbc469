//! What every runtime shares: the limits of a run, how a run ends, and the capped output
//! a program prints into.

use std::time::Duration;

use serde_json::Value;

/// What bounds a run.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The JavaScript engine's heap (a Python program's address space is set by its
    /// runtime, which needs room for the interpreter itself).
    pub memory_bytes: usize,
    /// The JavaScript engine's stack; a program that recurses past it fails as
    /// [`FailureKind::Memory`].
    pub stack_bytes: usize,
    /// How long a program may run, waiting for its binding calls included.
    pub wall: Duration,
    /// Bytes of one binding's reply the program may receive.
    pub binding_bytes: usize,
    /// Bytes of one binding call's arguments (as JSON) the program may send.
    pub argument_bytes: usize,
    /// Bytes of printed output kept, and of the returned value allowed.
    pub output_bytes: usize,
    /// Binding calls running at once.
    pub max_parallel: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            stack_bytes: 1 << 20,
            wall: Duration::from_secs(30),
            binding_bytes: 256 << 10,
            argument_bytes: 1 << 20,
            output_bytes: 64 << 10,
            max_parallel: 8,
        }
    }
}

/// Why a program failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The program is not valid in its language.
    Syntax,
    /// It threw (raised) and did not catch.
    Exception,
    /// It ran past its wall time (or, in Python, its CPU time).
    Timeout,
    /// It ran out of memory (or stack).
    Memory,
    /// The call was cancelled.
    Cancelled,
    /// It returned more than the output cap.
    Output,
    /// The runtime could not be set up, or broke down.
    Runtime,
}

impl FailureKind {
    /// The kind as a failed run's text names it: `CODE_RUN_FAILED (timeout): …`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syntax => "syntax",
            Self::Exception => "exception",
            Self::Timeout => "timeout",
            Self::Memory => "memory",
            Self::Cancelled => "cancelled",
            Self::Output => "output",
            Self::Runtime => "runtime",
        }
    }
}

/// What a run produced.
#[derive(Debug)]
pub(crate) struct RunOutcome {
    /// The program's return value (`null` for none).
    pub value: Option<Value>,
    /// What it printed, within the output cap.
    pub output: String,
    pub failure: Option<(FailureKind, String)>,
}

impl RunOutcome {
    pub(crate) fn failed(kind: FailureKind, message: String, output: String) -> Self {
        Self {
            value: None,
            output,
            failure: Some((kind, message)),
        }
    }
}

/// What a program printed, kept up to a cap; past it, one marker and nothing more.
#[derive(Debug, Default)]
pub(crate) struct Output {
    text: String,
    cap: usize,
}

const CUT: &str = "[output cut: over the cap]\n";

impl Output {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
        }
    }

    pub(crate) fn push(&mut self, printed: &str) {
        if self.text.ends_with(CUT) {
            return;
        }
        let room = self.cap.saturating_sub(self.text.len());
        if printed.len() <= room {
            self.text.push_str(printed);
            return;
        }
        let mut end = room;
        while !printed.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(printed.get(..end).unwrap_or_default());
        if !self.text.ends_with('\n') {
            self.text.push('\n');
        }
        self.text.push_str(CUT);
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::Output;

    #[test]
    fn output_stops_at_its_cap_with_one_marker() {
        let mut output = Output::new(8);
        output.push("héllo\n");
        output.push("wörld\n");
        output.push("more\n");
        assert_eq!(output.text(), "héllo\nw\n[output cut: over the cap]\n");
    }
}
