//! JSON-RPC 2.0 as ACP frames it: one JSON object per line on stdin and stdout. Stdout is
//! the protocol channel, so one writer thread owns it and every message goes through
//! [`Peer`]; requests toolrail sends (`session/request_permission`) wait here for their
//! answer, which the reading loop hands back with [`Peer::settle`].

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// JSON-RPC's own error codes, and ACP's "not found".
pub(crate) mod code {
    pub(crate) const PARSE_ERROR: i64 = -32_700;
    pub(crate) const INVALID_REQUEST: i64 = -32_600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32_601;
    pub(crate) const INVALID_PARAMS: i64 = -32_602;
    pub(crate) const INTERNAL_ERROR: i64 = -32_603;
    /// ACP: the session (or other resource) named is not known.
    pub(crate) const RESOURCE_NOT_FOUND: i64 = -32_002;
}

/// An error answer: its code and a message that says what failed and what to do.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A failure of toolrail's own, as said to the client: bad input (the chain holds a
    /// [`crate::BadInput`]) is the client's invalid params, anything else an internal error.
    pub(crate) fn from_anyhow(error: &anyhow::Error) -> Self {
        let code = if error.chain().any(|cause| cause.is::<crate::BadInput>()) {
            code::INVALID_PARAMS
        } else {
            code::INTERNAL_ERROR
        };
        Self::new(code, crate::said_once(error))
    }
}

/// One message read from the client.
#[derive(Debug, PartialEq)]
pub(crate) enum Incoming {
    /// A request: it must be answered under `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: no answer.
    Notification { method: String, params: Value },
    /// The answer to a request toolrail sent.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
}

/// Reads one line as a JSON-RPC message; what cannot be one is the error to answer with
/// (under `id: null`).
pub(crate) fn parse(line: &str) -> Result<Incoming, RpcError> {
    let message: Value = serde_json::from_str(line)
        .map_err(|error| RpcError::new(code::PARSE_ERROR, format!("not JSON: {error}")))?;
    let Some(object) = message.as_object() else {
        return Err(RpcError::new(
            code::INVALID_REQUEST,
            "a message is one JSON object (ACP sends no batches)",
        ));
    };
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    match (
        object.get("method").and_then(Value::as_str),
        object.get("id"),
    ) {
        (Some(method), Some(id)) => Ok(Incoming::Request {
            id: id.clone(),
            method: method.to_owned(),
            params,
        }),
        (Some(method), None) => Ok(Incoming::Notification {
            method: method.to_owned(),
            params,
        }),
        (None, Some(id)) => {
            let outcome = match (object.get("result"), object.get("error")) {
                (_, Some(error)) => Err(RpcError::new(
                    error
                        .get("code")
                        .and_then(Value::as_i64)
                        .unwrap_or(code::INTERNAL_ERROR),
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no message"),
                )),
                (Some(result), None) => Ok(result.clone()),
                (None, None) => Ok(Value::Null),
            };
            Ok(Incoming::Response {
                id: id.clone(),
                outcome,
            })
        }
        (None, None) => Err(RpcError::new(
            code::INVALID_REQUEST,
            "a message needs a `method` or an `id`",
        )),
    }
}

/// Why a request toolrail sent has no result.
#[derive(Debug, PartialEq)]
pub(crate) enum RequestFailed {
    /// The client answered with an error.
    Refused(RpcError),
    /// The client went away (stdin closed) before answering.
    Gone,
}

type Waiting = HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>;

/// The sending half of the connection: notifications, answers, and requests awaiting
/// theirs. Cheap to clone; every clone writes through the one writer thread.
#[derive(Clone)]
pub(crate) struct Peer {
    out: mpsc::UnboundedSender<String>,
    waiting: Arc<Mutex<Waiting>>,
    next_id: Arc<AtomicU64>,
}

