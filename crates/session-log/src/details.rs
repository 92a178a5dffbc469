//! What a result says about itself to a UI (DESIGN §8): one typed value per card shape, made
//! by the tool and read by the presenters, persisted in the log and never sent to the model.
//!
//! The stored shape is the one tools wrote as JSON before these types existed (an object whose
//! `type` names the shape), so logs written then read back the same. Details of a kind this
//! crate does not know, or of a known kind in a shape it cannot read, are kept whole as
//! [`Custom`]: nothing in a log is lost by reading it.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::event::TodoItem;
use crate::result::is_zero;

/// A result's details, in one of the shapes a card is drawn from, or a tool's own. Each
/// shape is boxed, so details cost a result no more room than a JSON value did; make them
/// with `Details::from(shape)` or `.into()`.
///
/// ```
/// use toolrail_session_log::details::{self, Details};
///
/// let shown = Details::from(details::Read {
///     path: "src/lib.rs".into(),
///     start_line: Some(1),
///     end_line: Some(40),
///     total_lines: 120,
///     truncated: true,
/// });
/// let stored = serde_json::to_value(&shown)?;
/// assert_eq!(stored["type"], "read");
/// assert_eq!(serde_json::from_value::<Details>(stored)?, shown);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Details {
    /// A command and how it ended (`bash`).
    Terminal(Box<Terminal>),
    /// Files changed, each with its unified diff (`edit`, `write`).
    Diff(Box<Diff>),
    /// What a search found (`grep`, `glob`).
    Search(Box<Search>),
    /// Which lines of a file were read (`read`).
    Read(Box<Read>),
    /// The whole task list after the call (`todo_write`).
    Todo(Box<Todo>),
    /// Questions and their answers (`ask_user`).
    Question(Box<Question>),
    /// A program and the calls it made (`run_code`).
    CodeRun(Box<CodeRun>),
    /// A page that was fetched.
    Web(Box<Web>),
    /// A tool's own details, or details this version cannot read as their kind: kept whole.
    Custom(Custom),
}

impl Details {
    /// The shape's name as stored in `type`: `"terminal"`, `"diff"`, …, or a custom kind
    /// (`None` for custom details that name none).
    pub fn kind(&self) -> Option<&str> {
        Some(match self {
            Self::Terminal(_) => "terminal",
            Self::Diff(_) => "diff",
            Self::Search(_) => "search",
            Self::Read(_) => "read",
            Self::Todo(_) => "todo",
            Self::Question(_) => "question",
            Self::CodeRun(_) => "code-run",
            Self::Web(_) => "web",
            Self::Custom(custom) => return custom.kind(),
        })
    }

    /// Details read from their stored JSON: a known shape when `type` names one and the
    /// rest fits it, otherwise [`Details::Custom`] holding the value as it was.
    pub fn from_value(value: Value) -> Self {
        match Known::deserialize(&value) {
            Ok(known) => known.into(),
            Err(_) => Self::Custom(Custom { value }),
        }
    }
}

/// `bash`'s details.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Terminal {
    /// The command line as the model sent it.
    pub command: String,
    /// What the model said the command is for.
    pub description: Option<String>,
    /// The exit code, when the process exited.
    pub exit_code: Option<i64>,
    /// The signal that ended it, when one did.
    pub signal: Option<i64>,
    /// The call's time limit ended it.
    #[serde(default)]
    pub timed_out: bool,
    /// The output's end, as the model read it (markers included).
    pub output_tail: Option<String>,
    /// Some output was left out of what the model read.
    #[serde(default)]
    pub truncated: bool,
    /// What the sandbox refused the command, as its own error lines said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_refused: Option<SandboxRefusals>,
    /// The background shell the call started or touched (`bash` with `background`,
    /// `shell_output`, `shell_write`, `shell_kill`): its id, state and output cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellFacts>,
}

/// A background shell as one call left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellFacts {
    /// The shell's id (`sh1`).
    pub id: String,
    /// Where it stood when the call ended.
    pub state: ShellState,
    /// Whether it runs on a pseudo-terminal.
    #[serde(default)]
    pub tty: bool,
    /// The output cursor after the call: bytes of output the shell had written that the
    /// call read up to.
    pub cursor: u64,
}

