//! Approvals answered over the network: a small JSON-over-HTTP endpoint on a loopback
//! address, for a person away from the terminal (a phone on the same machine's tunnel, a
//! webhook relay, a script). `GET /pending` lists what waits; `POST /answer` answers one.
//! Every request must carry the bearer token made at start (printed once by whoever starts
//! it); a wrong or missing token is `401` and changes nothing. An answer for an approval
//! that is unknown, already decided or withdrawn is `409` and changes nothing. Closed by
//! default like every service here: no answer is never a yes (a deadline is `Expired`, a
//! cancelled batch `Cancelled`, an endpoint gone `Unavailable`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolrail_tools_core::ApprovalAnswer;

use super::channel::{ApprovalInbox, ChannelApprovals, PendingApproval};

/// The largest request the endpoint reads (head and body together).
const MAX_REQUEST: usize = 64 * 1024;
/// How long a client may take to send its request.
const READ_LIMIT: Duration = Duration::from_secs(5);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The address is not a loopback one: approvals are answered from this machine only.
    #[error(
        "{0} is not a loopback address: the approvals endpoint listens on 127.0.0.1 or ::1 only (put a tunnel in front to reach it from elsewhere)"
    )]
    NotLoopback(SocketAddr),
    /// Binding failed (the port is taken, say).
    #[error("the approvals endpoint could not listen on {address}: {source}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No token could be made (no randomness from the system).
    #[error("no bearer token could be made: {0}")]
    Token(std::io::Error),
}

/// A running endpoint: where it listens and the token it wants. Dropping it stops it;
/// what waited is then answered `Unavailable` by the service.
#[derive(Debug)]
pub struct ApprovalEndpoint {
    address: SocketAddr,
    token: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ApprovalEndpoint {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ApprovalEndpoint {
    /// Starts an endpoint on `address` (a loopback one; port 0 picks a free port) and
    /// returns the approval service whose requests it serves. `deadline` bounds each wait.
    ///
    /// ```
    /// use toolrail_interaction::ApprovalEndpoint;
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// let (service, endpoint) = ApprovalEndpoint::start("127.0.0.1:0".parse()?, None).await?;
    /// assert!(endpoint.address().ip().is_loopback());
    /// assert_eq!(endpoint.token().len(), 64);
    /// // Give `service` to the agent (`AgentBuilder::approvals`); answer with
    /// // `curl -H "Authorization: Bearer <token>" http://<address>/pending`.
    /// # drop(service);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn start(
        address: SocketAddr,
        deadline: Option<Duration>,
    ) -> Result<(ChannelApprovals, Self), EndpointError> {
        if !address.ip().is_loopback() {
            return Err(EndpointError::NotLoopback(address));
        }
        let token = new_token().map_err(EndpointError::Token)?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| EndpointError::Bind { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| EndpointError::Bind { address, source })?;
        let (service, inbox) = ChannelApprovals::new(deadline);
        let server = tokio::spawn(serve(listener, inbox, token.clone()));
        Ok((
            service,
            Self {
                address,
                token,
                server,
            },
        ))
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The bearer token every request must carry (`Authorization: Bearer <token>`).
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// 32 random bytes from the system, as hex.
fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// What the server keeps: requests waiting, and the ids already decided.
#[derive(Default)]
struct Book {
    waiting: BTreeMap<u64, PendingApproval>,
    decided: BTreeSet<u64>,
}

async fn serve(listener: TcpListener, mut inbox: ApprovalInbox, token: String) {
    let mut book = Book::default();
    let mut inbox_open = true;
    loop {
        tokio::select! {
            next = inbox.next(), if inbox_open => match next {
                Some(pending) => {
                    book.waiting.insert(pending.id(), pending);
                }
                None => inbox_open = false,
            },
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    // One at a time: the book is this task's alone, and a client has a
                    // bounded time to send its request.
                    let _ = tokio::time::timeout(READ_LIMIT, answer(stream, &mut book, &token)).await;
                }
            }
        }
    }
}

/// One HTTP exchange.
async fn answer(mut stream: TcpStream, book: &mut Book, token: &str) {
    let (status, body) = match read_request(&mut stream).await {
        Ok(request) => respond(&request, book, token),
        Err(why) => (400, json!({"error": why})),
    };
    let body = body.to_string();
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{}\r\n",
        body.len(),
        if status == 401 {
            "www-authenticate: Bearer\r\n"
        } else {
            ""
        }
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A request as the endpoint reads it.
struct Request {
    method: String,
    path: String,
    bearer: Option<String>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut TcpStream) -> Result<Request, String> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        if bytes.len() > MAX_REQUEST {
            return Err("the request's head is too long".to_owned());
        }
        let read = stream
            .read(&mut buffer)
            .await
            .map_err(|error| error.to_string())?;
        if read == 0 {
            return Err("the request ended before its head did".to_owned());
        }
        bytes.extend_from_slice(buffer.get(..read).unwrap_or_default());
    };
    let head = String::from_utf8_lossy(bytes.get(..head_end).unwrap_or_default()).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    let mut length = 0usize;
    let mut bearer = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value
                .parse()
                .map_err(|_| format!("content-length `{value}` is not a number"))?;
        } else if name.eq_ignore_ascii_case("authorization") {
            bearer = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .map(|token| token.trim().to_owned());
        }
    }
    if head_end + 4 + length > MAX_REQUEST {
        return Err(format!("the request is over {MAX_REQUEST} bytes"));
    }
    let mut body = bytes.get(head_end + 4..).unwrap_or_default().to_vec();
    while body.len() < length {
        let read = stream
            .read(&mut buffer)
            .await
            .map_err(|error| error.to_string())?;
        if read == 0 {
            return Err("the request ended before its body did".to_owned());
        }
        body.extend_from_slice(buffer.get(..read).unwrap_or_default());
    }
    body.truncate(length);
    Ok(Request {
        method,
        path,
        bearer,
        body,
    })
}

