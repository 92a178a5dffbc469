//! `toolrail acp`: toolrail as an ACP (Agent Client Protocol) agent on stdin and stdout, for
//! editors such as Zed. Each session is an [`Agent`](toolrail_runtime::Agent) of the
//! runtime; approvals are asked through the client (`session/request_permission`).
//!
//! Whose files and terminals: toolrail's own, always. A client may offer its filesystem
//! (`fs/*`) and terminals (`terminal/*`), but the log, the rules, the workspace confinement
//! and the sandbox only hold for toolrail's own tools, so toolrail does not use them.
//!
//! The JSON-RPC subset is written here rather than taken from the `agent-client-protocol`
//! crate: that crate's connection runs on `!Send` futures (a `LocalSet`) over the `futures`
//! I/O traits, while toolrail's agents run on tokio's multi-threaded runtime.

mod diff;
mod permission;
mod session;
mod updates;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::flags::AgentFlags;
use crate::{bad_input, runtime};
use session::Sessions;
use wire::{Incoming, Peer, RpcError, code};

/// The ACP protocol version toolrail speaks.
const PROTOCOL_VERSION: u64 = 1;

/// How long running turns are given to settle once the client has gone.
const SETTLE_ON_EXIT: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub(crate) struct AcpArgs {
    #[command(flatten)]
    flags: AgentFlags,
}

pub(crate) fn run(args: AcpArgs) -> Result<()> {
    if args.flags.approve.is_some() || args.flags.approvals_listen.is_some() {
        return Err(bad_input!(
            "toolrail acp asks the editor for approvals (session/request_permission); --approve and --approvals-listen do not apply (use --allow, --deny or --preset for what runs unasked)"
        ));
    }
    runtime()?.block_on(serve(args.flags))
}

/// Reads the client's messages until stdin closes; then cancels what runs, lets it settle
/// (bounded), and closes the sessions.
async fn serve(flags: AgentFlags) -> Result<()> {
    let (peer, writer) = Peer::on_stdout();
    let mut lines = read_stdin();
    let sessions = Arc::new(Sessions::new(flags, peer.clone()));
    let mut handling = JoinSet::new();
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else { break };
                if line.trim().is_empty() {
                    continue;
                }
                match wire::parse(&line) {
                    Ok(message) => dispatch(message, &peer, &sessions, &mut handling),
                    Err(error) => peer.respond(Value::Null, Err(error)),
                }
            }
            Some(_) = handling.join_next(), if !handling.is_empty() => {}
        }
    }
    // The client left: nothing it asks will be answered, so approvals end Unavailable.
    peer.hang_up();
    sessions.cancel_all();
    let settled = tokio::time::timeout(SETTLE_ON_EXIT, async {
        while handling.join_next().await.is_some() {}
    })
    .await;
    if settled.is_err() {
        eprintln!(
            "toolrail acp: turns still running {SETTLE_ON_EXIT:?} after the client left; stopping them"
        );
        handling.shutdown().await;
    }
    sessions.close_all().await;
    drop(sessions);
    drop(peer);
    // Every peer is gone now: the writer ends once it wrote what was sent.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

/// Stdin's lines, read on a thread of their own (a blocking read cannot be cancelled; the
/// thread ends with stdin).
fn read_stdin() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (send, lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// Handles one message: answers to toolrail's requests and cancels at once, requests on
/// tasks of their own (a prompt runs for long, and its approvals' answers must get
/// through meanwhile).
fn dispatch(message: Incoming, peer: &Peer, sessions: &Arc<Sessions>, handling: &mut JoinSet<()>) {
    match message {
        Incoming::Response { id, outcome } => peer.settle(&id, outcome),
        Incoming::Notification { method, params } => {
            if method == "session/cancel" {
                sessions.cancel(&params);
            }
            // Other notifications (extensions) need no answer and get none.
        }
        Incoming::Request { id, method, params } => {
            let peer = peer.clone();
            let sessions = Arc::clone(sessions);
            handling.spawn(async move {
                let outcome = answer(&method, &params, &sessions).await;
                peer.respond(id, outcome);
            });
        }
    }
}

/// The answer to one request.
async fn answer(method: &str, params: &Value, sessions: &Sessions) -> Result<Value, RpcError> {
    match method {
        "initialize" => Ok(initialized(params)),
        // No authentication: the model's key is toolrail's own configuration.
        "authenticate" => Ok(json!({})),
        "session/new" => sessions.create(params).await,
        "session/load" => sessions.load(params).await,
        "session/prompt" => sessions.prompt(params).await,
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("toolrail acp does not implement {other}"),
        )),
    }
}

/// The answer to `initialize`: toolrail's version of the protocol and what it supports.
fn initialized(params: &Value) -> Value {
    let capabilities = &params["clientCapabilities"];
    let offered_fs = capabilities["fs"]["readTextFile"].as_bool() == Some(true)
        || capabilities["fs"]["writeTextFile"].as_bool() == Some(true);
    if offered_fs || capabilities["terminal"].as_bool() == Some(true) {
        eprintln!(
            "toolrail acp: the editor offers its files or terminals; toolrail uses its own confined tools and sandbox, which its log and rules cover"
        );
    }
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
            "mcpCapabilities": {"http": false, "sse": false},
        },
        "authMethods": [],
        "agentInfo": {"name": "toolrail", "version": env!("CARGO_PKG_VERSION")},
    })
}
