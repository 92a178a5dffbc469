//! Asking on an interactive terminal. Without one (stdin or stderr not a TTY: a pipe, CI, a
//! daemon) every request is `Unavailable`, never an approval.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::sync::Arc;

use parking_lot::Mutex;
use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

/// How often an unreadable reply is asked again before it counts as a rejection.
const ATTEMPTS: usize = 3;

struct Terminal {
    input: Box<dyn BufRead + Send>,
    output: Box<dyn Write + Send>,
}

/// Asks one request at a time. The terminal is held by the request being asked; a request
/// cancelled mid-question leaves the terminal with the read that is still waiting, and later
/// requests are `Unavailable` until that read returns.
pub struct TerminalApprovals {
    terminal: Arc<Mutex<Option<Terminal>>>,
}

impl TerminalApprovals {
    /// This process's terminal, when stdin and stderr both are one.
    pub fn stdio() -> Self {
        let terminal =
            (std::io::stdin().is_terminal() && std::io::stderr().is_terminal()).then(|| Terminal {
                input: Box::new(BufReader::new(std::io::stdin())),
                output: Box::new(std::io::stderr()),
            });
        Self {
            terminal: Arc::new(Mutex::new(terminal)),
        }
    }

    /// Asks through the given streams as if they were a terminal (an embedded console, tests).
    pub fn with_io(
        input: impl BufRead + Send + 'static,
        output: impl Write + Send + 'static,
    ) -> Self {
        Self {
            terminal: Arc::new(Mutex::new(Some(Terminal {
                input: Box::new(input),
                output: Box::new(output),
            }))),
        }
    }

    /// Whether a terminal is there to ask (and not busy).
    pub fn is_available(&self) -> bool {
        self.terminal.lock().is_some()
    }
}

impl ApprovalService for TerminalApprovals {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            let Some(mut terminal) = self.terminal.lock().take() else {
                return ApprovalAnswer::Unavailable;
            };
            let shared = Arc::clone(&self.terminal);
            let request = request.clone();
            let asking = tokio::task::spawn_blocking(move || {
                let answer = ask(&mut terminal, &request);
                // The terminal goes back for the next request, even if this one stopped
                // waiting meanwhile.
                *shared.lock() = Some(terminal);
                answer
            });
            tokio::select! {
                answered = asking => answered.unwrap_or(ApprovalAnswer::Unavailable),
                () = cancel.cancelled() => ApprovalAnswer::Cancelled,
            }
        })
    }
}

/// Text the model controls (a command, a justification), with control characters shown as
/// escapes: a carriage return or a terminal escape sequence must not redraw the question a
/// person is answering.
fn visible(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// What a person is shown when `request` asks: the question (tool, call, subject, reason,
/// what it would change) and the line that asks for the answer. Text the model controls is
/// shown with its control characters escaped.
pub fn approval_question(request: &ApprovalRequest) -> (String, String) {
    let session = request
        .session_key
        .clone()
        .unwrap_or_else(|| request.identity.name.clone());
    let mut text = format!(
        "toolrail: `{}` asks to run (call {})\n",
        request.identity.name,
        visible(request.identity.call_id.as_str())
    );
    if let Some(subject) = &request.subject {
        text.push_str(&format!("  subject: {}\n", visible(subject)));
    }
    text.push_str(&format!("  reason:  {}\n", visible(&request.reason)));
    if let Some(preview) = &request.preview {
        text.push_str("  it would change:\n");
        for line in preview.lines() {
            text.push_str(&format!("    {}\n", visible(line)));
        }
    }
    let prompt = match &request.session_key {
        Some(_) => format!(
            "Allow? [y] once, [s] for this session ({}), [n] no (n: why): ",
            visible(&session)
        ),
        None => "Allow? [y] once, [n] no (n: why): ".to_owned(),
    };
    (text, prompt)
}

fn ask(terminal: &mut Terminal, request: &ApprovalRequest) -> ApprovalAnswer {
    let (question, prompt) = approval_question(request);
    let text = format!("\n{question}");
    if terminal.output.write_all(text.as_bytes()).is_err() {
        return ApprovalAnswer::Unavailable;
    }
    for _ in 0..ATTEMPTS {
        if terminal
            .output
            .write_all(prompt.as_bytes())
            .and_then(|()| terminal.output.flush())
            .is_err()
        {
            return ApprovalAnswer::Unavailable;
        }
        let mut line = String::new();
        match terminal.input.read_line(&mut line) {
            // End of input: nobody is there to answer.
            Ok(0) | Err(_) => return ApprovalAnswer::Unavailable,
            Ok(_) => {}
        }
        if let Some(answer) = parse_reply(&line, request.session_key.as_deref()) {
            return answer;
        }
        let _ = terminal.output.write_all(b"  please answer y, s or n\n");
    }
    ApprovalAnswer::Rejected {
        reason: Some("no readable answer on the terminal".to_owned()),
    }
}

/// A person's reply to an approval question: `y`/`yes`, `s`/`session` (only when the
/// request offers a session key), `n`/`no`, or `n: why`; `None` for anything else.
pub fn parse_reply(line: &str, session_key: Option<&str>) -> Option<ApprovalAnswer> {
    let line = line.trim();
    let (word, why) = match line.split_once(':') {
        Some((word, why)) => (
            word.trim(),
            Some(why.trim().to_owned()).filter(|why| !why.is_empty()),
        ),
        None => (line, None),
    };
    match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(ApprovalAnswer::AllowedOnce),
        "s" | "session" => session_key.map(|key| ApprovalAnswer::AllowedForSession {
            key: key.to_owned(),
        }),
        "n" | "no" => Some(ApprovalAnswer::Rejected { reason: why }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(parse_reply("y\n", None), Some(ApprovalAnswer::AllowedOnce));
        assert_eq!(
            parse_reply(" YES ", None),
            Some(ApprovalAnswer::AllowedOnce)
        );
        assert_eq!(
            parse_reply("s", Some("bash(ls)")),
            Some(ApprovalAnswer::AllowedForSession {
                key: "bash(ls)".to_owned()
            })
        );
        assert_eq!(parse_reply("s", None), None, "no session key was offered");
        assert_eq!(
            parse_reply("n: not on main", None),
            Some(ApprovalAnswer::Rejected {
                reason: Some("not on main".to_owned())
            })
        );
        assert_eq!(parse_reply("", None), None);
        assert_eq!(parse_reply("maybe", None), None);
    }

    #[test]
    fn model_text_cannot_redraw_the_question() {
        assert_eq!(
            visible("ls\r\u{1b}[2Kreason: harmless"),
            "ls\\r\\u{1b}[2Kreason: harmless"
        );
        assert_eq!(visible("plain text ✓"), "plain text ✓");
    }
}
