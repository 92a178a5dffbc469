//! `toolrail run --provider` against hostile model servers on 127.0.0.1 (issue 25), end to
//! end: a stream that begins a tool call and then only sends keepalives ends at the
//! `--request-timeout`, a 200 that is a web page fails at once naming its content type, a
//! `Retry-After` given as an HTTP date is waited for. Each time the session's log ends the
//! turn honestly, no tool ran unless the model finished asking, and `toolrail replay` reads
//! the log back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use support::{text, toolrail};
use toolrail_test_support::http::{call_chunk, finish_chunk, http_date, read_request, text_chunk};

/// What one connection is answered with, written after its request was read.
type Answer = Box<dyn FnOnce(&mut TcpStream) + Send>;

/// A model server on 127.0.0.1: the n-th connection gets the n-th answer, each on a thread
/// of its own (a client that gave up on one answer may be asking again while it is still
/// written). Each request's arrival is sent back. Bounded: it takes no more connections
/// than it has answers and waits for one 60 s at most.
fn hostile_server(answers: Vec<Answer>) -> (String, mpsc::Receiver<Instant>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (arrived, arrivals) = mpsc::channel();
    std::thread::spawn(move || {
        let give_up = Instant::now() + Duration::from_secs(60);
        for answer in answers {
            let mut socket = loop {
                match listener.accept() {
                    Ok((socket, _)) => break socket,
                    Err(error) if error.kind() == ErrorKind::WouldBlock => {
                        if Instant::now() > give_up {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(_) => return,
                }
            };
            socket.set_nonblocking(false).unwrap();
            let arrived = arrived.clone();
            std::thread::spawn(move || {
                read_request(&mut socket);
                let _ = arrived.send(Instant::now());
                answer(&mut socket);
            });
        }
    });
    (url, arrivals)
}

/// The head of a 200 event stream.
const STREAM_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/// The start of a `bash` call, then `: keepalive` every 100 ms (for 30 s at most, or until
/// the client has gone).
fn keepalive_stall() -> Answer {
    Box::new(|socket| {
        let start = call_chunk(0, "call_1", "bash", r#"{"command": "touch ran"#);
        if socket
            .write_all(STREAM_HEAD)
            .and_then(|()| socket.write_all(start.as_bytes()))
            .is_err()
        {
            return;
        }
        for _ in 0..300 {
            std::thread::sleep(Duration::from_millis(100));
            if socket.write_all(b": keepalive\n\n").is_err() {
                return;
            }
        }
    })
}

/// A login page, as a proxy in front of the wrong address answers.
fn html_page() -> Answer {
    Box::new(|socket| {
        let page = "<html><body>Sign in to continue</body></html>";
        let _ = write!(
            socket,
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
    })
}

/// The session `run` kept in `dir`: its id and its events.
fn the_session(dir: &Path) -> (String, Vec<Value>) {
    let sessions: Vec<_> = std::fs::read_dir(dir.join(".toolrail/sessions"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let id = sessions[0]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let events = std::fs::read_to_string(&sessions[0])
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (id, events)
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect()
}

/// `toolrail replay` reads the session back, whole.
fn replays(dir: &Path, id: &str) -> Value {
    let replayed = toolrail(dir, &["replay", id, "--json"]);
    assert!(replayed.status.success(), "{}", text(&replayed));
    serde_json::from_slice(&replayed.stdout).unwrap()
}

/// The issue's case, end to end: keepalives after part of a tool call kept `run` waiting
/// forever. Now each try ends at `--request-timeout`, the run fails naming it, the log ends
/// the turn with the error, and nothing ran.
#[test]
fn a_keepalive_stall_ends_the_turn_at_the_request_timeout_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Two tries, close together; the flags below lay the deadlines over this file.
    std::fs::write(
        dir.path().join("toolrail.toml"),
        "[model]\nprovider = \"openai\"\nmodel = \"m\"\n[model.retry]\nattempts = 2\nfirst_delay_ms = 10\nmax_delay_ms = 20\n",
    )
    .unwrap();
    let (url, arrivals) = hostile_server(vec![
        keepalive_stall(),
        keepalive_stall(),
        keepalive_stall(),
    ]);
    let started = Instant::now();
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--prompt",
            "Touch the file.",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            &url,
            "--approve",
            "rules-only",
            "--allow",
            "bash",
            "--request-timeout",
            "1s",
            "--idle-timeout",
            "300ms",
            "--step-timeout",
            "30s",
        ],
    );
    let took = started.elapsed();
    let said = text(&output);
    eprintln!("after {took:?}:\n{said}");
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("the request deadline of 1 s passed with the answer stalled"),
        "{said}"
    );
    assert!(said.contains("gave up after 2 tries"), "{said}");
    assert_eq!(arrivals.try_iter().count(), 2, "two tries: {said}");
    assert!(took < Duration::from_secs(20), "{took:?}");

    let (id, events) = the_session(dir.path());
    let kinds = kinds(&events);
    assert!(!kinds.contains(&"tool/start"), "nothing ran: {kinds:?}");
    assert!(!dir.path().join("ran").exists());
    assert_eq!(kinds.last(), Some(&"turn/end"), "{kinds:?}");
    let end = &events.last().unwrap()["data"];
    assert_eq!(end["kind"], "error", "{end}");
    assert!(
        end["message"]
            .as_str()
            .unwrap()
            .contains("request deadline of 1 s"),
        "{end}"
    );
    let replayed = replays(dir.path(), &id);
    assert_eq!(replayed["calls"], serde_json::json!([]), "{replayed}");
}

/// A 200 that is a web page: one request reaches the server, the run fails naming the
/// content type, and the log says the same.
#[test]
fn a_web_page_for_an_answer_fails_the_turn_at_once_naming_its_content_type() {
    let dir = tempfile::tempdir().unwrap();
    // More pages than one: a second try would be answered, and counted.
    let (url, arrivals) = hostile_server(vec![html_page(), html_page(), html_page()]);
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--prompt",
            "Anything to fix?",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            &url,
            "--approve",
            "never",
        ],
    );
    let said = text(&output);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("with content type `text/html; charset=utf-8`"),
        "{said}"
    );
    // Give a retry the time it would take (the first wait is below 500 ms).
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(arrivals.try_iter().count(), 1, "tried once: {said}");

    let (id, events) = the_session(dir.path());
    let end = &events.last().unwrap()["data"];
    assert_eq!(end["kind"], "error", "{end}");
    assert!(
        end["message"].as_str().unwrap().contains("text/html"),
        "{end}"
    );
    replays(dir.path(), &id);
}

