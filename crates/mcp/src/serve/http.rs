//! Streamable HTTP on a loopback address: `POST /mcp` (and the protocol's `GET`/`DELETE`
//! there), served by rmcp's streamable HTTP service over hyper. Loopback only: the server
//! has no authentication of its own, and a tool call here can run commands.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

use super::McpServe;

/// Why the HTTP server could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpServeError {
    /// Only loopback addresses are served.
    #[error(
        "{0} is not a loopback address; `mcp serve --listen` serves 127.0.0.1 or [::1] only (it has no authentication)"
    )]
    NotLoopback(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {error}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// What the system said.
        error: std::io::Error,
    },
}

/// Binds `address` (loopback only) and serves `server` at `/mcp` until `stop` fires.
/// `bound` hears the address actually bound (port 0 picks one) before the first accept.
///
/// ```no_run
/// # async fn demo(server: toolrail_mcp::serve::McpServe) -> Result<(), Box<dyn std::error::Error>> {
/// let stop = tokio_util::sync::CancellationToken::new();
/// toolrail_mcp::serve::serve_http(server, "127.0.0.1:8765".parse()?, stop, |address| {
///     eprintln!("serving MCP at http://{address}/mcp");
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn serve_http(
    server: McpServe,
    address: SocketAddr,
    stop: CancellationToken,
    bound: impl FnOnce(SocketAddr),
) -> Result<(), HttpServeError> {
    if !address.ip().is_loopback() {
        return Err(HttpServeError::NotLoopback(address));
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| HttpServeError::Bind { address, error })?;
    let local = listener
        .local_addr()
        .map_err(|error| HttpServeError::Bind { address, error })?;
    bound(local);
    // The Host header must name loopback (rmcp's default, against DNS rebinding), and a
    // browser's Origin, when one is sent, must be this server's own.
    let port = local.port();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)))
        .with_allowed_origins([
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ]);
    let stopping = server.clone();
    let service: Arc<StreamableHttpService<McpServe, LocalSessionManager>> =
        Arc::new(StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        ));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // A failed accept (too many open files, a reset) drops that one connection.
            continue;
        };
        let service = Arc::clone(&service);
        let stop = stop.clone();
        connections.spawn(async move {
            let handler = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let service = Arc::clone(&service);
                async move {
                    if request.uri().path() != "/mcp" {
                        return Ok::<_, Infallible>(not_found());
                    }
                    Ok(service
                        .handle(request)
                        .await
                        .map(http_body_util::Either::Left))
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), handler);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stop.cancelled() => connection.as_mut().graceful_shutdown(),
            }
        });
        // Finished connections are reaped as new ones come.
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
    stopping.settle().await;
    Ok(())
}

type Body = http_body_util::Either<
    http_body_util::combinators::BoxBody<bytes::Bytes, Infallible>,
    http_body_util::Full<bytes::Bytes>,
>;

fn not_found() -> hyper::Response<Body> {
    let mut response = hyper::Response::new(http_body_util::Either::Right(
        http_body_util::Full::new(bytes::Bytes::from_static(b"toolrail serves MCP at /mcp\n")),
    ));
    *response.status_mut() = hyper::StatusCode::NOT_FOUND;
    response
}
