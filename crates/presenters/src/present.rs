//! Cards from recorded data: `present_call` from a call's arguments, `present_result` from
//! its arguments and result. Both are pure. A result's `details` in its kind's documented
//! shape make the body; details of another shape, or a call whose arguments do not fit the
//! kind, fall back to the generic card — never a panic.

use serde_json::Value;
use toolrail_session_log::details::{self, Details};
use toolrail_session_log::{Effect, ToolResultRecord};

use crate::card::{
    Card, CardBody, CardKind, CardStatus, DiffFile, DiffLine, DiffLineKind, QuestionItem,
    SearchFile, SearchLine, SubCall, TodoItem,
};
use crate::shell;

/// The card for a call that has no result yet.
pub fn present_call(kind: CardKind, tool: &str, args: &Value) -> Card {
    let body = call_body(kind, tool, args).unwrap_or_else(|| generic(args, None));
    Card {
        kind: body_kind(&body),
        tool: tool.to_owned(),
        title: title(tool, &body),
        status: CardStatus::Pending,
        body,
        effects: Vec::new(),
        notes: Vec::new(),
        children: Vec::new(),
    }
}

/// The card for a call and its result.
pub fn present_result(kind: CardKind, tool: &str, args: &Value, result: &ToolResultRecord) -> Card {
    let output = result.text();
    let body = match &result.details {
        // The details say what they are; the tool's name only guesses.
        Some(details) => result_body(tool, args, details, &output),
        // Tools that leave details out (todo, questions, write) are shown from their
        // arguments and value; a failure before the body ran, from the call.
        None => fallback_body(kind, tool, args, result).or_else(|| call_body(kind, tool, args)),
    }
    .unwrap_or_else(|| generic(args, Some(output.clone())));
    let status = match &result.error {
        Some(error) => CardStatus::Failed {
            code: error.code.to_string(),
            message: error.message.clone(),
            synthetic: result.synthetic,
        },
        None => CardStatus::Succeeded,
    };
    Card {
        kind: body_kind(&body),
        tool: tool.to_owned(),
        title: title(tool, &body),
        status,
        body,
        effects: result.effects.iter().map(effect_line).collect(),
        notes: sandbox_refusals(result).collect(),
        children: Vec::new(),
    }
}

/// What the sandbox refused the call, one note a line, as its tool reported it (`bash`
/// puts the refusals its command met in its terminal details).
pub fn sandbox_refusals(result: &ToolResultRecord) -> impl Iterator<Item = String> + '_ {
    let refused = match &result.details {
        Some(Details::Terminal(terminal)) => terminal.sandbox_refused.as_ref(),
        _ => None,
    };
    refused.into_iter().flat_map(|refused| {
        refused
            .lines
            .iter()
            .map(move |line| format!("the sandbox ({}) refused: {line}", refused.mode))
    })
}

/// The arguments' text as a JSON value: an empty object for empty text, and the text itself
/// as a JSON string when it is not JSON (the generic card then shows it raw).
pub fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

fn body_kind(body: &CardBody) -> CardKind {
    match body {
        CardBody::Generic { .. } => CardKind::Generic,
        CardBody::Terminal { .. } => CardKind::Terminal,
        CardBody::Diff { .. } => CardKind::Diff,
        CardBody::Search { .. } => CardKind::Search,
        CardBody::Read { .. } => CardKind::Read,
        CardBody::Web { .. } => CardKind::Web,
        CardBody::Todo { .. } => CardKind::Todo,
        CardBody::Question { .. } => CardKind::Question,
        CardBody::CodeRun { .. } => CardKind::CodeRun,
    }
}

