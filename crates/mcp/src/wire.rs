//! The stdio link to a server, as the SDK's transport: JSON-RPC messages one per line, each
//! read whole up to the server's `maxMessageBytes` (the SDK's own reader drops a line over
//! 16 MiB and leaves the call waiting for an answer that came). The link keeps a book of
//! the requests it sent, so what goes wrong with an answer is said at once and truly:
//!
//! - an answer too large to read, or one that cannot be read (not JSON, nested past the
//!   parser's depth), becomes an error answer to its request, and the book says the answer
//!   was *lost*, not refused — the call it answered may have acted;
//! - a `tools/list` page is read tool by tool: a tool that cannot be read is left out and
//!   named, and the rest reach the SDK;
//! - a request is *delivered* once its line is wholly written to the server's stdin.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::RoleClient;
use rmcp::model::{ClientRequest, ErrorCode, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

/// Bytes of an oversized line kept from its start and from its end, to find its id.
const ENDS_KEPT: usize = 4096;

/// Protocol notes kept per server (the newest).
const NOTES_KEPT: usize = 32;

/// The code of the error answers the link makes for answers it could not read.
const LOST_ANSWER: ErrorCode = ErrorCode(-32_099);

/// A tool a server listed that cannot be offered, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedTool {
    /// Its name on the server (`?` when even the name could not be read).
    pub name: String,
    /// Why it is not offered.
    pub why: String,
}

/// What kind of request an id was sent for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// `tools/list`: its pages are read tool by tool.
    Listing,
    /// `tools/call`: kept in the book until its call is over.
    Call,
    /// Anything else (`initialize`, `ping`).
    Other,
}

#[derive(Default)]
struct BookState {
    /// Requests sent and not answered, and whether each was wholly written.
    pending: HashMap<RequestId, (Sent, bool)>,
    /// Answers that came but could not be read, by request: why.
    lost: HashMap<RequestId, String>,
    /// Tools of the listing pages read since the last [`Book::take_skipped`].
    skipped: Vec<SkippedTool>,
    /// What the server sent that could not be used, newest last.
    notes: std::collections::VecDeque<String>,
    /// Notes made in all, kept or not: a caller tells the new ones by it.
    noted: u64,
}

/// What the link knows of its requests, shared with the server's calls.
#[derive(Default)]
pub(crate) struct Book {
    state: Mutex<BookState>,
}

impl Book {
    /// Whether request `id` was wholly written to the server.
    pub(crate) fn delivered(&self, id: &RequestId) -> bool {
        self.state
            .lock()
            .pending
            .get(id)
            .is_some_and(|(_, delivered)| *delivered)
    }

    /// Why the answer to `id` could not be read, if it came and could not.
    pub(crate) fn take_lost(&self, id: &RequestId) -> Option<String> {
        self.state.lock().lost.remove(id)
    }

    /// Forgets request `id` (its call is over).
    pub(crate) fn forget(&self, id: &RequestId) {
        let mut state = self.state.lock();
        state.pending.remove(id);
        state.lost.remove(id);
    }

    /// The tools left out of the pages read since the last call.
    pub(crate) fn take_skipped(&self) -> Vec<SkippedTool> {
        std::mem::take(&mut self.state.lock().skipped)
    }

    /// How many notes were made so far (for [`Book::notes_since`]).
    pub(crate) fn noted(&self) -> u64 {
        self.state.lock().noted
    }

    /// The notes made since [`Book::noted`] said `count`, those still kept, oldest first.
    pub(crate) fn notes_since(&self, count: u64) -> Vec<String> {
        let state = self.state.lock();
        let new = usize::try_from(state.noted.saturating_sub(count)).unwrap_or(usize::MAX);
        let kept = state.notes.len();
        state
            .notes
            .iter()
            .skip(kept.saturating_sub(new))
            .cloned()
            .collect()
    }

    fn note(&self, note: String) {
        let mut state = self.state.lock();
        if state.notes.len() == NOTES_KEPT {
            state.notes.pop_front();
        }
        state.notes.push_back(note);
        state.noted += 1;
    }

    fn sent(&self, id: RequestId, kind: Sent) {
        self.state.lock().pending.insert(id, (kind, false));
    }

    fn written(&self, id: &RequestId) {
        if let Some((_, delivered)) = self.state.lock().pending.get_mut(id) {
            *delivered = true;
        }
    }

    fn kind_of(&self, id: &RequestId) -> Option<Sent> {
        self.state.lock().pending.get(id).map(|(kind, _)| *kind)
    }

