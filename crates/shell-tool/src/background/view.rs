//! What a call reads of a background shell: it waits as its tool says (for output, for
//! output to go quiet, for the end), takes the output after a cursor — filtered, cleaned of
//! terminal escapes, cut to the cap — and makes the result the model, programs and the
//! shell's card read. The first call that sees a shell's end records `shell/exited`.

use std::time::Duration;

use regex::Regex;
use serde_json::json;
use tokio::time::Instant;
use toolrail_tools_core::log::AppendUrgency;
use toolrail_tools_core::log::details::{ShellFacts, ShellState, Terminal};
use toolrail_tools_core::log::event::{ShellEnd, ShellExited};
use toolrail_tools_core::{CancellationToken, ToolContext, ToolOutput};

use super::shell::{Ending, Life, Shell};
use super::transcript::{Delta, plain_terminal_text};

/// How long a call waits before it reads.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Not at all.
    No,
    /// Until output after the cursor (matching the filter, if any) or the end, at most
    /// this long.
    ForOutput(Duration),
    /// Until output came and then went quiet for `quiet`, or the end, at most `window`.
    Settle { window: Duration, quiet: Duration },
    /// Until the end, at most this long.
    ForEnd(Duration),
}

/// What a call read of a shell.
pub(crate) struct ShellView {
    /// The text the model reads of the output.
    pub text: String,
    /// Where the next read starts.
    pub cursor: u64,
    /// The cursor this read started from.
    pub since: u64,
    /// Bytes after `since` that memory no longer held (they are in the output file).
    pub dropped: u64,
    /// Bytes of what was read left out of the text to keep it within the cap.
    pub left_out: u64,
    /// Lines the filter kept, when there is one.
    pub matched: Option<usize>,
    pub life: Life,
}

/// Waits as `wait` says, then reads the shell's output after `since`. While it waits, each
/// new output is reported as the call's progress (its last line), so a watcher sees the
/// shell move.
pub(crate) async fn observe(
    shell: &Shell,
    since: u64,
    wait: Wait,
    filter: Option<&Regex>,
    cap: usize,
    ctx: Option<&ToolContext>,
    cancel: &CancellationToken,
) -> ShellView {
    let mut changes = shell.subscribe();
    let started = Instant::now();
    let mut quiet_since: Option<Instant> = None;
    loop {
        let life = shell.life();
        if life != Life::Running {
            break;
        }
        let deadline = match wait {
            Wait::No => break,
            Wait::ForOutput(most) => {
                if has_news(shell, since, filter) {
                    break;
                }
                started + most
            }
            Wait::Settle { window, quiet } => {
                if shell.total() > since {
                    let quiet_from = *quiet_since.get_or_insert_with(Instant::now);
                    (started + window).min(quiet_from + quiet)
                } else {
                    started + window
                }
            }
            Wait::ForEnd(most) => started + most,
        };
        if Instant::now() >= deadline {
            break;
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                // New output restarts the quiet period.
                if quiet_since.is_some() {
                    quiet_since = Some(Instant::now());
                }
                if let Some(ctx) = ctx {
                    report_progress(ctx, shell, since);
                }
            }
            () = tokio::time::sleep_until(deadline) => break,
            () = cancel.cancelled() => break,
        }
    }
    let life = shell.life();
    let delta = shell.since(since);
    read_delta(delta, since, &life, shell.tty, filter, cap)
}

/// The shell's newest line (after `since`) as the call's progress.
fn report_progress(ctx: &ToolContext, shell: &Shell, since: u64) {
    let total = shell.total();
    if total <= since {
        return;
    }
    let delta = shell.since(since.max(total.saturating_sub(512)));
    let text = text_of(&delta, shell.tty);
    let line = text
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default();
    ctx.progress(serde_json::json!({
        "shell": shell.id,
        "output_bytes": total,
        "text": line,
    }));
}

/// Whether output after `since` holds something the call waits for.
fn has_news(shell: &Shell, since: u64, filter: Option<&Regex>) -> bool {
    if shell.total() <= since {
        return false;
    }
    let Some(filter) = filter else {
        return true;
    };
    let delta = shell.since(since);
    let text = text_of(&delta, shell.tty);
    complete_lines(&text, true)
        .0
        .iter()
        .any(|line| filter.is_match(line))
}

fn text_of(delta: &Delta, tty: bool) -> String {
    let clean = |bytes: &[u8]| {
        if tty {
            plain_terminal_text(bytes)
        } else {
            String::from_utf8_lossy(bytes).into_owned()
        }
    };
    let mut text = clean(&delta.before);
    if delta.dropped > 0 {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[… {} bytes not kept in memory: they are in the output file …]\n",
            delta.dropped
        ));
    }
    text.push_str(&clean(&delta.after));
    text
}

/// The lines of `text` that are whole (all of them once the shell ended), and the bytes of
/// the unfinished last line left for a later read.
fn complete_lines(text: &str, running: bool) -> (Vec<&str>, usize) {
    let (whole, partial) = match (running, text.rfind('\n')) {
        (false, _) => (text, ""),
        (true, Some(at)) => text.split_at(at + 1),
        (true, None) => ("", text),
    };
    (whole.lines().collect(), partial.len())
}

