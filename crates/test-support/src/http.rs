//! The server side of one HTTP/1.1 request, for tests that stand in for a model server on
//! 127.0.0.1 with a plain `std::net` listener; and such a server, streaming scripted
//! OpenAI-compatible answers in small deltas.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Reads one request from `socket` (headers, then a body of `content-length` bytes) and
/// returns its body. Bounded: a client that stops sending fails the read after 30 s.
pub fn read_request(socket: &mut TcpStream) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(socket.try_clone().unwrap());
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

/// One streamed answer: its server-sent-event chunks, and after which one (if any) the
/// server waits for the test's gate before it sends the rest.
pub struct Answer {
    /// The server-sent-event chunks, in order (made with [`text_chunk`], [`call_chunk`],
    /// [`finish_chunk`]).
    pub chunks: Vec<String>,
    /// The chunk (from 0) after which the server waits for the gate; `None`: no wait.
    pub gate_after: Option<usize>,
}

impl Answer {
    /// The chunks, sent without a pause.
    pub fn new(chunks: Vec<String>) -> Self {
        Self {
            chunks,
            gate_after: None,
        }
    }

    /// The chunks, with a wait for the gate after chunk `at` (from 0).
    pub fn gated_after(chunks: Vec<String>, at: usize) -> Self {
        Self {
            chunks,
            gate_after: Some(at),
        }
    }
}

/// A chunk of the answer's text.
pub fn text_chunk(text: &str) -> String {
    let chunk = format!(
        r#"{{"choices": [{{"index": 0, "delta": {{"content": {}}}, "finish_reason": null}}]}}"#,
        json_string(text)
    );
    format!("data: {chunk}\n\n")
}

/// A chunk of tool call `index`: its id and name with the first chunk (empty after), and a
/// piece of its argument text.
pub fn call_chunk(index: u32, id: &str, name: &str, arguments: &str) -> String {
    let head = if id.is_empty() {
        String::new()
    } else {
        format!(r#""id": {}, "type": "function", "#, json_string(id))
    };
    let name = if name.is_empty() {
        String::new()
    } else {
        format!(r#""name": {}, "#, json_string(name))
    };
    let chunk = format!(
        r#"{{"choices": [{{"index": 0, "delta": {{"tool_calls": [{{"index": {index}, {head}"function": {{{name}"arguments": {}}}}}]}}, "finish_reason": null}}]}}"#,
        json_string(arguments)
    );
    format!("data: {chunk}\n\n")
}

/// The last chunk: why the answer ended (`stop`, `tool_calls`), and the stream's end.
pub fn finish_chunk(reason: &str) -> String {
    let chunk = format!(
        r#"{{"choices": [{{"index": 0, "delta": {{}}, "finish_reason": {}}}], "usage": {{"prompt_tokens": 10, "completion_tokens": 5}}}}"#,
        json_string(reason)
    );
    format!("data: {chunk}\n\ndata: [DONE]\n\n")
}

/// `at` as a server writes it in `Retry-After` or `Date` (an IMF-fixdate, whole seconds, in
/// GMT): `Sun, 06 Nov 1994 08:49:37 GMT`. A time before 1970 is written as 1970 began.
pub fn http_date(at: SystemTime) -> String {
    let seconds = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, clock) = (seconds / 86_400, seconds % 86_400);
    // 1970-01-01 was a Thursday.
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // The civil date of a day count (March-based years, so leap days come last).
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let of_era = shifted % 146_097;
    let year_of_era = (of_era - of_era / 1_460 + of_era / 36_524 - of_era / 146_096) / 365;
    let of_year = of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * of_year + 2) / 153;
    let day = of_year - (153 * march_month + 2) / 5 + 1;
    let month = (march_month + 2) % 12;
    let year = era * 400 + year_of_era + u64::from(month < 2);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][month as usize];
    format!(
        "{weekday}, {day:02} {month} {year} {:02}:{:02}:{:02} GMT",
        clock / 3_600,
        clock % 3_600 / 60,
        clock % 60
    )
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A server on 127.0.0.1 answering requests with `answers` in order (one connection each),
/// sending each request's body back through the returned channel; it stops after the last
/// answer. A gated answer waits (up to 60 s) for `gate` after its gate chunk.
pub fn scripted_server(
    answers: Vec<Answer>,
    gate: mpsc::Receiver<()>,
) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (seen, requests) = mpsc::channel();
    std::thread::spawn(move || {
        for answer in answers {
            let Ok((mut socket, _)) = listener.accept() else {
                return;
            };
            let _ = seen.send(read_request(&mut socket));
            let head =
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            if socket.write_all(head).is_err() {
                continue;
            }
            for (at, chunk) in answer.chunks.iter().enumerate() {
                if socket
                    .write_all(chunk.as_bytes())
                    .and_then(|()| socket.flush())
                    .is_err()
                {
                    break;
                }
                if answer.gate_after == Some(at) {
                    // Bounded: a test that never opens the gate fails, it does not hang.
                    let _ = gate.recv_timeout(Duration::from_secs(60));
                }
            }
        }
    });
    (url, requests)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::http_date;

    #[test]
    fn http_dates_are_written_as_servers_write_them() {
        let dates: Vec<String> = [784_111_777, 1_796_256_000, 951_782_400, 0]
            .into_iter()
            .map(|seconds| http_date(UNIX_EPOCH + Duration::from_secs(seconds)))
            .collect();
        assert_eq!(
            dates,
            [
                "Sun, 06 Nov 1994 08:49:37 GMT",
                "Thu, 03 Dec 2026 00:00:00 GMT",
                "Tue, 29 Feb 2000 00:00:00 GMT",
                "Thu, 01 Jan 1970 00:00:00 GMT",
            ]
        );
    }
}