impl Peer {
    /// A peer writing to stdout, and the writer thread (joined once every peer is dropped:
    /// it writes what was sent before it ends).
    pub(crate) fn on_stdout() -> (Self, std::thread::JoinHandle<()>) {
        let (out, mut lines) = mpsc::unbounded_channel::<String>();
        let writer = std::thread::spawn(move || {
            let stdout = std::io::stdout();
            while let Some(line) = lines.blocking_recv() {
                let mut locked = stdout.lock();
                let written = locked
                    .write_all(line.as_bytes())
                    .and_then(|()| locked.write_all(b"\n"))
                    .and_then(|()| locked.flush());
                if written.is_err() {
                    // The client closed our stdout: nothing more can be said to it.
                    break;
                }
            }
        });
        (Self::over(out), writer)
    }

    fn over(out: mpsc::UnboundedSender<String>) -> Self {
        Self {
            out,
            waiting: Arc::new(Mutex::new(HashMap::new())),
            next_id: Arc::new(AtomicU64::new(0)),
        }
    }

    fn send(&self, message: &Value) {
        // A writer that stopped (the client left) drops what is said after.
        let _ = self.out.send(message.to_string());
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Answers request `id`.
    pub(crate) fn respond(&self, id: Value, outcome: Result<Value, RpcError>) {
        let message = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": error.code, "message": error.message},
            }),
        };
        self.send(&message);
    }

    /// Sends a request and waits for its answer. Dropping the future forgets the request
    /// (a late answer is then ignored).
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, RequestFailed> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        self.waiting.lock().insert(id, answer);
        let _forget = Forget {
            waiting: &self.waiting,
            id,
        };
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        match answered.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(RequestFailed::Refused(error)),
            Err(_) => Err(RequestFailed::Gone),
        }
    }

    /// Hands an answer the client sent to the request waiting for it; an answer to nothing
    /// toolrail asks (or asked and forgot) is dropped.
    pub(crate) fn settle(&self, id: &Value, outcome: Result<Value, RpcError>) {
        let Some(id) = id.as_u64() else { return };
        let waiting = self.waiting.lock().remove(&id);
        if let Some(waiting) = waiting {
            let _ = waiting.send(outcome);
        }
    }

    /// The client went away: every request waiting ends [`RequestFailed::Gone`].
    pub(crate) fn hang_up(&self) {
        self.waiting.lock().clear();
    }
}

/// Removes a request from those waiting when its future ends, answered or not.
struct Forget<'a> {
    waiting: &'a Mutex<Waiting>,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.waiting.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lines_are_read_as_requests_notifications_and_answers() {
        let read: Vec<_> = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
            r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no"}}"#,
            "[1]",
            "{",
        ]
        .into_iter()
        .map(parse)
        .collect();
        assert_eq!(
            read,
            [
                Ok(Incoming::Request {
                    id: json!(1),
                    method: "initialize".to_owned(),
                    params: json!({"protocolVersion": 1}),
                }),
                Ok(Incoming::Notification {
                    method: "session/cancel".to_owned(),
                    params: json!({"sessionId": "s"}),
                }),
                Ok(Incoming::Response {
                    id: json!(0),
                    outcome: Ok(json!({"outcome": {"outcome": "cancelled"}})),
                }),
                Ok(Incoming::Response {
                    id: json!(2),
                    outcome: Err(RpcError::new(code::METHOD_NOT_FOUND, "no")),
                }),
                Err(RpcError::new(
                    code::INVALID_REQUEST,
                    "a message is one JSON object (ACP sends no batches)"
                )),
                Err(RpcError::new(
                    code::PARSE_ERROR,
                    "not JSON: EOF while parsing an object at line 1 column 1"
                )),
            ]
        );
    }

    #[tokio::test]
    async fn a_request_gets_its_answer_or_is_told_the_client_left() {
        let (out, mut sent) = mpsc::unbounded_channel();
        let peer = Peer::over(out);
        let asking = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request("session/request_permission", json!({})).await })
        };
        let line = sent.recv().await.unwrap_or_default();
        let request: Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(request["method"], "session/request_permission");
        peer.settle(&request["id"], Ok(json!({"ok": true})));
        assert_eq!(asking.await.ok(), Some(Ok(json!({"ok": true}))));

        let asking = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request("session/request_permission", json!({})).await })
        };
        let _ = sent.recv().await;
        peer.hang_up();
        assert_eq!(asking.await.ok(), Some(Err(RequestFailed::Gone)));
    }
}
