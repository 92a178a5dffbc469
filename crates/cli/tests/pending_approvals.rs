//! Pending approvals survive a restart (issue 27): `toolrail run` asks an approval nobody
//! answers and is SIGKILLed while it waits; `toolrail resume` then asks the question again
//! (allowed: the call runs once, after the resume; rejected: it never runs) or, past the
//! question's deadline, records `APPROVAL_EXPIRED` without asking. In every case the call
//! did not run in between, and it ends with exactly one `tool/result`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::text;
use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};

/// The file the asked command makes: it exists exactly when the call ran.
const MARKER: &str = "made.txt";

/// The model asks for one `bash` call that makes the marker (the default preset asks for
/// it), then, on the resumed turn, says it is done.
fn answers() -> Vec<Answer> {
    vec![
        Answer::new(vec![
            call_chunk(
                0,
                "t1",
                "bash",
                r#"{"command": "touch made.txt", "description": "make a file"}"#,
            ),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![text_chunk("Done."), finish_chunk("stop")]),
    ]
}

fn toolrail(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolrail"));
    command
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The approvals endpoint a run printed on its first stderr line: address and token.
struct Endpoint {
    address: String,
    token: String,
}

impl Endpoint {
    fn read(stderr: &mut BufReader<ChildStderr>) -> Self {
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let address = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        let token = line
            .split("Bearer ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_hexdigit()).next())
            .unwrap_or_else(|| panic!("no token in {line:?}"))
            .to_owned();
        Self { address, token }
    }

    fn curl(&self, args: &[&str]) -> (String, String) {
        let auth = format!("Authorization: Bearer {}", self.token);
        let output = Command::new("curl")
            .args(["-s", "-m", "10", "-w", "\n%{http_code}", "-H", &auth])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap();
        (status.to_owned(), body.to_owned())
    }

    /// Waits (bounded) for the marker's command to be asked, and answers it.
    fn answer(&self, answer: &str) {
        let pending = format!("http://{}/pending", self.address);
        let deadline = Instant::now() + Duration::from_secs(30);
        let id = loop {
            let (status, body) = self.curl(&[&pending]);
            assert_eq!(status, "200", "{body}");
            if body.contains("touch made.txt") {
                let listed: Value = serde_json::from_str(&body).unwrap();
                break listed["pending"][0]["id"].as_u64().unwrap();
            }
            assert!(Instant::now() < deadline, "never asked again: {body}");
            std::thread::sleep(Duration::from_millis(25));
        };
        let body = format!(r#"{{"id": {id}, "answer": "{answer}"}}"#);
        let url = format!("http://{}/answer", self.address);
        let (status, reply) = self.curl(&["-X", "POST", "--data", &body, &url]);
        assert_eq!(status, "200", "{reply}");
    }
}

/// The session's log (the only one in the default store) and its events.
fn log_of(dir: &Path) -> Option<PathBuf> {
    let folder = dir.join(".toolrail").join("sessions");
    std::fs::read_dir(folder)
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
}

fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn of_t1<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|event| event["kind"] == kind && event["call_id"] == "t1")
        .collect()
}

/// `toolrail run` in `dir` until its question is in the log, then SIGKILL: the call was
/// asked, never answered, never ran. Returns the session's id and the asked event.
fn ask_and_kill(dir: &Path, url: &str) -> (String, Value) {
    let mut child = toolrail(dir)
        .args(["run", "--prompt", "Make the file", "--provider", "openai"])
        .args([
            "--model",
            "m",
            "--base-url",
            url,
            "--sandbox",
            "workspace-write",
        ])
        .args(["--approvals-listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut child = KillOnDrop(child);
    let endpoint = Endpoint::read(&mut stderr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (log, asked) = loop {
        if let Some(log) = log_of(dir)
            && let Some(asked) = of_t1(&events(&log), "approval/asked").first()
        {
            break (log, (*asked).clone());
        }
        assert!(Instant::now() < deadline, "the run never asked");
        std::thread::sleep(Duration::from_millis(10));
    };
    // The question is in the log and on the endpoint, unanswered.
    let (_, pending) = endpoint.curl(&[&format!("http://{}/pending", endpoint.address)]);
    assert!(pending.contains("touch made.txt"), "{pending}");
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    let before = events(&log);
    assert!(of_t1(&before, "approval/decided").is_empty(), "{before:?}");
    assert!(of_t1(&before, "tool/start").is_empty());
    assert!(of_t1(&before, "tool/result").is_empty());
    assert!(
        !dir.join(MARKER).exists(),
        "the call ran before it was answered"
    );
    let id = log.file_stem().unwrap().to_string_lossy().into_owned();
    (id, asked)
}

/// `toolrail resume ID --prompt "Go on" ARGS`, started.
fn resume(dir: &Path, id: &str, args: &[&str]) -> Child {
    toolrail(dir)
        .args(["resume", id, "--prompt", "Go on"])
        .args(args)
        .spawn()
        .unwrap()
}

/// What the resumed session's log says of `t1`, once the resume has ended.
fn settled(dir: &Path) -> (Vec<Value>, Value) {
    let events = events(&log_of(dir).unwrap());
    let results = of_t1(&events, "tool/result");
    assert_eq!(results.len(), 1, "exactly one result: {results:?}");
    let result = results[0]["data"].clone();
    (events, result)
}

#[test]
fn a_pending_approval_is_asked_again_on_resume_and_the_call_runs_once_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(answers(), gate);
    let (id, asked) = ask_and_kill(dir.path(), &url);
    assert_eq!(
        asked["data"].get("expires_at"),
        None,
        "no timeout, no deadline"
    );

    let mut child = KillOnDrop(resume(
        dir.path(),
        &id,
        &["--approvals-listen", "127.0.0.1:0"],
    ));
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    let endpoint = Endpoint::read(&mut stderr);
    assert!(!dir.path().join(MARKER).exists(), "ran before asked again");
    endpoint.answer("allow_once");
    let output = child.output();
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(
        dir.path().join(MARKER).exists(),
        "allowed, so it ran: {out}"
    );
    assert!(
        out.contains("t1 (bash): was waiting for an approval — asked again: allowed once → ran"),
        "{out}"
    );

    let (events, result) = settled(dir.path());
    assert_eq!(result.get("error"), None, "{result}");
    assert_eq!(of_t1(&events, "tool/start").len(), 1, "ran exactly once");
    assert_eq!(of_t1(&events, "tool/call").len(), 1, "recorded once");
    assert_eq!(of_t1(&events, "approval/asked").len(), 2, "asked again");
    let decided = of_t1(&events, "approval/decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["answer"], "allowed_once");
    // The answer came after the second question, and the call started after the answer.
    let seq = |event: &Value| event["seq"].as_u64().unwrap();
    assert!(seq(of_t1(&events, "approval/asked")[1]) < seq(decided[0]));
    assert!(seq(decided[0]) < seq(of_t1(&events, "tool/start")[0]));
}

#[test]
fn a_pending_approval_rejected_on_resume_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(answers(), gate);
    let (id, _) = ask_and_kill(dir.path(), &url);

    let mut child = KillOnDrop(resume(
        dir.path(),
        &id,
        &["--approvals-listen", "127.0.0.1:0"],
    ));
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    Endpoint::read(&mut stderr).answer("reject");
    let output = child.output();
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("asked again: rejected"), "{out}");
    assert!(
        !dir.path().join(MARKER).exists(),
        "rejected, so it never ran"
    );

    let (events, result) = settled(dir.path());
    assert_eq!(result["error"]["code"], "APPROVAL_REJECTED", "{result}");
    assert!(of_t1(&events, "tool/start").is_empty());
    let decided = of_t1(&events, "approval/decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["answer"], "rejected");
}

#[test]
fn a_pending_approval_past_its_deadline_is_expired_on_resume_and_never_asked() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that the killed run is still waiting when it dies, short enough to wait
    // out (the test's one bounded sleep: real time must pass the recorded deadline).
    std::fs::write(
        dir.path().join("toolrail.toml"),
        "[limits]\napproval_timeout_ms = 3000\n",
    )
    .unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(answers(), gate);
    let (id, asked) = ask_and_kill(dir.path(), &url);
    let expires_at = asked["data"]["expires_at"]
        .as_str()
        .unwrap_or_else(|| panic!("the deadline is recorded: {asked}"))
        .to_owned();
    let asked_at = asked["ts"].as_str().unwrap();
    assert!(expires_at.as_str() > asked_at, "{asked}");
    std::thread::sleep(Duration::from_millis(3_200));

    // `--approve never` would reject if it were asked: expiry must come first.
    let child = resume(dir.path(), &id, &["--approve", "never"]);
    let output = child.wait_with_output().unwrap();
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(
        out.contains("expired before the session reopened → APPROVAL_EXPIRED"),
        "{out}"
    );
    assert!(
        !dir.path().join(MARKER).exists(),
        "expired, so it never ran"
    );

    let (events, result) = settled(dir.path());
    assert_eq!(result["error"]["code"], "APPROVAL_EXPIRED", "{result}");
    assert_eq!(
        result["error"]["message"],
        "no approval answer came in time; the call was not run"
    );
    assert!(of_t1(&events, "tool/start").is_empty());
    assert_eq!(of_t1(&events, "approval/asked").len(), 1, "not asked again");
    let decided = of_t1(&events, "approval/decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["answer"], "expired");
    assert!(decided[0]["data"]["waited_us"].as_u64().unwrap() >= 3_000_000);
}

/// On a terminal (a pty made by `script`), `toolrail resume` asks the question itself while
/// the session reopens, before its console is up; `y` runs the call once.
#[test]
fn on_a_terminal_resume_asks_the_pending_approval_there() {
    use std::io::{Read as _, Write as _};
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to make a terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(answers(), gate);
    let (id, _) = ask_and_kill(dir.path(), &url);

    let resume = format!(
        "{} resume {id} --prompt 'Go on'",
        env!("CARGO_BIN_EXE_toolrail")
    );
    let mut child = Command::new("script")
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("TERM", "dumb")
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .args(["-qec", &resume, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (seen, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(read) = stdout.read(&mut buffer) {
            if read == 0 {
                break;
            }
            all.extend_from_slice(&buffer[..read]);
            let _ = seen.send(String::from_utf8_lossy(&all).into_owned());
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let so_far = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("the question never showed on the terminal"));
        if so_far.contains("asks to run") {
            break;
        }
    }
    assert!(
        !dir.path().join(MARKER).exists(),
        "ran before it was answered"
    );
    child.0.stdin.as_mut().unwrap().write_all(b"y\n").unwrap();
    let status = child.0.wait().unwrap();
    let out = reader.join().unwrap();
    assert!(status.success(), "{out}");
    assert!(out.contains("asked again: allowed once → ran"), "{out}");
    assert!(dir.path().join(MARKER).exists(), "{out}");
    let (events, result) = settled(dir.path());
    assert_eq!(result.get("error"), None, "{result}");
    assert_eq!(of_t1(&events, "tool/start").len(), 1);
}

/// A child killed if the test fails before it ends (a question nobody shows waits forever).
struct KillOnDrop(Child);

impl KillOnDrop {
    /// Waits for the child's end and takes what is left of its output.
    fn output(mut self) -> std::process::Output {
        // Read to the end first: a child blocked on a full pipe would never end.
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        if let Some(pipe) = self.0.stdout.as_mut() {
            std::io::Read::read_to_end(pipe, &mut stdout).unwrap();
        }
        if let Some(pipe) = self.0.stderr.as_mut() {
            std::io::Read::read_to_end(pipe, &mut stderr).unwrap();
        }
        let status = self.0.wait().unwrap();
        std::process::Output {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
