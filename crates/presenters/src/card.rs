//! What a UI shows for one call: a card with a kind, a one-line title, a status and a body
//! in one of the documented shapes. Cards are plain data, made by pure functions of the
//! recorded call, so a live card and a replayed one are equal.

use serde::{Deserialize, Serialize};
use toolrail_session_log::details::Details;

/// The card shapes (DESIGN §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CardKind {
    Generic,
    Terminal,
    Diff,
    Search,
    Read,
    Web,
    Todo,
    Question,
    CodeRun,
}

impl CardKind {
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
            "bash" => Self::Terminal,
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
    pub kind: CardKind,
    /// The tool's name.
    pub tool: String,
    /// One line saying what the call does: `$ cargo test`, `edit src/lib.rs`.
    pub title: String,
    pub status: CardStatus,
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
    Succeeded,
    Failed {
        code: String,
        message: String,
        /// The runtime wrote the result (the call produced none of its own).
        synthetic: bool,
    },
}

/// The body, in the shape of its kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum CardBody {
    Generic {
        /// The arguments, pretty JSON (or the raw text when it is not JSON).
        arguments: String,
        /// What the model read, if there is a result.
        output: Option<String>,
    },
    Terminal {
        command: String,
        description: Option<String>,
        exit_code: Option<i64>,
        signal: Option<i64>,
        timed_out: bool,
        /// The output's end, as shown to the model (markers included).
        output: Option<String>,
        truncated: bool,
    },
    Diff {
        files: Vec<DiffFile>,
    },
    Search {
        pattern: String,
        files: Vec<SearchFile>,
        omitted_files: u64,
        omitted_matches: u64,
    },
    Read {
        path: String,
        start_line: Option<u64>,
        end_line: Option<u64>,
        total_lines: Option<u64>,
        truncated: bool,
    },
    Web {
        url: String,
        status: Option<u64>,
        title: Option<String>,
        excerpt: Option<String>,
    },
    Todo {
        items: Vec<TodoItem>,
    },
    Question {
        questions: Vec<QuestionItem>,
    },
    CodeRun {
        language: String,
        program: String,
        sub_calls: Vec<SubCall>,
        logs: Option<String>,
        result: Option<String>,
    },
}

impl CardBody {
    /// A read window in words: `lines 1–20 of 57 (more to read)`.
    pub(crate) fn window_words(
        start_line: Option<u64>,
        end_line: Option<u64>,
        total_lines: Option<u64>,
        truncated: bool,
    ) -> String {
        let window = match (start_line, end_line, total_lines) {
            (Some(start), Some(end), Some(total)) => format!("lines {start}–{end} of {total}"),
            (Some(start), Some(end), None) => format!("lines {start}–{end}"),
            (_, _, Some(total)) => format!("{total} lines"),
            _ => "whole file".to_owned(),
        };
        let cut = if truncated { " (more to read)" } else { "" };
        format!("{window}{cut}")
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffFile {
    pub path: String,
    pub added: u64,
    pub removed: u64,
    pub lines: Vec<DiffLine>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffLine {
    pub kind: DiffLineKind,
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffLineKind {
    /// `@@ -a,b +c,d @@`
    Hunk,
    Context,
    Added,
    Removed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchFile {
    pub path: String,
    /// Matches in the file, when counted.
    pub count: Option<u64>,
    pub lines: Vec<SearchLine>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchLine {
    pub line: u64,
    pub text: String,
    pub is_match: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionItem {
    pub id: String,
    pub question: String,
    pub options: Vec<String>,
    /// `answered`, `cancelled`, `expired`; `None` while pending.
    pub state: Option<String>,
    pub answer: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubCall {
    pub call_id: String,
    pub tool: String,
    /// The error code, if the sub-call failed.
    pub error: Option<String>,
}