    fn listing_pending(&self) -> bool {
        self.state
            .lock()
            .pending
            .values()
            .any(|(kind, _)| *kind == Sent::Listing)
    }

    fn answered(&self, id: &RequestId) {
        // A call's entry stays until its call is over (`forget`): whether it was
        // delivered is asked after the answer.
        let mut state = self.state.lock();
        if state
            .pending
            .get(id)
            .is_some_and(|(kind, _)| *kind != Sent::Call)
        {
            state.pending.remove(id);
        }
    }

    fn lose(&self, id: RequestId, why: String) {
        self.state.lock().lost.insert(id, why);
    }
}

/// Where a line being read stands.
#[derive(Default)]
enum Reading {
    /// Bytes go to the line buffer.
    #[default]
    Line,
    /// The line passed the limit: its first and last bytes are kept, the rest counted.
    Oversized {
        head: Vec<u8>,
        tail: std::collections::VecDeque<u8>,
        bytes: usize,
    },
}

/// What one read gave.
enum Got {
    Line,
    Oversized {
        head: Vec<u8>,
        tail: Vec<u8>,
        bytes: usize,
    },
    End,
}

/// Closes a [`Wire`]'s stdin (see [`Wire::stdin_closer`]).
pub(crate) struct StdinCloser<W = ChildStdin>(Arc<tokio::sync::Mutex<Option<W>>>);

impl<W> StdinCloser<W> {
    /// Closes the server's stdin; a request written after this fails as not sent.
    pub(crate) async fn close(&self) {
        drop(self.0.lock().await.take());
    }
}

/// The link to one server process, as the SDK's transport.
pub(crate) struct Wire<R = ChildStdout, W = ChildStdin> {
    read: BufReader<R>,
    line: Vec<u8>,
    reading: Reading,
    max_message: usize,
    write: Arc<tokio::sync::Mutex<Option<W>>>,
    book: Arc<Book>,
}

