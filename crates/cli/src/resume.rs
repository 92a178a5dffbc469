//! `toolrail resume SESSION`: reopens a session (by the path of its log, or its id in a
//! store), recovers it and says what was repaired, then goes on with the conversation —
//! interactively, or for one turn with `--prompt`. A call that was waiting for an approval
//! when the session stopped is asked again with the approvals chosen here (`--approve`,
//! `--approvals-listen`), or recorded expired past its deadline; never allowed unasked.

use std::future::Future;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use toolrail_interaction::{ApprovalInbox, PendingApproval, approval_question};
use toolrail_runtime::SessionConfig;
use toolrail_session_log::event::ApprovalAnswer;

use crate::chat::{Conversation, human_mode, usage_line};
use crate::console::{Console, Line, read_answer, reply_to_question};
use crate::flags::{AgentFlags, ApproveArg, prompt_text};
use crate::places::locate;
use crate::session::replay_text;
use crate::{bad_input, runtime};

#[derive(clap::Args)]
pub(crate) struct ResumeArgs {
    /// The session: its id (`toolrail sessions` lists them) or the path of its `.jsonl` log.
    session: String,
    /// The store it is in (default: the current folder's `.toolrail/sessions`).
    #[arg(long)]
    store: Option<String>,
    /// Go on with one turn and leave, instead of a chat.
    #[arg(long)]
    prompt: Option<String>,
    /// The turn's message from a file (`-`: stdin).
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    /// Who answers a call that asks (see `toolrail chat --help`), a call left waiting for
    /// its approval included.
    #[arg(long, value_enum)]
    approve: Option<ApproveArg>,
    /// Answer approvals over HTTP on this loopback address (see `toolrail chat --help`).
    #[arg(long = "approvals-listen", value_name = "ADDR")]
    approvals_listen: Option<std::net::SocketAddr>,
}

pub(crate) fn run(args: ResumeArgs) -> Result<()> {
    let located = locate(&args.session, args.store.as_deref())?;
    let mut config = SessionConfig::recorded_in(&located.store, &located.id)
        .map_err(|error| bad_input!("{error}"))?;
    let prompt = prompt_text(args.prompt.as_deref(), args.prompt_file.as_deref())?;
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let flags = AgentFlags {
        approve: args.approve,
        approvals_listen: args.approvals_listen,
        ..AgentFlags::default()
    };
    let approve = flags.approvals(terminal, &mut config)?;
    // What the conversation was, in short, before it goes on.
    let (text, _) = replay_text(
        &located.events,
        &toolrail_presenters::Presenters::new(),
        false,
    );
    let tail: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.starts_with("user:")
                || line.starts_with("assistant:")
                || line.starts_with("(turn ended")
        })
        .collect();
    println!("resuming {} from {}", located.id, located.store.url());
    for line in tail.iter().skip(tail.len().saturating_sub(6)) {
        println!("  {line}");
    }
    runtime()?.block_on(async {
        let mut conversation = Conversation::start(
            config,
            approve,
            Console::new(human_mode()),
            Some((&located.store, &located.id)),
        )
        .await?;
        let ended = match prompt {
            Some(prompt) => {
                let outcome = conversation.turn(prompt).await;
                println!("{}", usage_line(&conversation.usage));
                outcome.result.map(|_| ()).map_err(anyhow::Error::new)
            }
            None => {
                conversation.greet();
                conversation.chat().await
            }
        };
        conversation.agent.shutdown().await;
        ended
    })
}

/// Runs `resuming` (a session being reopened), answering on the terminal the questions it
/// asks meanwhile: a call a restart left waiting for its approval is asked again while the
/// session reopens, before the console is up. With no inbox (approvals answered by a
/// service: `--approve never`, `--approvals-listen`) it only waits.
pub(crate) async fn answering<T>(
    resuming: impl Future<Output = T>,
    inbox: Option<&mut ApprovalInbox>,
) -> T {
    let Some(inbox) = inbox else {
        return resuming.await;
    };
    let mut resuming = std::pin::pin!(resuming);
    loop {
        tokio::select! {
            done = &mut resuming => return done,
            pending = inbox.next() => match pending {
                Some(pending) if pending.is_withdrawn() => {}
                Some(pending) => ask_on_terminal(pending).await,
                None => return resuming.await,
            },
        }
    }
}

/// Asks one question on the terminal (three tries at a readable answer, as a turn's console
/// does), read as the console reads a question's answer: keys typed before it are dropped,
/// and a withdrawn question stops its read (it would take the next line typed). The end of
/// input is no one to answer, never a yes.
async fn ask_on_terminal(pending: PendingApproval) {
    let (question, prompt) = approval_question(pending.request());
    let key = pending.request().session_key.clone();
    print!("\n{question}{prompt}");
    let _ = std::io::stdout().flush();
    let withdrawn = Arc::new(AtomicBool::new(false));
    let mut tries = 0;
    let answer = loop {
        let mut read = read_answer(Arc::clone(&withdrawn));
        let line = tokio::select! {
            line = &mut read => line.unwrap_or(Line::Closed),
            () = pending.withdrawn() => {
                // The question's deadline passed while it was asked: the pipeline recorded
                // it. The read gives up within its watch period.
                withdrawn.store(true, Ordering::Release);
                let _ = read.await;
                println!("\n(the question expired unanswered: the call was not run)");
                return;
            }
        };
        let Line::Text(line) = line else {
            break ApprovalAnswer::Unavailable;
        };
        match reply_to_question(&line, key.as_deref(), tries) {
            Ok(answer) => break answer,
            Err(again) => {
                print!("{again}{prompt}");
                let _ = std::io::stdout().flush();
                tries += 1;
            }
        }
    };
    if pending.answer(answer).is_err() {
        println!("(too late: the question was withdrawn before the answer reached it)");
    }
}
