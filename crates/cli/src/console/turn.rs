//! One turn on the console: the agent's events shown as they come, each approval asked
//! whole on a paused screen, Ctrl-C cancelling the batch (the calls still get honest
//! outcomes and the conversation goes on), a second Ctrl-C leaving once the turn has
//! settled, and a third leaving at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;
use toolrail_interaction::{ApprovalInbox, PendingApproval, approval_question, parse_reply};
use toolrail_runtime::{Agent, AgentError, AgentEvent, Answer};
use toolrail_tools_core::ApprovalAnswer;

use super::keyboard::{discard_typed_ahead, read_answer};
use super::{Console, Line, Mode};

/// How often the live lines are redrawn.
const TICK: Duration = Duration::from_millis(200);
/// Unreadable replies to one question before it counts as a rejection.
const ATTEMPTS: usize = 3;
/// The exit status of a process a person interrupted (128 + SIGINT).
const INTERRUPTED: i32 = 130;

/// Ctrl-C while a turn runs (the terminal's own handling is off for the process: the first
/// press cancels, it does not kill).
pub(crate) struct Interrupts {
    signal: Option<Signal>,
}

impl Interrupts {
    pub(crate) fn catch() -> Self {
        Self {
            signal: signal(SignalKind::interrupt()).ok(),
        }
    }

    async fn next(&mut self) {
        match &mut self.signal {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending().await,
        }
    }
}

/// What a turn came to on the console.
pub(crate) struct TurnOutcome {
    pub result: Result<Answer, AgentError>,
    /// The person asked to leave (a second Ctrl-C, or the input closed at a question).
    pub leave: bool,
}

/// The approval being asked, and the read of its reply: the read belongs to this question
/// alone and stops when it is withdrawn.
struct Asking {
    pending: PendingApproval,
    read: JoinHandle<Line>,
    withdrawn: Arc<AtomicBool>,
    attempts: usize,
    prompt: String,
}

impl Asking {
    /// Stops the read (it gives up within its watch period) and waits for it to end.
    async fn stop(self) {
        self.withdrawn.store(true, Ordering::Release);
        let _ = self.read.await;
        discard_typed_ahead();
    }
}

/// Runs `prompt` as one turn of `agent` on `console`; approvals arrive in `asks` (none:
/// they are answered by a service) and are read from the terminal.
pub(crate) async fn drive(
    agent: &Agent,
    prompt: String,
    console: &mut Console,
    mut asks: Option<&mut ApprovalInbox>,
    interrupts: &mut Interrupts,
) -> TurnOutcome {
    // Keys typed while the turn runs are not echoed over the live lines (a Ctrl-C would
    // print `^C` where the next line goes); a question's reader turns echo on for itself.
    let quiet = QuietKeys::new();
    let mut stream = agent.stream(prompt);
    let canceller = agent.canceller();
    let mut tick = tokio::time::interval(TICK);
    let mut asking: Option<Asking> = None;
    let mut pressed = 0;
    let mut leave = false;
    let result = loop {
        let can_take = asking.is_none() && asks.is_some();
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(AgentEvent::TurnEnded(answer))) => {
                    console.on(AgentEvent::TurnEnded(answer.clone()));
                    break Ok(*answer);
                }
                Some(Ok(event)) => console.on(event),
                Some(Err(error)) => break Err(error),
                None => break Err(AgentError::Lost("the turn's events ended without its outcome".to_owned())),
            },
            pending = next_ask(&mut asks), if can_take => match pending {
                Some(pending) if pending.is_withdrawn() => {}
                Some(pending) => asking = Some(ask(console, pending)),
                // Nobody can send questions any more.
                None => asks = None,
            },
            happened = asking_event(&mut asking) => {
                let Some(mut current) = asking.take() else { continue };
                match happened {
                    AskEvent::Withdrawn => {
                        current.stop().await;
                        console.question("\n(the question was withdrawn: the call was cancelled)\n");
                        console.resume();
                    }
                    AskEvent::Line(Line::Text(reply)) => {
                        let key = current.pending.request().session_key.clone();
                        match reply_to_question(&reply, key.as_deref(), current.attempts) {
                            Ok(answer) => {
                                answered(current.pending, answer, console);
                                console.resume();
                            }
                            Err(again) => {
                                console.question(&format!("{again}{}", current.prompt));
                                current.attempts += 1;
                                current.read = read_answer(Arc::clone(&current.withdrawn));
                                asking = Some(current);
                            }
                        }
                    }
                    AskEvent::Line(Line::Interrupted | Line::Closed) => {
                        // The terminal's input ended (Ctrl-D): nobody is there to answer.
                        answered(current.pending, ApprovalAnswer::Unavailable, console);
                        console.resume();
                        leave = true;
                        canceller.cancel();
                    }
                }
            },
            () = interrupts.next() => {
                pressed += 1;
                match pressed {
                    1 => {
                        canceller.cancel();
                        console.line("(cancelling: the calls still running are stopped and recorded; Ctrl-C again to leave)");
                    }
                    2 => {
                        leave = true;
                        console.line("(leaving once the calls are recorded; Ctrl-C again to leave now)");
                    }
                    _ => {
                        quiet.restore();
                        eprintln!("\ntoolrail: left at once; `toolrail resume` recovers the calls that were running");
                        std::process::exit(INTERRUPTED);
                    }
                }
            },
            _ = tick.tick() => console.redraw(),
        }
    };
    if let Some(current) = asking.take() {
        current.stop().await;
    }
    console.settle();
    if let Ok(answer) = &result {
        let end = serde_json::to_value(answer.end)
            .ok()
            .and_then(|end| end.as_str().map(str::to_owned))
            .unwrap_or_default();
        if end != "completed" && matches!(console.mode(), Mode::Human { .. }) {
            console.line(&format!("(the turn ended: {end})"));
        }
    }
    TurnOutcome {
        result,
        leave: leave || pressed > 1,
    }
}

