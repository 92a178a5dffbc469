//! What a UI shows for one call: a card with a kind, a one-line title, a status and a body
//! in one of the documented shapes. Cards are plain data, made by pure functions of the
//! recorded call, so a live card and a replayed one are equal.

use serde::{Deserialize, Serialize};
use toolrail_session_log::details::{Details, ShellState};

/// The card shapes (DESIGN §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CardKind {
    /// Any call: its arguments as JSON and the text the model read. What a call gets when
    /// its data fit no other shape.
    Generic,
    /// A shell command and how it ended (`bash`), or a background shell as a call left it
    /// (`bash` with `background`, `shell_output`, `shell_write`, `shell_kill`).
    Terminal,
    /// Files changed, each as a diff (`edit`, `write`).
    Diff,
    /// What a search found (`grep`, `glob`).
    Search,
    /// Which lines of a file were read (`read`).
    Read,
    /// A fetched page; no shipped tool's name maps to it, only details of its shape.
    Web,
    /// The task list (`todo_write`).
    Todo,
    /// Questions to the user and their answers (`ask_user`).
    Question,
    /// A program and the tool calls it made (`run_code`).
    CodeRun,
}

impl CardKind {
    /// The kind as serialized: `generic`, `terminal`, …, `code-run`. The HTML card's class
    /// is `kind-` followed by it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Terminal => "terminal",
            Self::Diff => "diff",
            Self::Search => "search",
            Self::Read => "read",
            Self::Web => "web",
            Self::Todo => "todo",
            Self::Question => "question",
            Self::CodeRun => "code-run",
        }
    }

    /// The card a shipped tool's calls get by the tool's name, for what has no details to
    /// say it (a pending call, a failure before the body ran). A result's details name
    /// their own kind ([`CardKind::of_details`]), whoever's tool wrote them.
    pub fn for_tool(name: &str) -> Self {
        match name {
            // A call on a background shell is its terminal, seen again; `shell_list` lists
            // shells and keeps the generic card.
            "bash" | "shell_output" | "shell_write" | "shell_kill" => Self::Terminal,
            "edit" | "write" => Self::Diff,
            "grep" | "glob" => Self::Search,
            "read" => Self::Read,
            "todo_write" => Self::Todo,
            "ask_user" => Self::Question,
            "run_code" => Self::CodeRun,
            _ => Self::Generic,
        }
    }

    /// The card a result's details are drawn as: any tool's, the shipped ones' and a
    /// stranger's alike. `None` for a tool's own details ([`Details::Custom`]): they get the
    /// tool's card, or the generic one.
    pub fn of_details(details: &Details) -> Option<Self> {
        Some(match details {
            Details::Terminal(_) => Self::Terminal,
            Details::Diff(_) => Self::Diff,
            Details::Search(_) => Self::Search,
            Details::Read(_) => Self::Read,
            Details::Todo(_) => Self::Todo,
            Details::Question(_) => Self::Question,
            Details::CodeRun(_) => Self::CodeRun,
            Details::Web(_) => Self::Web,
            Details::Custom(_) => return None,
        })
    }
}

/// One call, as shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Card {
    /// The shape of `body`: a call whose data fit no shape is [`CardKind::Generic`],
    /// whatever its tool.
    pub kind: CardKind,
    /// The tool's name.
    pub tool: String,
    /// One line saying what the call does: `$ cargo test`, `edit src/lib.rs`.
    pub title: String,
    /// Whether a result came and how it ended: the mark (`·`, `✓`, `✗`) before the title.
    pub status: CardStatus,
    /// What the call did, or before its result what it asks, in the shape `kind` names.
    pub body: CardBody,
    /// Confirmed changes to the world, one line each.
    pub effects: Vec<String>,
    /// What policy did on the way, one line each: the approval asked and its answer, an
    /// argument rewrite.
    pub notes: Vec<String>,
    /// The cards of the calls this call made, in submission order: a program's binding
    /// calls, each shown as its tool shows it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Card>,
}