fn title(tool: &str, body: &CardBody) -> String {
    match body {
        CardBody::Terminal { command, shell, .. } => {
            let first = command.lines().next().unwrap_or_default();
            let more = if command.lines().nth(1).is_some() {
                " …"
            } else {
                ""
            };
            // A background shell is named by its id: `sh1 · npm run dev`; before a call on
            // it has its result, the command is not known yet and the tool stands in.
            match shell {
                Some(shell) if command.is_empty() => format!("{} · {tool}", shell.id),
                Some(shell) => format!("{} · {first}{more}", shell.id),
                None => format!("$ {first}{more}"),
            }
        }
        CardBody::Diff { files } => match files.as_slice() {
            [one] => format!("{tool} {}", one.path),
            many => format!("{tool} {} files", many.len()),
        },
        CardBody::Search { pattern, .. } => format!("{tool} {pattern}"),
        CardBody::Read { path, .. } => format!("{tool} {path}"),
        CardBody::Web { url, .. } => format!("{tool} {url}"),
        CardBody::Todo { items } => {
            let done = items
                .iter()
                .filter(|item| item.status == "completed")
                .count();
            format!("{tool} ({done}/{} done)", items.len())
        }
        CardBody::Question { questions } => match questions.as_slice() {
            [one] => format!("{tool}: {}", one.question),
            many => format!("{tool}: {} questions", many.len()),
        },
        CardBody::CodeRun { language, .. } => format!("{tool} ({language})"),
        CardBody::Generic { .. } => tool.to_owned(),
    }
}

fn generic(args: &Value, output: Option<String>) -> CardBody {
    let arguments = match args.as_str() {
        Some(raw) => raw.to_owned(),
        None => serde_json::to_string_pretty(args).unwrap_or_default(),
    };
    CardBody::Generic { arguments, output }
}

