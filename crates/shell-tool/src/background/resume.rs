//! Background shells across a restart. No shell outlives the runtime that ran it (the
//! sandbox's lifeline kills its tree), so a session resumed from its log has none running:
//! each shell the log shows started and not ended is reported ended with the runtime —
//! with the end its watcher wrote beside its output if it ended unobserved before — once,
//! to the model and in the log, and `shell_list` shows it ended.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toolrail_tools_core::log::event::{ShellEnd, ShellExited, ShellStarted};
use toolrail_tools_core::log::{ContentBlock, Event, EventData};

use super::PastShell;
use super::shell::exit_file;

/// Bytes of a shell's output quoted to the model when it is reported ended.
const QUOTED_TAIL: u64 = 2048;

/// Every shell the log names, as it ended (or as it ends now, for one the log shows
/// running), in the order they started.
pub(crate) fn past_shells(events: &[Event]) -> Vec<PastShell> {
    let mut started: Vec<&ShellStarted> = Vec::new();
    let mut exits: BTreeMap<&str, &ShellExited> = BTreeMap::new();
    for event in events {
        if let EventData::ShellStarted(shell) = &event.data {
            started.push(shell);
        } else if let EventData::ShellExited(exited) = &event.data {
            exits.insert(&exited.id, exited);
        }
    }
    started
        .into_iter()
        .map(|shell| match exits.get(shell.id.as_str()) {
            Some(exited) => PastShell::from_log(shell, exited),
            None => PastShell::from_log(shell, &unrecorded_end(shell)),
        })
        .collect()
}

impl PastShell {
    /// The shell `started` names, ended as `exited` says.
    fn from_log(started: &ShellStarted, exited: &ShellExited) -> Self {
        Self {
            id: started.id.clone(),
            command: started.command.clone(),
            tty: started.tty,
            end: exited.end,
            exit_code: exited.exit_code.and_then(|code| i32::try_from(code).ok()),
            signal: exited.signal.and_then(|signal| i32::try_from(signal).ok()),
            output_file: PathBuf::from(&started.output),
            output_bytes: exited.output_bytes,
            read_cursor: 0,
        }
    }
}

/// The end of a shell the log shows running: what its watcher wrote beside its output, if
/// it ended before the runtime did; otherwise ended with the runtime.
fn unrecorded_end(shell: &ShellStarted) -> ShellExited {
    let output = Path::new(&shell.output);
    let size = std::fs::metadata(output).map_or(0, |meta| meta.len());
    let written: Option<serde_json::Value> = std::fs::read(exit_file(output))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let from_file = written.and_then(|value| {
        let end: ShellEnd = serde_json::from_value(value.get("end")?.clone()).ok()?;
        Some(ShellExited {
            id: shell.id.clone(),
            end,
            exit_code: value.get("exit_code").and_then(serde_json::Value::as_i64),
            signal: value.get("signal").and_then(serde_json::Value::as_i64),
            output: shell.output.clone(),
            output_bytes: value
                .get("output_bytes")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(size),
        })
    });
    from_file.unwrap_or_else(|| ShellExited {
        id: shell.id.clone(),
        end: ShellEnd::EndedWithRuntime,
        exit_code: None,
        signal: None,
        output: shell.output.clone(),
        output_bytes: size,
    })
}

/// What a resumed session appends about shells its log shows running: a `shell/exited`
/// each, and one message telling the model.
#[derive(Clone, Debug, PartialEq)]
pub struct EndedWithRuntime {
    /// One per shell, in the order they started.
    pub exited: Vec<ShellExited>,
    /// What the model reads: each shell, how it ended, the end of its output so far.
    pub message: Vec<ContentBlock>,
}

/// The shells `events` show started and never ended, reported ended (`None` when there
/// are none). Appending what this returns makes the report once: the log then shows them
/// ended.
///
/// ```
/// use toolrail_shell_tool::ended_with_runtime;
/// assert!(ended_with_runtime(&[]).is_none());
/// ```
pub fn ended_with_runtime(events: &[Event]) -> Option<EndedWithRuntime> {
    let ended: Vec<&str> = events
        .iter()
        .filter_map(|event| {
            let EventData::ShellExited(exited) = &event.data else {
                return None;
            };
            Some(exited.id.as_str())
        })
        .collect();
    let open: Vec<&ShellStarted> = events
        .iter()
        .filter_map(|event| {
            let EventData::ShellStarted(shell) = &event.data else {
                return None;
            };
            (!ended.contains(&shell.id.as_str())).then_some(shell)
        })
        .collect();
    if open.is_empty() {
        return None;
    }
    let mut text = String::from(
        "[toolrail] The session was resumed after the runtime that ran it ended. Its background shells do not outlive their runtime; none of these is running now:\n",
    );
    let mut exited = Vec::new();
    for shell in open {
        let end = unrecorded_end(shell);
        let already = match end.end {
            ShellEnd::EndedWithRuntime => None,
            ShellEnd::Exited => Some("exited"),
            ShellEnd::Killed => Some("been killed"),
            ShellEnd::LifetimeEnded => Some("passed its lifetime and been stopped"),
            ShellEnd::NeverRan => Some("failed to start (its sandbox could not be made)"),
        };
        let how = match already {
            None => "ended with the runtime".to_owned(),
            Some(already) => format!(
                "had already {already} before the runtime ended{}",
                match (end.exit_code, end.signal) {
                    (Some(code), _) => format!(" (exit code {code})"),
                    (None, Some(signal)) => format!(" (signal {signal})"),
                    (None, None) => String::new(),
                }
            ),
        };
        text.push_str(&format!(
            "\n- shell {} (`{}`) {how}; it wrote {} bytes (whole output in {})",
            shell.id, shell.command, end.output_bytes, shell.output
        ));
        let tail = output_tail(Path::new(&shell.output), QUOTED_TAIL);
        if tail.trim().is_empty() {
            text.push_str(": no output.\n");
        } else {
            text.push_str(". Its output so far ends with:\n");
            text.push_str(&tail);
            if !tail.ends_with('\n') {
                text.push('\n');
            }
        }
        exited.push(end);
    }
    text.push_str("\nStart a shell again if it is still needed.");
    Some(EndedWithRuntime {
        exited,
        message: vec![ContentBlock::text(text)],
    })
}

/// The last `most` bytes of a file, as text (terminal escapes removed).
fn output_tail(path: &Path, most: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let size = file.metadata().map_or(0, |meta| meta.len());
    let from = size.saturating_sub(most);
    if file.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.take(most).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    super::transcript::plain_terminal_text(&bytes)
}