/// Answers `pending`; an answer that came too late (the question was withdrawn as it was
/// given) is said, not dropped silently.
fn answered(pending: PendingApproval, answer: ApprovalAnswer, console: &mut Console) {
    if pending.answer(answer).is_err() {
        console.question("(too late: the question was withdrawn before the answer reached it)\n");
    }
}

/// What a line typed after a question means, on try `tries` (from 0): an answer — a
/// readable one, or a rejection once the tries are used up — or what to say before asking
/// again.
pub(crate) fn reply_to_question(
    reply: &str,
    session_key: Option<&str>,
    tries: usize,
) -> Result<ApprovalAnswer, String> {
    match parse_reply(reply, session_key) {
        Some(answer) => Ok(answer),
        None if tries + 1 >= ATTEMPTS => Ok(ApprovalAnswer::Rejected {
            reason: Some("no readable answer on the terminal".to_owned()),
        }),
        None => {
            let choices = if session_key.is_some() {
                "y, s or n"
            } else {
                "y or n"
            };
            Err(format!("  please answer {choices}\n"))
        }
    }
}

/// Shows the question whole on a paused screen and starts reading the reply.
fn ask(console: &mut Console, pending: PendingApproval) -> Asking {
    console.pause();
    let (question, prompt) = approval_question(pending.request());
    console.question(&format!("\n{question}{prompt}"));
    let withdrawn = Arc::new(AtomicBool::new(false));
    let read = read_answer(Arc::clone(&withdrawn));
    Asking {
        pending,
        read,
        withdrawn,
        attempts: 0,
        prompt,
    }
}

async fn next_ask(asks: &mut Option<&mut ApprovalInbox>) -> Option<PendingApproval> {
    match asks {
        Some(inbox) => inbox.next().await,
        None => std::future::pending().await,
    }
}

/// What happened to the question being asked.
enum AskEvent {
    Line(Line),
    Withdrawn,
}

async fn asking_event(asking: &mut Option<Asking>) -> AskEvent {
    match asking {
        Some(current) => tokio::select! {
            read = &mut current.read => AskEvent::Line(read.unwrap_or(Line::Closed)),
            () = current.pending.withdrawn() => AskEvent::Withdrawn,
        },
        None => std::future::pending().await,
    }
}

/// The terminal's echo, off while it lives (when stdin is a terminal).
struct QuietKeys {
    before: Option<rustix::termios::Termios>,
}

impl QuietKeys {
    fn new() -> Self {
        let stdin = std::io::stdin();
        let before = rustix::termios::tcgetattr(&stdin).ok();
        if let Some(before) = &before {
            let mut quiet = before.clone();
            quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
            let _ =
                rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &quiet);
        }
        Self { before }
    }

    /// Puts the terminal back as it was.
    fn restore(&self) {
        if let Some(before) = &self.before {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin(),
                rustix::termios::OptionalActions::Now,
                before,
            );
        }
    }
}

impl Drop for QuietKeys {
    fn drop(&mut self) {
        self.restore();
    }
}