/// A string as itself, anything else as JSON.
fn text_of(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

fn str_of(value: &Value, field: &str) -> Option<String> {
    value.get(field)?.as_str().map(str::to_owned)
}

fn u64_of(value: &Value, field: &str) -> Option<u64> {
    value.get(field)?.as_u64()
}

fn bool_of(value: &Value, field: &str) -> bool {
    value.get(field).and_then(Value::as_bool).unwrap_or(false)
}

/// A body from the arguments alone; `None` when they do not fit the kind.
fn call_body(kind: CardKind, tool: &str, args: &Value) -> Option<CardBody> {
    Some(match kind {
        CardKind::Generic => return None,
        CardKind::Terminal => match shell::call_body(tool, args) {
            Some(on_a_shell) => on_a_shell,
            None => CardBody::Terminal {
                command: str_of(args, "command")?,
                description: str_of(args, "description"),
                exit_code: None,
                signal: None,
                timed_out: false,
                output: None,
                truncated: false,
                shell: None,
            },
        },
        CardKind::Diff => CardBody::Diff {
            files: vec![proposed_change(args)?],
        },
        CardKind::Search => CardBody::Search {
            pattern: str_of(args, "pattern")?,
            files: Vec::new(),
            omitted_files: 0,
            omitted_matches: 0,
        },
        CardKind::Read => {
            let offset = u64_of(args, "offset");
            CardBody::Read {
                path: str_of(args, "path")?,
                start_line: offset,
                end_line: offset
                    .zip(u64_of(args, "limit"))
                    .map(|(start, limit)| start.saturating_add(limit).saturating_sub(1)),
                total_lines: None,
                truncated: false,
            }
        }
        CardKind::Web => CardBody::Web {
            url: str_of(args, "url")?,
            status: None,
            title: None,
            excerpt: None,
        },
        CardKind::Todo => CardBody::Todo {
            items: todo_items(args.get("todos")?)?,
        },
        CardKind::Question => CardBody::Question {
            questions: questions(args.get("questions")?, None)?,
        },
        CardKind::CodeRun => CardBody::CodeRun {
            language: str_of(args, "language").unwrap_or_else(|| "javascript".to_owned()),
            program: str_of(args, "code")?,
            sub_calls: Vec::new(),
            logs: None,
            result: None,
        },
    })
}

/// What an `edit` or `write` call proposes, as a diff: removed old text, added new text.
fn proposed_change(args: &Value) -> Option<DiffFile> {
    let path = str_of(args, "path")?;
    let mut lines = Vec::new();
    let mut push = |kind: DiffLineKind, text: &str| {
        for line in text.lines() {
            lines.push(DiffLine {
                kind,
                text: line.to_owned(),
            });
        }
    };
    if let Some(content) = args.get("content").and_then(Value::as_str) {
        push(DiffLineKind::Added, content);
    } else {
        for edit in args.get("edits")?.as_array()? {
            push(DiffLineKind::Hunk, "@@ replace @@");
            push(DiffLineKind::Removed, edit.get("old")?.as_str()?);
            push(DiffLineKind::Added, edit.get("new")?.as_str()?);
        }
    }
    let count = |kind| lines.iter().filter(|line| line.kind == kind).count() as u64;
    Some(DiffFile {
        added: count(DiffLineKind::Added),
        removed: count(DiffLineKind::Removed),
        path,
        lines,
    })
}

fn todo_items(todos: &Value) -> Option<Vec<TodoItem>> {
    todos
        .as_array()?
        .iter()
        .map(|todo| {
            Some(TodoItem {
                content: str_of(todo, "content")?,
                status: str_of(todo, "status")?,
            })
        })
        .collect()
}

fn questions(asked: &Value, answers: Option<&Value>) -> Option<Vec<QuestionItem>> {
    asked
        .as_array()?
        .iter()
        .map(|question| {
            let id = str_of(question, "id")?;
            let answer = answers.and_then(|answers| answers.get(&id));
            Some(QuestionItem {
                question: str_of(question, "question")?,
                options: question
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|options| {
                        options
                            .iter()
                            .filter_map(|option| option.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
                state: answer.and_then(|answer| str_of(answer, "state")),
                answer: answer
                    .and_then(|answer| answer.get("answer"))
                    .filter(|answer| !answer.is_null())
                    .map(text_of),
                id,
            })
        })
        .collect()
}

/// A body from a result without details: tools that show what they did through their
/// arguments and value.
fn fallback_body(
    kind: CardKind,
    tool: &str,
    args: &Value,
    result: &ToolResultRecord,
) -> Option<CardBody> {
    let value = result.value.as_ref();
    match kind {
        CardKind::Question => Some(CardBody::Question {
            questions: questions(args.get("questions")?, value)?,
        }),
        CardKind::Diff if !result.is_error() => call_body(kind, tool, args),
        CardKind::Read if !result.is_error() => {
            let value = value?;
            Some(CardBody::Read {
                path: str_of(value, "path")?,
                start_line: u64_of(value, "start_line"),
                end_line: u64_of(value, "end_line"),
                total_lines: u64_of(value, "total_lines"),
                truncated: bool_of(value, "truncated"),
            })
        }
        CardKind::Generic
        | CardKind::Terminal
        | CardKind::Diff
        | CardKind::Search
        | CardKind::Read
        | CardKind::Web
        | CardKind::Todo
        | CardKind::CodeRun => None,
    }
}

/// A body from a result's details; `None` (the generic card) for a tool's own details.
fn result_body(tool: &str, args: &Value, details: &Details, output: &str) -> Option<CardBody> {
    Some(match details {
        Details::Custom(_) => return None,
        Details::Terminal(terminal) => CardBody::Terminal {
            command: terminal.command.clone(),
            // A call on a shell is titled by the shell's command: what this call did to it
            // (its arguments, in words) says more than what the command is for.
            description: shell::asked(tool, args).or_else(|| terminal.description.clone()),
            exit_code: terminal.exit_code,
            signal: terminal.signal,
            timed_out: terminal.timed_out,
            output: Some(
                terminal
                    .output_tail
                    .clone()
                    .unwrap_or_else(|| output.to_owned()),
            ),
            truncated: terminal.truncated,
            shell: terminal.shell.as_ref().map(shell::terminal_shell),
        },
        Details::Diff(diff) => CardBody::Diff {
            files: diff.files.iter().map(diff_file).collect(),
        },
        Details::Search(search) => CardBody::Search {
            pattern: search.pattern.clone(),
            files: search.files.iter().map(search_file).collect(),
            omitted_files: search.omitted_files,
            omitted_matches: search.omitted_matches,
        },
        Details::Read(read) => CardBody::Read {
            path: read.path.clone(),
            start_line: read.start_line,
            end_line: read.end_line,
            total_lines: Some(read.total_lines),
            truncated: read.truncated,
        },
        Details::Web(web) => CardBody::Web {
            url: web.url.clone(),
            status: web.status,
            title: web.title.clone(),
            excerpt: web.excerpt.clone(),
        },
        Details::Todo(todo) => CardBody::Todo {
            items: todo
                .items
                .iter()
                .map(|item| TodoItem {
                    content: item.content.clone(),
                    status: item.status.as_str().to_owned(),
                })
                .collect(),
        },
        Details::Question(asked) => CardBody::Question {
            questions: asked
                .questions
                .iter()
                .map(|question| {
                    let answer = asked.answers.get(&question.id);
                    QuestionItem {
                        id: question.id.clone(),
                        question: question.question.clone(),
                        options: question.options.clone(),
                        state: answer.map(|answer| answer.state.clone()),
                        answer: answer
                            .and_then(|answer| answer.answer.as_ref())
                            .filter(|answer| !answer.is_null())
                            .map(text_of),
                    }
                })
                .collect(),
        },
        Details::CodeRun(run) => CardBody::CodeRun {
            language: run.language.clone(),
            program: if run.program.is_empty() {
                str_of(args, "code")?
            } else {
                run.program.clone()
            },
            sub_calls: run
                .sub_calls
                .iter()
                .map(|call| SubCall {
                    call_id: call.call_id.clone(),
                    tool: call.tool.clone(),
                    error: call.error.clone(),
                })
                .collect(),
            logs: run.logs.clone(),
            result: (!run.result.is_null()).then(|| text_of(&run.result)),
        },
    })
}

fn diff_file(file: &details::FileDiff) -> DiffFile {
    let lines = file
        .diff
        .lines()
        .filter(|line| !line.starts_with("+++") && !line.starts_with("---"))
        .map(|line| {
            let (kind, text) = match line.as_bytes().first() {
                Some(b'@') => (DiffLineKind::Hunk, line),
                Some(b'+') => (DiffLineKind::Added, line.get(1..).unwrap_or_default()),
                Some(b'-') => (DiffLineKind::Removed, line.get(1..).unwrap_or_default()),
                _ => (DiffLineKind::Context, line.get(1..).unwrap_or_default()),
            };
            DiffLine {
                kind,
                text: text.to_owned(),
            }
        })
        .collect();
    DiffFile {
        path: file.path.clone(),
        added: file.added,
        removed: file.removed,
        lines,
    }
}

fn search_file(file: &details::SearchHits) -> SearchFile {
    let lines: Vec<SearchLine> = file
        .lines
        .iter()
        .map(|line| SearchLine {
            line: line.line,
            text: line.text.clone(),
            is_match: line.is_match,
        })
        .collect();
    let count = file.count.or_else(|| {
        (!lines.is_empty()).then(|| lines.iter().filter(|l| l.is_match).count() as u64)
    });
    SearchFile {
        path: file.path.clone(),
        count,
        lines,
    }
}

/// One line for an effect.
pub fn effect_line(effect: &Effect) -> String {
    match effect {
        Effect::FileWritten { path, before, .. } => match before {
            None => format!("created {path}"),
            Some(_) => format!("wrote {path}"),
        },
        Effect::FileDeleted { path, .. } => format!("deleted {path}"),
        Effect::FileMoved { from, to } => format!("moved {from} → {to}"),
        Effect::ProcessSpawned { pid, command } => format!("started process {pid}: {command}"),
        Effect::Other { name, data } => format!("{name}: {data}"),
    }
}