/// Where a background shell stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellState {
    /// Its command still runs.
    Running,
    /// It ended by itself.
    Exited,
    /// `shell_kill` stopped it.
    Killed,
    /// It ran past the lifetime limit and was stopped.
    LifetimeEnded,
    /// It ended with the runtime that ran it.
    EndedWithRuntime,
    /// Its sandbox could not be made: the command never ran.
    NeverRan,
}

impl ShellState {
    /// The name as stored and shown (`ended_with_runtime`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Killed => "killed",
            Self::LifetimeEnded => "lifetime_ended",
            Self::EndedWithRuntime => "ended_with_runtime",
            Self::NeverRan => "never_ran",
        }
    }
}

/// The operations a sandbox refused a command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRefusals {
    /// The sandbox's mode (`read-only`, `workspace-write`, …).
    pub mode: String,
    /// The command's error lines that show a refusal, in order.
    pub lines: Vec<String>,
}

/// `edit`'s and `write`'s details.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    /// Every file changed, in the order the change touched them.
    pub files: Vec<FileDiff>,
}

/// One file's change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// The path as the tool shows it (relative to the workspace).
    pub path: String,
    /// The unified diff.
    pub diff: String,
    /// Lines added.
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
}

/// `grep`'s and `glob`'s details.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Search {
    /// What was searched for.
    pub pattern: String,
    /// The files shown, each with what was shown of it.
    pub files: Vec<SearchHits>,
    /// Files found but not shown.
    #[serde(default)]
    pub omitted_files: u64,
    /// Matches found but not shown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_matches: u64,
}

/// One file a search shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchHits {
    /// The file.
    pub path: String,
    /// How many matches it holds, when counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The lines shown: matches and their context.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<SearchLine>,
}

/// One line a search shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchLine {
    /// The line's number, from 1.
    pub line: u64,
    /// Its text.
    pub text: String,
    /// It matched (otherwise it is context).
    #[serde(default, rename = "match")]
    pub is_match: bool,
}

/// `read`'s details.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The file as the tool shows it.
    pub path: String,
    /// The first line read, from 1 (`None` when nothing was).
    pub start_line: Option<u64>,
    /// The last line read.
    pub end_line: Option<u64>,
    /// The file's lines.
    #[serde(default)]
    pub total_lines: u64,
    /// Some of the file was left to read.
    #[serde(default)]
    pub truncated: bool,
}

/// `todo_write`'s details.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Todo {
    /// The whole list, in order.
    pub items: Vec<TodoItem>,
}

/// `ask_user`'s details.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// What was asked, in order.
    pub questions: Vec<AskedQuestion>,
    /// The answers by question id.
    #[serde(default)]
    pub answers: BTreeMap<String, QuestionAnswer>,
}

/// One question as it was asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskedQuestion {
    /// Its id within the call.
    pub id: String,
    /// The question.
    pub question: String,
    /// The options offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// What became of one question.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuestionAnswer {
    /// `answered`, `cancelled` or `expired`.
    pub state: String,
    /// The answer, when there is one.
    pub answer: Option<Value>,
}

/// `run_code`'s details.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CodeRun {
    /// `javascript` or `python`.
    pub language: String,
    /// The program (empty in logs whose details left it to the call's `code`).
    #[serde(default)]
    pub program: String,
    /// The tool calls the program made, in submission order.
    #[serde(default)]
    pub sub_calls: Vec<SubCall>,
    /// What it printed.
    pub logs: Option<String>,
    /// What it returned (`null` for nothing).
    #[serde(default)]
    pub result: Value,
}

/// One call a program made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubCall {
    /// Its call id (`<program's call>:code:<n>`).
    pub call_id: String,
    /// The tool it called.
    pub tool: String,
    /// Its error code, when it failed.
    pub error: Option<String>,
}

/// A fetched page's details.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Web {
    /// The address fetched.
    pub url: String,
    /// The HTTP status.
    pub status: Option<u64>,
    /// The page's title.
    pub title: Option<String>,
    /// The start of its text.
    pub excerpt: Option<String>,
}

/// A tool's own details: any JSON, stored as given. An object's `type` names its kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Custom {
    value: Value,
}

