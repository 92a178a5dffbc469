//! Background shells on terminal cards: the card of a call on a shell (`shell_output`,
//! `shell_write`, `shell_kill`) before its result, what such a call asked in words, and a
//! shell's state as a reader says it. The card names the shell, so one shell reads as one
//! terminal seen again by each call that touched it.

use serde_json::Value;
use toolrail_session_log::details::{ShellFacts, ShellState};

use crate::card::{CardBody, TerminalShell};

/// The tools whose calls act on a background shell named by their `id` argument.
fn acts_on_a_shell(tool: &str) -> bool {
    matches!(tool, "shell_output" | "shell_write" | "shell_kill")
}

/// The terminal body of a call on a background shell before its result: the shell's id and
/// what the call asks of it. `None` for other tools, and for arguments with no `id`.
pub(crate) fn call_body(tool: &str, args: &Value) -> Option<CardBody> {
    if !acts_on_a_shell(tool) {
        return None;
    }
    let id = args.get("id")?.as_str()?.to_owned();
    Some(CardBody::Terminal {
        // Only the result says which command the shell runs.
        command: String::new(),
        description: asked(tool, args),
        exit_code: None,
        signal: None,
        timed_out: false,
        output: None,
        truncated: false,
        shell: Some(TerminalShell {
            id,
            state: None,
            tty: false,
            cursor: None,
        }),
    })
}

/// What a call on a background shell asked, in words: `read output since byte 812,
/// waiting up to 5000 ms`, `write "y\n", then close the input`, `kill with SIGTERM`. `None`
/// for other tools. A result's card shows it in place of the details' description, since
/// the shell's command (the title) does not say what this call did.
pub(crate) fn asked(tool: &str, args: &Value) -> Option<String> {
    let mut parts = Vec::new();
    match tool {
        "shell_output" => {
            let mut read = "read output".to_owned();
            if let Some(since) = args.get("since").filter(|since| !since.is_null()) {
                read.push_str(&format!(" since byte {}", scalar(since)));
            }
            if let Some(filter) = args.get("filter").and_then(Value::as_str) {
                read.push_str(&format!(" matching {}", quoted(filter)));
            }
            parts.push(read);
            if let Some(wait) = args.get("wait_ms").filter(|wait| !wait.is_null()) {
                parts.push(format!("waiting up to {} ms", scalar(wait)));
            }
        }
        "shell_write" => {
            if let Some(input) = args
                .get("input")
                .and_then(Value::as_str)
                .filter(|input| !input.is_empty())
            {
                parts.push(format!("write {}", quoted(input)));
            }
            let keys = match args.get("keys") {
                Some(Value::String(key)) => vec![key.clone()],
                Some(Value::Array(keys)) => keys
                    .iter()
                    .filter_map(|key| key.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            };
            if !keys.is_empty() {
                parts.push(format!("press {}", keys.join(" ")));
            }
            if args.get("close").and_then(Value::as_bool) == Some(true) {
                parts.push("then close the input".to_owned());
            }
            if parts.is_empty() {
                parts.push("write nothing".to_owned());
            }
        }
        "shell_kill" => match args.get("signal").filter(|signal| !signal.is_null()) {
            Some(signal) => parts.push(format!("kill with {}", scalar(signal))),
            None => parts.push("kill".to_owned()),
        },
        _ => return None,
    }
    Some(parts.join(", "))
}

/// A number or string argument as itself; anything else as JSON.
fn scalar(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// Text as a JSON string, so newlines and quotes stay visible and on one line.
fn quoted(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// The card's view of the shell facts a result's details carry.
pub(crate) fn terminal_shell(facts: &ShellFacts) -> TerminalShell {
    TerminalShell {
        id: facts.id.clone(),
        state: Some(facts.state),
        tty: facts.tty,
        cursor: Some(facts.cursor),
    }
}

/// A shell's state as a reader says it: `running`, `lifetime ended`, `ended with the
/// runtime`.
pub(crate) fn state_words(state: ShellState) -> &'static str {
    match state {
        ShellState::Running => "running",
        ShellState::Exited => "exited",
        ShellState::Killed => "killed",
        ShellState::LifetimeEnded => "lifetime ended",
        ShellState::EndedWithRuntime => "ended with the runtime",
        ShellState::NeverRan => "never ran",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_a_call_on_a_shell_asked_reads_as_words() {
        let cases = [
            ("shell_output", json!({"id": "sh1"}), Some("read output")),
            (
                "shell_output",
                json!({"id": "sh1", "since": 812, "filter": "err(or)?", "wait_ms": 5000}),
                Some("read output since byte 812 matching \"err(or)?\", waiting up to 5000 ms"),
            ),
            (
                "shell_write",
                json!({"id": "sh1", "input": "y\n", "close": true}),
                Some("write \"y\\n\", then close the input"),
            ),
            (
                "shell_write",
                json!({"id": "sh1", "input": "", "keys": ["C-c"]}),
                Some("press C-c"),
            ),
            ("shell_write", json!({"id": "sh1"}), Some("write nothing")),
            (
                "shell_kill",
                json!({"id": "sh1", "signal": "SIGINT"}),
                Some("kill with SIGINT"),
            ),
            (
                "shell_kill",
                json!({"id": "sh1", "signal": 9}),
                Some("kill with 9"),
            ),
            ("shell_kill", json!({"id": "sh1"}), Some("kill")),
            ("bash", json!({"command": "ls"}), None),
            ("shell_list", json!({}), None),
        ];
        let got: Vec<Option<String>> = cases
            .iter()
            .map(|(tool, args, _)| asked(tool, args))
            .collect();
        let want: Vec<Option<String>> = cases
            .iter()
            .map(|(_, _, want)| want.map(str::to_owned))
            .collect();
        assert_eq!(got, want);
    }
}
