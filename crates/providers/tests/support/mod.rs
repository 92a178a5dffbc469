//! A fake model server on 127.0.0.1: it answers each connection with the next scripted reply,
//! written in the pieces the script gives (so a test decides where the stream is cut, and
//! how slowly it comes), and records every request with when it arrived. Plain HTTP/1.1 over
//! tokio: one request per connection, each served on a task of its own (a client that gave up
//! on one answer may already be asking again), closed after the answer. It stops, every
//! answer it is writing with it, when dropped; after its script it answers 500.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// One scripted answer.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Written one after another, each flushed, with `pause` between them.
    pub pieces: Vec<Vec<u8>>,
    pub pause: Duration,
    /// When set, the server waits for it after the first piece (a test's gate, not a clock).
    pub gate: Option<Arc<tokio::sync::Notify>>,
    /// How long the server says nothing before the status line (a server that accepted the
    /// request and is silent).
    pub before_head: Duration,
}

impl Reply {
    /// A server-sent event stream, whole.
    pub(crate) fn stream(body: &[u8]) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            pieces: vec![body.to_vec()],
            pause: Duration::ZERO,
            gate: None,
            before_head: Duration::ZERO,
        }
    }

    /// An answer with this status and JSON body.
    pub(crate) fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            pieces: vec![body.as_bytes().to_vec()],
            pause: Duration::ZERO,
            gate: None,
            before_head: Duration::ZERO,
        }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// When the whole request had arrived.
    pub at: Instant,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

pub(crate) struct FakeServer {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub(crate) async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let mut script = script.into_iter();
            // Owned here: dropping the server aborts this task, and with it every answer.
            let mut answers = JoinSet::new();
            // Bounded: a test makes a handful of requests.
            for _ in 0..64 {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let Some(request) = read_request(&mut socket).await else {
                    continue;
                };
                record.lock().push(request);
                let reply = script.next().unwrap_or_else(|| Reply::json(500, "{}"));
                answers.spawn(answer(socket, reply));
            }
            while answers.join_next().await.is_some() {}
        });
        Self { url, seen, task }
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }
}

/// Writes `reply` on `socket`, piece by piece; stops early when the client has gone.
async fn answer(mut socket: tokio::net::TcpStream, reply: Reply) {
    let reason = match reply.status {
        200 => "OK",
        307 => "Temporary Redirect",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    if !reply.before_head.is_zero() {
        tokio::time::sleep(reply.before_head).await;
    }
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nconnection: close\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for (at, piece) in reply.pieces.iter().enumerate() {
        if socket.write_all(piece).await.is_err() || socket.flush().await.is_err() {
            return;
        }
        if let (0, Some(gate)) = (at, &reply.gate) {
            // Bounded: a gate never opened ends the answer.
            if tokio::time::timeout(Duration::from_secs(30), gate.notified())
                .await
                .is_err()
            {
                return;
            }
        }
        if !reply.pause.is_zero() {
            tokio::time::sleep(reply.pause).await;
        }
    }
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        let read = socket.read(&mut buffer).await.ok()?;
        if read == 0 {
            return None;
        }
        data.extend_from_slice(&buffer[..read]);
        if let Some(end) = data.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.lines();
    let path = lines.next()?.split_whitespace().nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_owned(), value.trim().to_owned()))
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let read = socket.read(&mut buffer).await.ok()?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&buffer[..read]);
    }
    Some(Seen {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    })
}

/// A fixture's bytes.
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}