fn read_delta(
    delta: Delta,
    since: u64,
    life: &Life,
    tty: bool,
    filter: Option<&Regex>,
    cap: usize,
) -> ShellView {
    let running = *life == Life::Running;
    let mut cursor = delta.end;
    let dropped = delta.dropped;
    let (text, matched) = match filter {
        None => (text_of(&delta, tty), None),
        Some(filter) => {
            let all = text_of(&delta, tty);
            let (lines, partial) = complete_lines(&all, running);
            // An unfinished line is read again whole next time (when it is raw bytes: a
            // terminal's cleaned text can be shorter than its bytes, so it is not held back).
            if !tty && delta.after.len() >= partial && partial > 0 {
                cursor = delta.end - partial as u64;
            }
            let kept: Vec<&str> = lines
                .into_iter()
                .filter(|line| filter.is_match(line))
                .collect();
            let count = kept.len();
            let mut text = kept.join("\n");
            if count > 0 {
                text.push('\n');
            }
            (text, Some(count))
        }
    };
    let (text, left_out) = cut(text, cap);
    ShellView {
        text,
        cursor,
        since,
        dropped,
        left_out,
        matched,
        life: life.clone(),
    }
}

/// `text` within `cap` bytes: its head and tail around a marker.
fn cut(text: String, cap: usize) -> (String, u64) {
    if text.len() <= cap {
        return (text, 0);
    }
    let half = cap / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let left_out = (tail_start - head_end) as u64;
    let cut = format!(
        "{}\n[… {left_out} bytes left out; the whole output is in the shell's output file …]\n{}",
        text.get(..head_end).unwrap_or_default(),
        text.get(tail_start..).unwrap_or_default()
    );
    (cut, left_out)
}

/// A shell's state as cards show it, with its exit code and signal.
pub(crate) fn state_of(life: &Life) -> (ShellState, Option<i32>, Option<i32>) {
    match life.ending() {
        None => (ShellState::Running, None, None),
        Some(ending) => (state_of_end(ending.end), ending.exit_code, ending.signal),
    }
}

pub(crate) fn state_of_end(end: ShellEnd) -> ShellState {
    match end {
        ShellEnd::Exited => ShellState::Exited,
        ShellEnd::Killed => ShellState::Killed,
        ShellEnd::LifetimeEnded => ShellState::LifetimeEnded,
        ShellEnd::EndedWithRuntime => ShellState::EndedWithRuntime,
        ShellEnd::NeverRan => ShellState::NeverRan,
    }
}

/// How a shell stands, in words: `running`, `exited with code 0`, `killed (signal 15)`.
pub(crate) fn describe(life: &Life) -> String {
    match life {
        Life::Running => "running".to_owned(),
        Life::NeverRan(why) => format!("never ran: {why}"),
        Life::Ended(Ending {
            end,
            exit_code,
            signal,
        }) => {
            let how = match (exit_code, signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => "no exit status".to_owned(),
            };
            match end {
                ShellEnd::Exited => format!("exited ({how})"),
                ShellEnd::Killed => format!("was killed ({how})"),
                ShellEnd::LifetimeEnded => {
                    format!("was stopped at the end of its lifetime ({how})")
                }
                ShellEnd::EndedWithRuntime => "ended with the runtime".to_owned(),
                ShellEnd::NeverRan => "never ran (its sandbox could not be made)".to_owned(),
            }
        }
    }
}

impl ShellView {
    /// The result of a call that read `shell`: the output, a line on where the shell
    /// stands, the value programs read and the shell's terminal card.
    pub(crate) fn output(&self, shell: &Shell, extra: serde_json::Value) -> ToolOutput {
        let (state, exit_code, signal) = state_of(&self.life);
        let mut text = self.text.clone();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if self.matched == Some(0) {
            text.push_str("[no new line matched the filter]\n");
        } else if self.text.is_empty() {
            text.push_str("[no new output]\n");
        }
        text.push_str(&format!(
            "[shell {} {} · cursor {}]",
            shell.id,
            describe(&self.life),
            self.cursor
        ));
        if self.dropped > 0 || self.left_out > 0 {
            text.push_str(&format!(
                "\n[whole output: {}]",
                shell.output_file.display()
            ));
        }
        if shell.file_cut() {
            text.push_str(
                "\n[the output file stopped at its size cap: later output is kept only as far as memory holds it]",
            );
        }
        let mut value = json!({
            "id": shell.id,
            "state": state.as_str(),
            "exit_code": exit_code,
            "signal": signal,
            "since": self.since,
            "cursor": self.cursor,
            "output_bytes": shell.total(),
            "dropped_bytes": self.dropped,
            "left_out_bytes": self.left_out,
            "matched_lines": self.matched,
            "output_file": shell.output_file.display().to_string(),
            "output_file_cut": shell.file_cut(),
        });
        if let (Some(value), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            value.extend(extra.clone());
        }
        let details = Terminal {
            command: shell.command.clone(),
            description: None,
            exit_code: exit_code.map(i64::from),
            signal: signal.map(i64::from),
            timed_out: false,
            output_tail: Some(text.clone()),
            truncated: self.dropped > 0 || self.left_out > 0,
            sandbox_refused: None,
            shell: Some(ShellFacts {
                id: shell.id.clone(),
                state,
                tty: shell.tty,
                cursor: self.cursor,
            }),
        };
        ToolOutput {
            value: Some(value),
            ..ToolOutput::text(text)
        }
        .with_details(details)
    }
}

/// Records `shell/exited` once, by the first call that sees the shell ended.
pub(crate) async fn record_end(ctx: &ToolContext, shell: &Shell, life: &Life) {
    let Some(ending) = life.ending() else {
        return;
    };
    if shell
        .exit_recorded
        .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        return;
    }
    let exited = ShellExited {
        id: shell.id.clone(),
        end: ending.end,
        exit_code: ending.exit_code.map(i64::from),
        signal: ending.signal.map(i64::from),
        output: shell.output_file.display().to_string(),
        output_bytes: shell.total(),
    };
    // A log that refuses it loses only the record; a resume then reports the shell as
    // ended with the runtime, reading its end from beside its output.
    let _ = ctx.record(exited, AppendUrgency::Buffered).await;
}
