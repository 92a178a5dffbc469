//! One turn on the console: the agent's events shown as they come, each approval asked
//! whole on a paused screen, Ctrl-C cancelling the batch (the calls still get honest
//! outcomes and the conversation goes on) and a second Ctrl-C leaving once the turn has
//! settled.

use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use toolrail_interaction::{ApprovalInbox, PendingApproval, approval_question, parse_reply};
use toolrail_runtime::{Agent, AgentError, AgentEvent, Answer};
use toolrail_tools_core::ApprovalAnswer;

use super::{Console, Keyboard, Line, Mode};

/// How often the live lines are redrawn.
const TICK: Duration = Duration::from_millis(200);
/// Unreadable replies to one question before it counts as a rejection.
const ATTEMPTS: usize = 3;

/// Ctrl-C while a turn runs (the terminal's own handling is off for the process: the first
/// press cancels, it does not kill).
pub struct Interrupts {
    signal: Option<Signal>,
}

impl Interrupts {
    pub fn catch() -> Self {
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
pub struct TurnOutcome {
    pub result: Result<Answer, AgentError>,
    /// The person asked to leave (a second Ctrl-C, or the input closed mid-question).
    pub leave: bool,
}

/// The approval being asked: its request, and the read of the reply.
struct Asking {
    pending: PendingApproval,
    read: tokio::task::JoinHandle<Line>,
    attempts: usize,
    prompt: String,
}

/// Runs `prompt` as one turn of `agent` on `console`; approvals arrive in `asks` and are
/// answered from `keyboard` (both or neither).
pub async fn drive(
    agent: &Agent,
    prompt: String,
    console: &mut Console,
    mut asks: Option<(&mut ApprovalInbox, &mut Keyboard)>,
    interrupts: &mut Interrupts,
) -> TurnOutcome {
    // Keys typed while the turn runs are not echoed over the live lines (a Ctrl-C would
    // print `^C` where the next line goes); questions are read by the line editor, which
    // shows what is typed itself.
    let _quiet = QuietKeys::new();
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
            pending = next_ask(&mut asks), if can_take => {
                if let (Some(pending), Some((_, keyboard))) = (pending, asks.as_mut()) {
                    asking = Some(ask(console, keyboard, pending));
                }
            },
            happened = asking_event(&mut asking) => {
                let Some(mut current) = asking.take() else { continue };
                let line = match happened {
                    AskEvent::Withdrawn => {
                        if let Some((_, keyboard)) = asks.as_mut() {
                            keyboard.keep(current.read);
                        }
                        println!("\n(the question was withdrawn: the call was cancelled)");
                        console.resume();
                        continue;
                    }
                    AskEvent::Line(line) => line,
                };
                match line {
                    Line::Text(reply) => {
                        match parse_reply(&reply, current.pending.request().session_key.as_deref()) {
                            Some(answer) => {
                                let _ = current.pending.answer(answer);
                                console.resume();
                            }
                            None if current.attempts + 1 >= ATTEMPTS => {
                                let _ = current.pending.answer(ApprovalAnswer::Rejected {
                                    reason: Some("no readable answer on the terminal".to_owned()),
                                });
                                console.resume();
                            }
                            None => {
                                println!("  please answer y, s or n");
                                if let Some((_, keyboard)) = asks.as_mut() {
                                    current.attempts += 1;
                                    current.read = keyboard.read(current.prompt.clone());
                                    asking = Some(current);
                                }
                            }
                        }
                    }
                    Line::Interrupted => {
                        // Ctrl-C at the question: the question and the batch are cancelled.
                        let _ = current.pending.answer(ApprovalAnswer::Cancelled);
                        console.resume();
                        pressed += 1;
                        canceller.cancel();
                        console.line("(cancelling: the calls still running are stopped and recorded; Ctrl-C again to leave)");
                    }
                    Line::Closed => {
                        let _ = current.pending.answer(ApprovalAnswer::Unavailable);
                        console.resume();
                        leave = true;
                        canceller.cancel();
                    }
                }
            },
            () = interrupts.next() => {
                pressed += 1;
                if pressed == 1 {
                    canceller.cancel();
                    console.line("(cancelling: the calls still running are stopped and recorded; Ctrl-C again to leave)");
                } else {
                    leave = true;
                    console.line("(leaving once the calls are recorded)");
                }
            },
            _ = tick.tick() => console.redraw(),
        }
    };
    if let Some(current) = asking.take()
        && let Some((_, keyboard)) = asks.as_mut()
    {
        keyboard.keep(current.read);
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

/// Shows the question whole on a paused screen and starts reading the reply.
fn ask(console: &mut Console, keyboard: &mut Keyboard, pending: PendingApproval) -> Asking {
    console.pause();
    let (question, prompt) = approval_question(pending.request());
    println!();
    print!("{question}");
    let read = keyboard.read(prompt.clone());
    Asking {
        pending,
        read,
        attempts: 0,
        prompt,
    }
}

async fn next_ask(
    asks: &mut Option<(&mut ApprovalInbox, &mut Keyboard)>,
) -> Option<PendingApproval> {
    match asks {
        Some((inbox, _)) => inbox.next().await,
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
}

impl Drop for QuietKeys {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin(),
                rustix::termios::OptionalActions::Now,
                before,
            );
        }
    }
}