/// Where the call stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CardStatus {
    /// Asked for, no result yet.
    Pending,
    /// The result carries no error.
    Succeeded,
    /// The result carries an error.
    Failed {
        /// The error code as on the wire: `POLICY_DENIED`, `TOOL_OUTCOME_UNKNOWN`.
        code: String,
        /// The error's whole message, often several lines (a violation list, a hint).
        message: String,
        /// The runtime wrote the result (the call produced none of its own).
        synthetic: bool,
    },
}

/// The body, in the shape of its kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum CardBody {
    /// Any call as data, for what fits no other shape.
    Generic {
        /// The arguments, pretty JSON (or the raw text when it is not JSON).
        arguments: String,
        /// What the model read, if there is a result.
        output: Option<String>,
    },
    /// A shell command (`bash`), or a background shell as one call left it. Before the
    /// result only `command` and `description` are known (for a call on a shell, its id and
    /// what the call asks).
    Terminal {
        /// The command line as the model sent it, perhaps several lines (the title shows the
        /// first); empty for a call on a shell before its result says the shell's command.
        command: String,
        /// What the model said the command is for.
        description: Option<String>,
        /// The process's exit code; `None` before the result and when the process did not
        /// exit (a signal ended it, or it never started).
        exit_code: Option<i64>,
        /// The number of the signal that ended the process, when one did.
        signal: Option<i64>,
        /// The call's time limit ended the command.
        timed_out: bool,
        /// The output's end, as shown to the model (markers included).
        output: Option<String>,
        /// Some output was left out of what the model read.
        truncated: bool,
        /// The background shell the call started or touched; `None` for a foreground
        /// command.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shell: Option<TerminalShell>,
    },
    /// Files changed (`edit`, `write`). Before the result, and for a result without
    /// details, the change the call proposes: a `write`'s content added, or for each edit an
    /// `@@ replace @@` hunk with the old text removed and the new text added.
    Diff {
        /// Each file, in the order the change touched them.
        files: Vec<DiffFile>,
    },
    /// What a search found (`grep`, `glob`).
    Search {
        /// The regex or glob searched for, as the call gave it.
        pattern: String,
        /// The files shown; empty before the result.
        files: Vec<SearchFile>,
        /// Files found but left out of `files`.
        omitted_files: u64,
        /// Matches found but left out of `files`.
        omitted_matches: u64,
    },
    /// Which lines of a file were read (`read`), shown as `lines 1–20 of 57 (more to read)`.
    Read {
        /// The file as the tool shows it (relative to the workspace).
        path: String,
        /// The first line read, from 1; before the result, the call's `offset`.
        start_line: Option<u64>,
        /// The last line read; before the result, `offset + limit - 1` when the call gave
        /// both.
        end_line: Option<u64>,
        /// The file's length in lines; `None` until the result says it.
        total_lines: Option<u64>,
        /// Some of the file was left to read.
        truncated: bool,
    },
    /// A fetched page. Before the result only `url` is known.
    Web {
        /// The address fetched.
        url: String,
        /// The HTTP status (`200`, `404`).
        status: Option<u64>,
        /// The page's title, when it has one.
        title: Option<String>,
        /// The start of the page's text.
        excerpt: Option<String>,
    },
    /// The task list (`todo_write`).
    Todo {
        /// The whole list after the call, in order.
        items: Vec<TodoItem>,
    },
    /// Questions to the user and what became of them (`ask_user`).
    Question {
        /// Each question, in the order asked.
        questions: Vec<QuestionItem>,
    },
    /// A program and the tool calls it made (`run_code`).
    CodeRun {
        /// `javascript` or `python`; `javascript` when the call named none.
        language: String,
        /// The program's source.
        program: String,
        /// The tool calls the program made, in submission order. A card from
        /// [`Presenters::record_in`](crate::Presenters::record_in) keeps only those that no
        /// child card shows with an outcome.
        sub_calls: Vec<SubCall>,
        /// What the program printed; `None` before the result.
        logs: Option<String>,
        /// What the program returned, a string as itself and anything else as JSON; `None`
        /// before the result and when it returned `null`.
        result: Option<String>,
    },
}

