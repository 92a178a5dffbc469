//! `toolrail mcp serve`: the workspace's tools served to one MCP client on stdio, or to any
//! on `http://ADDR/mcp` (loopback only). One session holds every call: recorded, judged by
//! the rules, asked through the client (MCP elicitation) where a rule says ask, confined,
//! logged; `toolrail replay` reads it like any other. stdout is the protocol's on stdio:
//! everything for people goes to stderr.

use std::sync::Arc;

use anyhow::Result;
use toolrail_interaction::{ApprovalEndpoint, ChannelApprovals};
use toolrail_mcp::serve::{ElicitedApprovals, McpServe, serve_http};
use toolrail_runtime::serve::{AgentHost, NoModel};
use toolrail_runtime::telemetry::Telemetry;
use toolrail_runtime::{Agent, SessionConfig};
use toolrail_tools_core::CancellationToken;

use crate::chat::{close_telemetry, open_telemetry};
use crate::flags::{Approve, ApproveArg};
use crate::mcp::ServeArgs;
use crate::places::{new_session_id, session_command};
use crate::run::build_error;
use crate::{bad_input, runtime};

/// Who answers the calls that ask.
enum Answerer {
    /// The MCP client, through elicitation; a client that cannot be asked is no yes.
    Client(Arc<ElicitedApprovals>),
    /// Not the client: refused by rule (`--approve never|rules-only`) or over HTTP.
    Other(Approve),
}

pub(crate) fn run(args: ServeArgs) -> Result<()> {
    let mut config = args.flags.config_without_model()?;
    let answerer = match (args.flags.approve, args.flags.approvals_listen) {
        (None | Some(ApproveArg::Ask), None) => Answerer::Client(ElicitedApprovals::shared()),
        // The same choices as `run` without a terminal; `ask` means the client here.
        _ => Answerer::Other(args.flags.approvals(false, &mut config)?),
    };
    let telemetry = open_telemetry(&config)?;
    let runtime = runtime()?;
    let served = runtime.block_on(serve(args.listen, config, answerer, telemetry.as_ref()));
    // Not waited for: a read of stdin still blocked in its pool thread (serving ended on a
    // signal, with stdin open) would hold the process forever.
    runtime.shutdown_background();
    // After the runtime: the exporter's last send blocks.
    if let Some(telemetry) = &telemetry {
        close_telemetry(telemetry);
    }
    served
}

async fn serve(
    listen: Option<std::net::SocketAddr>,
    config: SessionConfig,
    answerer: Answerer,
    telemetry: Option<&Telemetry>,
) -> Result<()> {
    let mut builder = Agent::builder()
        .config(config.clone())
        .session_id(new_session_id());
    if let Some(telemetry) = telemetry {
        builder = builder.telemetry(telemetry.clone());
    }
    if config.model.is_none() {
        builder = builder.model_client(Arc::new(NoModel));
    }
    let mut endpoint = None;
    let (builder, asking) = match answerer {
        Answerer::Client(approvals) => (builder.approvals(approvals.clone()), Some(approvals)),
        Answerer::Other(Approve::Refuse(refuse)) => (builder.approvals(refuse), None),
        Answerer::Other(Approve::Listen(address)) => {
            let (service, started): (ChannelApprovals, ApprovalEndpoint) =
                ApprovalEndpoint::start(address, None)
                    .await
                    .map_err(|error| bad_input!("{error}"))?;
            eprintln!(
                "toolrail: approvals are answered at http://{} with `Authorization: Bearer {}`",
                started.address(),
                started.token()
            );
            endpoint = Some(started);
            (builder.approvals(Arc::new(service)), None)
        }
        Answerer::Other(Approve::Ask) => {
            return Err(bad_input!(
                "mcp serve has no terminal to ask on: approvals go to the MCP client, or choose --approvals-listen, --approve never or --approve rules-only"
            ));
        }
    };
    let agent = builder.build().await.map_err(build_error)?;
    let replay = session_command("replay", agent.store(), agent.session_id());
    let session = agent.session_id().clone();
    let session_id = session.clone();
    let tools = agent.tools().snapshot().offered().count();
    let host = Arc::new(AgentHost::new(agent));
    let mut server = McpServe::new(Arc::clone(&host) as Arc<dyn toolrail_mcp::serve::ToolHost>);
    if let Some(approvals) = asking {
        server = server.asking_through(approvals);
    }
    // A client that started the server may end it with SIGTERM (after closing its stdin):
    // serving ends as if it left, so calls commit, spans go out, and servers stop in turn.
    let stop = stop_on_signals();
    let served = match listen {
        None => {
            eprintln!("toolrail: serving {tools} tools over MCP on stdio (session {session})");
            server
                .serve_stdio_until(stop)
                .await
                .map_err(anyhow::Error::new)
        }
        Some(address) => {
            serve_http(server, address, stop, |bound| {
                eprintln!(
                    "toolrail: serving {tools} tools over MCP at http://{bound}/mcp (session {session}); Ctrl-C ends it"
                );
            })
            .await
            .map_err(|error| bad_input!("{error}"))
        }
    };
    drop(endpoint);
    // The client left, and may follow with SIGTERM: the spans go out first, then the
    // session's own MCP servers are stopped (which may take their grace).
    if let Some(telemetry) = telemetry.cloned() {
        let _ = tokio::task::spawn_blocking(move || telemetry.flush()).await;
    }
    host.agent().shutdown().await;
    eprintln!("toolrail: the served calls are in session {session_id}; see them with `{replay}`");
    served
}

/// A token that fires on SIGTERM or SIGINT (Ctrl-C). Without a handler for one, its
/// default action ends the process at once, and nothing after serving would run.
fn stop_on_signals() -> CancellationToken {
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    term.recv().await;
                }
                // No handler could be installed: SIGTERM keeps its default action.
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
        on_signal.cancel();
    });
    stop
}