impl<R, W> Wire<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A link over the server's stdout and stdin; lines longer than `max_message` bytes are
    /// not read.
    pub(crate) fn new(stdout: R, stdin: W, max_message: usize, book: Arc<Book>) -> Self {
        Self {
            read: BufReader::with_capacity(64 << 10, stdout),
            line: Vec::new(),
            reading: Reading::Line,
            max_message,
            write: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            book,
        }
    }

    /// A handle that closes the server's stdin while its stdout is still read: how a
    /// client asks a stdio server to end, and lets it finish writing what it has.
    pub(crate) fn stdin_closer(&self) -> StdinCloser<W> {
        StdinCloser(Arc::clone(&self.write))
    }

    /// Reads up to the end of a line. Cancel-safe: what was read stays in `self` for the
    /// next call (the SDK polls `receive` inside a `select!`).
    async fn read_line(&mut self) -> Got {
        loop {
            let (taken, ended) = {
                let available = match self.read.fill_buf().await {
                    Ok(available) => available,
                    Err(_) => return Got::End,
                };
                if available.is_empty() {
                    return Got::End;
                }
                let newline = memchr::memchr(b'\n', available);
                let take = newline.map_or(available.len(), |at| at + 1);
                let part = &available[..take];
                match &mut self.reading {
                    Reading::Line if self.line.len() + take <= self.max_message => {
                        self.line.extend_from_slice(part);
                    }
                    Reading::Line => {
                        let before = std::mem::take(&mut self.line);
                        let bytes = before.len() + take;
                        let mut head = before[..before.len().min(ENDS_KEPT)].to_vec();
                        head.extend_from_slice(&part[..part.len().min(ENDS_KEPT - head.len())]);
                        // The tail is the line's, not this read's: its id may be split
                        // across the two.
                        let mut tail = std::collections::VecDeque::with_capacity(ENDS_KEPT);
                        keep_tail(&mut tail, &before);
                        keep_tail(&mut tail, part);
                        self.reading = Reading::Oversized { head, tail, bytes };
                    }
                    Reading::Oversized { tail, bytes, .. } => {
                        *bytes += take;
                        keep_tail(tail, part);
                    }
                }
                (take, newline.is_some())
            };
            self.read.consume(taken);
            if ended {
                return match std::mem::take(&mut self.reading) {
                    Reading::Line => Got::Line,
                    Reading::Oversized { head, tail, bytes } => Got::Oversized {
                        head,
                        tail: tail.into(),
                        bytes,
                    },
                };
            }
        }
    }

    /// A line as a message for the SDK: `None` when there is nothing to hand on.
    fn decode(&self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        // Read through the envelope only while a listing waits: other answers (a large
        // result, say) are parsed once.
        if self.book.listing_pending()
            && let Ok(Envelope {
                id: Some(id),
                result: Some(result),
            }) = serde_json::from_slice::<Envelope<'_>>(line)
            && self.book.kind_of(&id) == Some(Sent::Listing)
        {
            self.book.answered(&id);
            return self.listing(&id, result);
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
            Ok(message) => {
                match &message {
                    JsonRpcMessage::Response(response) => self.book.answered(&response.id),
                    JsonRpcMessage::Error(error) => {
                        if let Some(id) = &error.id {
                            self.book.answered(id);
                        }
                    }
                    JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => {}
                }
                Some(message)
            }
            Err(error) => {
                let id = serde_json::from_slice::<Envelope<'_>>(line)
                    .ok()
                    .and_then(|envelope| envelope.id)
                    .filter(|id| self.book.kind_of(id).is_some());
                match id {
                    Some(id) => {
                        let why = format!("the server's answer could not be read ({error})");
                        Some(self.lost(id, why))
                    }
                    None => {
                        let shown = String::from_utf8_lossy(&line[..line.len().min(200)]);
                        self.book.note(format!(
                            "a message that could not be read ({error}): {shown}"
                        ));
                        None
                    }
                }
            }
        }
    }

    /// A `tools/list` page with the tools that cannot be read left out (and named).
    fn listing(&self, id: &RequestId, result: &RawValue) -> Option<RxJsonRpcMessage<RoleClient>> {
        let page: Page<'_> = match serde_json::from_str(result.get()) {
            Ok(page) => page,
            Err(error) => {
                let why = format!("the server's list of tools could not be read ({error})");
                return Some(self.lost(id.clone(), why));
            }
        };
        let mut tools = Vec::with_capacity(page.tools.len());
        let mut skipped = Vec::new();
        for raw in page.tools {
            let name = serde_json::from_str::<Named>(raw.get())
                .ok()
                .and_then(|named| named.name)
                .unwrap_or_else(|| "?".to_owned());
            match readable_tool(raw) {
                Ok(tool) => tools.push(tool),
                Err(why) => skipped.push(SkippedTool { name, why }),
            }
        }
        self.book.state.lock().skipped.extend(skipped);
        let mut rebuilt = serde_json::Map::new();
        rebuilt.insert("tools".to_owned(), Value::Array(tools));
        if let Some(cursor) = page.next_cursor {
            rebuilt.insert("nextCursor".to_owned(), Value::String(cursor));
        }
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id.clone().into_json_value(),
            "result": rebuilt,
        });
        match serde_json::from_value(message) {
            Ok(message) => Some(message),
            Err(error) => Some(self.lost(
                id.clone(),
                format!("the server's list of tools could not be read ({error})"),
            )),
        }
    }

    /// An error answer to `id`, and the book's word that its real answer was lost.
    fn lost(&self, id: RequestId, why: String) -> RxJsonRpcMessage<RoleClient> {
        self.book.answered(&id);
        self.book.lose(id.clone(), why.clone());
        JsonRpcMessage::error(ErrorData::new(LOST_ANSWER, why, None), Some(id))
    }

    /// An oversized line: an error answer to its request when its id can be found.
    fn oversized(
        &self,
        head: &[u8],
        tail: &[u8],
        bytes: usize,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let why = format!(
            "the server's answer was {bytes} bytes, over this server's limit of {} bytes (`maxMessageBytes`); it was not read",
            self.max_message
        );
        match id_in_head(head)
            .or_else(|| id_in_tail(tail))
            .filter(|id| self.book.kind_of(id).is_some())
        {
            Some(id) => Some(self.lost(id, why)),
            None => {
                self.book
                    .note(format!("a message of {bytes} bytes, over the limit of {} bytes, for no request sent: dropped", self.max_message));
                None
            }
        }
    }
}