/// A 429 whose `Retry-After` is a date two seconds ahead: `run` waits until then (far
/// longer than its own first backoff, 500 ms at most), and the turn completes.
#[test]
fn a_retry_after_date_is_waited_for_and_the_turn_completes() {
    let dir = tempfile::tempdir().unwrap();
    let until = http_date(SystemTime::now() + Duration::from_secs(2));
    let limited: Answer = Box::new(move |socket| {
        let body = r#"{"error":{"message":"Rate limit reached","type":"rate_limit"}}"#;
        let _ = write!(
            socket,
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {until}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let answer: Answer = Box::new(|socket| {
        let _ = socket.write_all(STREAM_HEAD);
        let _ = socket.write_all(text_chunk("Nothing to fix.").as_bytes());
        let _ = socket.write_all(finish_chunk("stop").as_bytes());
    });
    let (url, arrivals) = hostile_server(vec![limited, answer]);
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--prompt",
            "Anything to fix?",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            &url,
            "--approve",
            "never",
        ],
    );
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("Nothing to fix."), "{said}");
    let arrived: Vec<Instant> = arrivals.try_iter().collect();
    assert_eq!(arrived.len(), 2, "{said}");
    // The date has whole seconds: the wait it asked for was between 1 and 2 s.
    let gap = arrived[1].duration_since(arrived[0]);
    assert!(
        gap >= Duration::from_millis(900) && gap < Duration::from_secs(4),
        "{gap:?}"
    );

    let (id, events) = the_session(dir.path());
    assert_eq!(events.last().unwrap()["data"]["kind"], "completed");
    assert_eq!(replays(dir.path(), &id)["answer"], "Nothing to fix.");
}

/// A deadline flag needs a unit (a bare `600` could be seconds or toolrail.toml's
/// milliseconds) and a length: each refusal names the flag, and nothing is sent.
#[test]
fn deadline_flags_refuse_a_bare_number_and_zero_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (url, arrivals) = hostile_server(Vec::new());
    for (flag, value, said) in [
        (
            "--request-timeout",
            "600",
            "`600` needs a unit: 500ms, 90s, 20m or 2h",
        ),
        ("--idle-timeout", "2 days", "`days` is not a unit of time"),
        ("--step-timeout", "0s", "--step-timeout: is 0"),
    ] {
        let output = toolrail(
            dir.path(),
            &[
                "run",
                "--prompt",
                "hi",
                "--provider",
                "openai",
                "--model",
                "m",
                "--base-url",
                &url,
                "--approve",
                "never",
                flag,
                value,
            ],
        );
        assert_eq!(output.status.code(), Some(2), "{}", text(&output));
        assert!(text(&output).contains(flag), "{flag}: {}", text(&output));
        assert!(text(&output).contains(said), "{flag}: {}", text(&output));
    }
    assert_eq!(arrivals.try_iter().count(), 0);
}