impl CardBody {
    /// A read card's window in words: `lines 1–20 of 57 (more to read)`; empty for other
    /// kinds.
    pub(crate) fn window_words(&self) -> String {
        let Self::Read {
            start_line,
            end_line,
            total_lines,
            truncated,
            ..
        } = self
        else {
            return String::new();
        };
        let window = match (start_line, end_line, total_lines) {
            (Some(start), Some(end), Some(total)) => format!("lines {start}–{end} of {total}"),
            (Some(start), Some(end), None) => format!("lines {start}–{end}"),
            (_, _, Some(total)) => format!("{total} lines"),
            _ => "whole file".to_owned(),
        };
        let cut = if *truncated { " (more to read)" } else { "" };
        format!("{window}{cut}")
    }

    /// A terminal card's facts in the order they are shown under the output: how the
    /// process ended, what was cut, then the shell's pseudo-terminal and cursor. Empty for
    /// other kinds and before the result.
    pub(crate) fn terminal_facts(&self) -> Vec<TerminalFact> {
        let Self::Terminal {
            exit_code,
            signal,
            timed_out,
            truncated,
            shell,
            ..
        } = self
        else {
            return Vec::new();
        };
        let ended = match (exit_code, signal) {
            (Some(code), _) => Some(TerminalFact::Exit(*code)),
            (None, Some(signal)) => Some(TerminalFact::Signal(*signal)),
            (None, None) => None,
        };
        let timed_out = timed_out.then_some(TerminalFact::TimedOut);
        let cut = truncated.then_some(TerminalFact::OutputCut);
        let shell = shell.as_ref();
        let tty = shell.filter(|shell| shell.tty).map(|_| TerminalFact::Tty);
        let cursor = shell
            .and_then(|shell| shell.cursor)
            .map(TerminalFact::Cursor);
        [ended, timed_out, cut, tty, cursor]
            .into_iter()
            .flatten()
            .collect()
    }

    /// The background shell a terminal card shows; `None` for a foreground command and for
    /// other kinds.
    pub(crate) fn shell(&self) -> Option<&TerminalShell> {
        let Self::Terminal { shell, .. } = self else {
            return None;
        };
        shell.as_ref()
    }

    /// Where the call left its background shell, the fact a terminal card's header states
    /// after its title; `None` for a foreground command and before the result.
    pub(crate) fn shell_state(&self) -> Option<TerminalFact> {
        self.shell()?.state.map(TerminalFact::ShellState)
    }
}

/// A background shell as a terminal card shows it: cards that share `id` show one shell
/// over time, each as the call it belongs to left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalShell {
    /// The shell's id (`sh1`), which the title names.
    pub id: String,
    /// Where the call left the shell; `None` before the result.
    pub state: Option<ShellState>,
    /// The shell runs on a pseudo-terminal; `false` too before the result says so.
    pub tty: bool,
    /// The output cursor after the call: bytes of the shell's output read up to; `None`
    /// before the result.
    pub cursor: Option<u64>,
}

/// One fact a terminal card states: under the output, or (a shell's state) in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TerminalFact {
    /// The process exited with this code.
    Exit(i64),
    /// This signal ended the process.
    Signal(i64),
    /// The call's time limit ended the command.
    TimedOut,
    /// Some output was left out of what the model read; all of it was saved.
    OutputCut,
    /// The background shell runs on a pseudo-terminal.
    Tty,
    /// The background shell's output was read up to this byte.
    Cursor(u64),
    /// Where the call left its background shell.
    ShellState(ShellState),
}