impl Custom {
    /// Details of the tool's own `kind`: `fields` with `type` set to it.
    ///
    /// ```
    /// use toolrail_session_log::details::{Custom, Details};
    ///
    /// let mut fields = serde_json::Map::new();
    /// fields.insert("rows".into(), 3.into());
    /// let details = Details::Custom(Custom::new("table", fields));
    /// assert_eq!(details.kind(), Some("table"));
    /// assert_eq!(serde_json::to_string(&details)?, r#"{"rows":3,"type":"table"}"#);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn new(kind: &str, mut fields: Map<String, Value>) -> Self {
        fields.insert("type".to_owned(), Value::String(kind.to_owned()));
        Self {
            value: Value::Object(fields),
        }
    }

    /// The kind its `type` names, if it is an object that names one.
    pub fn kind(&self) -> Option<&str> {
        self.value.get("type").and_then(Value::as_str)
    }

    /// The details as stored.
    pub fn value(&self) -> &Value {
        &self.value
    }
}

/// The known shapes as stored: an object tagged by `type`.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum Known {
    Terminal(Terminal),
    Diff(Diff),
    Search(Search),
    Read(Read),
    Todo(Todo),
    Question(Question),
    CodeRun(CodeRun),
    Web(Web),
}

/// Borrowed form of [`Known`], so writing details copies nothing.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum KnownRef<'a> {
    Terminal(&'a Terminal),
    Diff(&'a Diff),
    Search(&'a Search),
    Read(&'a Read),
    Todo(&'a Todo),
    Question(&'a Question),
    CodeRun(&'a CodeRun),
    Web(&'a Web),
}

impl From<Known> for Details {
    fn from(known: Known) -> Self {
        match known {
            Known::Terminal(details) => Self::Terminal(Box::new(details)),
            Known::Diff(details) => Self::Diff(Box::new(details)),
            Known::Search(details) => Self::Search(Box::new(details)),
            Known::Read(details) => Self::Read(Box::new(details)),
            Known::Todo(details) => Self::Todo(Box::new(details)),
            Known::Question(details) => Self::Question(Box::new(details)),
            Known::CodeRun(details) => Self::CodeRun(Box::new(details)),
            Known::Web(details) => Self::Web(Box::new(details)),
        }
    }
}

impl Serialize for Details {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let known = match self {
            Self::Terminal(details) => KnownRef::Terminal(details),
            Self::Diff(details) => KnownRef::Diff(details),
            Self::Search(details) => KnownRef::Search(details),
            Self::Read(details) => KnownRef::Read(details),
            Self::Todo(details) => KnownRef::Todo(details),
            Self::Question(details) => KnownRef::Question(details),
            Self::CodeRun(details) => KnownRef::CodeRun(details),
            Self::Web(details) => KnownRef::Web(details),
            Self::Custom(custom) => return custom.value.serialize(serializer),
        };
        known.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::from_value)
    }
}

macro_rules! details_from {
    ($($shape:ident),*) => {$(
        impl From<$shape> for Details {
            fn from(details: $shape) -> Self {
                Self::$shape(Box::new(details))
            }
        }
    )*};
}

details_from!(Terminal, Diff, Search, Read, Todo, Question, CodeRun, Web);

impl From<Custom> for Details {
    fn from(custom: Custom) -> Self {
        Self::Custom(custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_known_kind_in_a_shape_it_cannot_read_is_kept_whole() {
        let stored = json!({"type": "terminal", "exit_code": 1});
        let read = Details::from_value(stored.clone());
        assert_eq!(
            read,
            Details::Custom(Custom {
                value: stored.clone()
            })
        );
        assert_eq!(read.kind(), Some("terminal"));
        assert_eq!(serde_json::to_value(&read).ok(), Some(stored));
    }

    #[test]
    fn details_that_are_not_an_object_are_kept_and_name_no_kind() {
        let read = Details::from_value(json!(["a", 1]));
        assert_eq!(read.kind(), None);
        assert_eq!(serde_json::to_value(&read).ok(), Some(json!(["a", 1])));
    }

    #[test]
    fn every_known_shape_round_trips_under_its_own_kind() {
        let shapes = [
            Details::from(Terminal {
                command: "ls".into(),
                ..Terminal::default()
            }),
            Details::from(Diff::default()),
            Details::from(Search::default()),
            Details::from(Read::default()),
            Details::from(Todo::default()),
            Details::from(Question::default()),
            Details::from(CodeRun::default()),
            Details::from(Web::default()),
        ];
        for shape in shapes {
            let stored = serde_json::to_value(&shape).unwrap_or_default();
            assert_eq!(stored["type"].as_str(), shape.kind());
            assert_eq!(Details::from_value(stored), shape);
        }
    }
}