impl<R, W> Transport<RoleClient> for Wire<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let id = match &item {
            JsonRpcMessage::Request(request) => {
                // The SDK's request enum is open (`non_exhaustive`): two kinds matter here.
                let kind = if matches!(request.request, ClientRequest::ListToolsRequest(_)) {
                    Sent::Listing
                } else if matches!(request.request, ClientRequest::CallToolRequest(_)) {
                    Sent::Call
                } else {
                    Sent::Other
                };
                self.book.sent(request.id.clone(), kind);
                Some(request.id.clone())
            }
            JsonRpcMessage::Response(_)
            | JsonRpcMessage::Notification(_)
            | JsonRpcMessage::Error(_) => None,
        };
        let encoded = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let write = Arc::clone(&self.write);
        let book = Arc::clone(&self.book);
        async move {
            let line = encoded.map_err(std::io::Error::other)?;
            let mut write = write.lock().await;
            let Some(stdin) = write.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the server's stdin is closed",
                ));
            };
            stdin.write_all(&line).await?;
            stdin.flush().await?;
            if let Some(id) = id {
                book.written(&id);
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read_line().await {
                Got::End => return None,
                Got::Line => {
                    let line = std::mem::take(&mut self.line);
                    let trimmed = trim_line(&line);
                    let decoded = if trimmed.is_empty() {
                        None
                    } else {
                        self.decode(trimmed)
                    };
                    // The buffer's room is kept for the next line, up to a modest size.
                    self.line = line;
                    self.line.clear();
                    if self.line.capacity() > 1 << 20 {
                        self.line.shrink_to(64 << 10);
                    }
                    if let Some(message) = decoded {
                        return Some(message);
                    }
                }
                Got::Oversized { head, tail, bytes } => {
                    if let Some(message) = self.oversized(&head, &tail, bytes) {
                        return Some(message);
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.stdin_closer().close().await;
        Ok(())
    }
}

/// The parts of any message the link reads without the SDK's types: depth-proof (a raw
/// value is skipped, not parsed into a tree).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

/// A `tools/list` result, its tools unread.
#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    tools: Vec<&'a RawValue>,
    #[serde(rename = "nextCursor", default)]
    next_cursor: Option<String>,
}

/// A tool's name, whatever else it holds.
#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    name: Option<String>,
}

/// One listed tool as JSON the SDK's `Tool` accepts, or why it cannot be offered.
fn readable_tool(raw: &RawValue) -> Result<Value, String> {
    let value: Value = serde_json::from_str(raw.get()).map_err(|error| {
        if error.to_string().contains("recursion limit") {
            "its definition nests deeper than the JSON reader's limit of 128 levels".to_owned()
        } else {
            format!("its definition is not JSON ({error})")
        }
    })?;
    for field in ["inputSchema", "outputSchema"] {
        if let Some(schema) = value.get(field).filter(|schema| !schema.is_object()) {
            let shown = schema.to_string();
            return Err(format!(
                "its {field} is {}, not a JSON Schema object",
                &shown[..shown.floor_char_boundary(80)]
            ));
        }
    }
    serde_json::from_value::<rmcp::model::Tool>(value.clone())
        .map_err(|error| format!("its definition does not follow MCP's `Tool` ({error})"))?;
    Ok(value)
}

/// The line without its `\n` and a `\r` before it.
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn keep_tail(tail: &mut std::collections::VecDeque<u8>, part: &[u8]) {
    let part = &part[part.len().saturating_sub(ENDS_KEPT)..];
    let overflow = (tail.len() + part.len()).saturating_sub(ENDS_KEPT);
    tail.drain(..overflow.min(tail.len()));
    tail.extend(part);
}

/// The id of a message whose start is `head`, when it comes before any large member (the
/// order `{"jsonrpc", "id", "result"}` that most SDKs write).
fn id_in_head(head: &[u8]) -> Option<RequestId> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    struct FindId;
    impl<'de> Visitor<'de> for FindId {
        type Value = Option<RequestId>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key == "id" {
                    return map.next_value::<RequestId>().map(Some);
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(None)
        }
    }
    let mut reader = serde_json::Deserializer::from_slice(head);
    // A cut message fails to end: the id, if it was read, comes back before that error.
    let found = std::cell::Cell::new(None);
    let _ = (&mut reader).deserialize_map(Capture(&found, FindId));
    found.into_inner()
}

/// A visitor that keeps what the inner one found even when the message then fails to end.
struct Capture<'c, V>(&'c std::cell::Cell<Option<RequestId>>, V);

impl<'de, V: serde::de::Visitor<'de, Value = Option<RequestId>>> serde::de::Visitor<'de>
    for Capture<'_, V>
{
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.1.expecting(f)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let found = self.1.visit_map(map)?;
        self.0.set(found);
        // The rest of the map is not read: stop here.
        Err(serde::de::Error::custom("found"))
    }
}