/// How a [`TerminalFact`] reads, for its colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FactTone {
    /// The command succeeded.
    Good,
    /// The command failed, or was stopped.
    Bad,
    /// Worth knowing, neither good nor bad.
    Note,
    /// A plain fact about how the command runs, shown quietly.
    Quiet,
}

impl TerminalFact {
    /// The fact in words: `exit 1`, `signal 9`, `timed out`, `read to byte 812`,
    /// `ended with the runtime`.
    pub(crate) fn words(self) -> String {
        match self {
            Self::Exit(code) => format!("exit {code}"),
            Self::Signal(signal) => format!("signal {signal}"),
            Self::TimedOut => "timed out".to_owned(),
            Self::OutputCut => "output cut, full output saved".to_owned(),
            Self::Tty => "tty".to_owned(),
            Self::Cursor(cursor) => format!("read to byte {cursor}"),
            Self::ShellState(state) => crate::shell::state_words(state).to_owned(),
        }
    }

    /// How the fact reads: good news, bad news, a note, or a quiet fact. A shell that
    /// exited by itself is quiet: its exit code says whether that is good.
    pub(crate) fn tone(self) -> FactTone {
        match self {
            Self::Exit(0) => FactTone::Good,
            Self::Exit(_) | Self::Signal(_) | Self::TimedOut => FactTone::Bad,
            Self::OutputCut => FactTone::Note,
            Self::Tty | Self::Cursor(_) => FactTone::Quiet,
            Self::ShellState(state) => match state {
                ShellState::Running => FactTone::Note,
                ShellState::Exited => FactTone::Quiet,
                ShellState::Killed
                | ShellState::LifetimeEnded
                | ShellState::EndedWithRuntime
                | ShellState::NeverRan => FactTone::Bad,
            },
        }
    }
}

/// One file of a diff card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffFile {
    /// The file as the tool shows it (relative to the workspace).
    pub path: String,
    /// Lines added, as the tool counted them (shown `+3`).
    pub added: u64,
    /// Lines removed, as the tool counted them (shown `−1`).
    pub removed: u64,
    /// The diff's lines in order, without the `---`/`+++` file headers.
    pub lines: Vec<DiffLine>,
}

/// One line of a diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffLine {
    /// What the line is; renderers mark and colour it by this.
    pub kind: DiffLineKind,
    /// The line without its leading `+`, `-` or space; a hunk header whole.
    pub text: String,
}

/// What a diff line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffLineKind {
    /// `@@ -a,b +c,d @@`
    Hunk,
    /// Unchanged, shown around a change.
    Context,
    /// In the new text only.
    Added,
    /// In the old text only.
    Removed,
}

/// One file a search card shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchFile {
    /// The file as the tool shows it.
    pub path: String,
    /// Matches in the file, when counted.
    pub count: Option<u64>,
    /// The lines shown: matches and their context, as the tool gave them. Empty for a
    /// `glob` hit and for `grep` in its `files` or `count` output.
    pub lines: Vec<SearchLine>,
}

/// One line a search card shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchLine {
    /// The line's number in the file, from 1.
    pub line: u64,
    /// The line's text.
    pub text: String,
    /// The line matched; otherwise it is context around a match.
    pub is_match: bool,
}

/// One entry of a task list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// The task, as the model wrote it.
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// One question to the user and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionItem {
    /// The question's id within the call; the answers are keyed by it.
    pub id: String,
    /// The question as the user sees it.
    pub question: String,
    /// The options offered; empty when none were.
    pub options: Vec<String>,
    /// `answered`, `cancelled`, `expired`; `None` while pending.
    pub state: Option<String>,
    /// The answer, a string as itself and anything else as JSON; `None` until answered, and
    /// for a question cancelled or expired.
    pub answer: Option<String>,
}

/// One tool call a program made, as its `run_code` details list it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubCall {
    /// Its call id (`<program's call>:code:<n>`).
    pub call_id: String,
    /// The tool it called.
    pub tool: String,
    /// The error code, if the sub-call failed.
    pub error: Option<String>,
}