/// Whether `given` is `token`, comparing every byte whatever differs first.
fn same_token(given: Option<&str>, token: &str) -> bool {
    let Some(given) = given else {
        return false;
    };
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

/// What an answer says.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    id: u64,
    answer: AnswerKind,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum AnswerKind {
    AllowOnce,
    AllowForSession,
    Reject,
}

fn respond(request: &Request, book: &mut Book, token: &str) -> (u16, Value) {
    if !same_token(request.bearer.as_deref(), token) {
        return (
            401,
            json!({"error": "a missing or wrong bearer token: send `Authorization: Bearer <token>` with the token printed when the endpoint started"}),
        );
    }
    // What the asker stopped waiting for is gone.
    book.waiting.retain(|_, pending| !pending.is_withdrawn());
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/pending") => {
            let pending: Vec<Value> = book.waiting.values().map(describe).collect();
            (200, json!({ "pending": pending }))
        }
        ("POST", "/answer") => answer_one(&request.body, book),
        (_, "/pending" | "/answer") => (405, json!({"error": "use GET /pending and POST /answer"})),
        _ => (
            404,
            json!({"error": "not found: the endpoint answers GET /pending and POST /answer"}),
        ),
    }
}

fn describe(pending: &PendingApproval) -> Value {
    let request = pending.request();
    json!({
        "id": pending.id(),
        "call_id": request.identity.call_id.as_str(),
        "tool": request.identity.name,
        "kind": request.tool_kind,
        "subject": request.subject,
        "reason": request.reason,
        "session_key": request.session_key,
        "arguments": request.arguments.as_ref(),
        "preview": request.preview,
    })
}

fn answer_one(body: &[u8], book: &mut Book) -> (u16, Value) {
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(error) => {
            return (
                400,
                json!({"error": format!("the answer is not {{\"id\": N, \"answer\": \"allow_once\" | \"allow_for_session\" | \"reject\", \"reason\"?: \"…\"}}: {error}")}),
            );
        }
    };
    let Some(pending) = book.waiting.remove(&answer.id) else {
        let why = if book.decided.contains(&answer.id) {
            "it was already decided"
        } else {
            "no approval waits under this id (GET /pending lists those that do)"
        };
        return (
            409,
            json!({"error": format!("approval {}: {why}; nothing changed", answer.id)}),
        );
    };
    let given = match answer.answer {
        AnswerKind::AllowOnce => ApprovalAnswer::AllowedOnce,
        // The key the request offers; without one the answer counts once.
        AnswerKind::AllowForSession => match &pending.request().session_key {
            Some(key) => ApprovalAnswer::AllowedForSession { key: key.clone() },
            None => ApprovalAnswer::AllowedOnce,
        },
        AnswerKind::Reject => ApprovalAnswer::Rejected {
            reason: answer.reason,
        },
    };
    let id = pending.id();
    match pending.answer(given) {
        Ok(()) => {
            book.decided.insert(id);
            (200, json!({"id": id, "decided": true}))
        }
        Err(_) => {
            book.decided.insert(id);
            (
                409,
                json!({"error": format!("approval {id}: the call stopped waiting (its batch was cancelled or the wait expired); nothing changed")}),
            )
        }
    }
}