/// The id of a message whose end is `tail`, when it is the last member, or the last but
/// `"jsonrpc"` (the order the TypeScript SDK writes: `{"result", "jsonrpc", "id"}`).
fn id_in_tail(tail: &[u8]) -> Option<RequestId> {
    let text = std::str::from_utf8(tail)
        .ok()
        .or_else(|| {
            // The cut may fall inside a character: skip to the next boundary.
            (1..4).find_map(|skip| std::str::from_utf8(tail.get(skip..)?).ok())
        })?
        .trim_end();
    let mut body = text.strip_suffix('}')?.trim_end();
    for trailer in [r#""jsonrpc":"2.0""#, r#""jsonrpc": "2.0""#] {
        if let Some(before) = body.strip_suffix(trailer) {
            body = before.trim_end().strip_suffix(',')?.trim_end();
        }
    }
    // `body` now ends with the value of the last member; find its key.
    let (value, before) =
        if let Some(open) = body.strip_suffix('"').and_then(|inner| inner.rfind('"')) {
            (&body[open..], &body[..open])
        } else {
            let start = body
                .rfind(|c: char| !(c.is_ascii_digit() || c == '-'))
                .map_or(0, |at| at + 1);
            (&body[start..], &body[..start])
        };
    let key = before.trim_end().strip_suffix(':')?.trim_end();
    let opener = key.strip_suffix(r#""id""#)?.trim_end();
    if !(opener.ends_with(',') || opener.ends_with('{')) {
        return None;
    }
    serde_json::from_str(value).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::sync::Arc;

    use rmcp::model::{CallToolRequestParams, ClientRequest, JsonRpcMessage, Request, RequestId};
    use rmcp::transport::Transport;
    use tokio::io::AsyncWriteExt;

    use super::{Book, Wire, id_in_head, id_in_tail};

    #[tokio::test]
    async fn an_oversized_answer_whose_id_comes_in_a_later_read_is_still_matched() {
        let (mut server, from_server) = tokio::io::duplex(64);
        let book = Arc::new(Book::default());
        let mut wire = Wire::new(from_server, tokio::io::sink(), 100, Arc::clone(&book));
        let call = ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("t")));
        wire.send(JsonRpcMessage::request(call, RequestId::Number(4)))
            .await
            .unwrap();
        assert!(book.delivered(&RequestId::Number(4)));
        let writing = tokio::spawn(async move {
            // Small writes through a 64-byte pipe: the id is read long after the limit
            // was passed, and `,"id"` is split across reads.
            let answer = format!(
                r#"{{"result":{{"content":[{{"type":"text","text":"{}"}}]}},"jsonrpc":"2.0","id":4}}"#,
                "x".repeat(300)
            );
            for chunk in answer.as_bytes().chunks(7) {
                server.write_all(chunk).await.unwrap();
            }
            server.write_all(b"\n").await.unwrap();
        });
        let Some(JsonRpcMessage::Error(error)) = wire.receive().await else {
            panic!("an error answer");
        };
        writing.await.unwrap();
        assert_eq!(error.id, Some(RequestId::Number(4)));
        let lost = book.take_lost(&RequestId::Number(4)).unwrap();
        assert!(
            lost.contains("over this server's limit of 100 bytes"),
            "{lost}"
        );
    }

    #[test]
    fn an_id_is_found_at_either_end_of_a_cut_message() {
        let number = |n| Some(RequestId::Number(n));
        assert_eq!(
            id_in_head(
                br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"aaaa"#
            ),
            number(7)
        );
        assert_eq!(
            id_in_head(br#"{"jsonrpc":"2.0","id":"q-1","result":{"#),
            Some(RequestId::String("q-1".into()))
        );
        assert_eq!(id_in_head(br#"{"result":{"content":[{"type":"te"#), None);
        assert_eq!(
            id_in_tail(br#"aaaa"}]},"jsonrpc":"2.0","id":12}"#),
            number(12)
        );
        assert_eq!(
            id_in_tail(br#"aaaa"}]}, "jsonrpc": "2.0", "id": 12 }  "#),
            number(12)
        );
        assert_eq!(
            id_in_tail(br#"aa"}]},"id":"x"}"#),
            Some(RequestId::String("x".into()))
        );
        // An `id` inside the result is not the message's.
        assert_eq!(id_in_tail(br#"aa","id":5}]}}"#), None);
        assert_eq!(id_in_tail(br#"aa"}]}}"#), None);
        assert_eq!(id_in_tail(br#"aa"x":"id":5}"#), None);
    }
}
