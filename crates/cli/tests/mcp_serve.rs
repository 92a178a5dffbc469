//! `toolrail mcp serve` driven by MCP clients nobody here wrote: the official Python SDK
//! (`mcp` on PyPI) over stdio — on the initialize handshake, where approvals are asked by
//! elicitation, and on the stateless 2026-07-28 revision — and over streamable HTTP, and
//! `@modelcontextprotocol/inspector-cli` (npm). `.ci/run` installs both under `target/`.
//! Each run lists the tools, calls `read` and `grep`, a `bash` a deny rule names (refused,
//! never run), a 5 MB output (capped, saved whole), a call a rule asks about, and a slow
//! call the client cancels (aborted in the log); the log of the served calls replays.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const VENV_PYTHON: &str = "target/ci-venv/mcp/bin/python";
const INSPECTOR: &str = "target/ci-npm/node_modules/@modelcontextprotocol/inspector-cli/build";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The client's interpreter or folder, or `None` (outside CI only) when it is missing.
fn installed(relative: &str, what: &str) -> Option<PathBuf> {
    let path = root().join(relative);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is missing at {relative}: .ci/run installs it"
    );
    eprintln!("{what} is not installed at {relative}: not run here");
    None
}

/// A workspace with a file to read and rules: a deny, an ask, and allows for the rest.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("notes.txt"),
        "hello from notes\nthe needle is here\n",
    )
    .expect("notes");
    std::fs::write(
        dir.path().join("toolrail.toml"),
        r#"[permissions]
preset = "workspace"
allow = [
    { rule = "bash(head *)" }, { rule = "bash(tr *)" }, { rule = "bash(echo slow-started*)" },
    { rule = "bash(sleep *)" }, { rule = "bash(touch slow*)" },
]
ask = [{ rule = "bash(echo asked*)" }]
deny = [{ rule = "bash(touch denied*)", reason = "the test's deny rule" }]
"#,
    )
    .expect("config");
    dir
}

fn python_client(python: &Path, args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_serve/python_client.py");
    let output = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("the client's JSON")
}

/// The one session log in the workspace, as events.
fn log_of(dir: &Path) -> (PathBuf, Vec<Value>) {
    let sessions = dir.join(".toolrail/sessions");
    let file = std::fs::read_dir(&sessions)
        .expect("sessions folder")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .expect("a session log");
    let events = std::fs::read_to_string(&file)
        .expect("read the log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("an event"))
        .collect();
    (file, events)
}

fn result_in_log<'a>(events: &'a [Value], call_id: &str) -> &'a Value {
    events
        .iter()
        .find(|event| event["kind"] == "tool/result" && event["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool/result for {call_id}"))
}

fn started(events: &[Value], call_id: &str) -> bool {
    events
        .iter()
        .any(|event| event["kind"] == "tool/start" && event["call_id"] == call_id)
}

/// What every run must show, whichever transport and revision.
fn check_common(seen: &Value, dir: &Path) {
    let tools = &seen["tools"];
    assert_eq!(tools["read"]["read_only"], true, "{tools}");
    assert_eq!(tools["grep"]["read_only"], true);
    assert_eq!(tools["bash"]["read_only"], false);
    assert_eq!(tools["bash"]["destructive"], true);
    assert!(
        seen["read"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("hello from notes")
    );
    assert!(
        seen["grep"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("the needle is here")
    );
    // The deny rule refuses the call, which never ran.
    assert_eq!(seen["denied"]["is_error"], true);
    assert_eq!(seen["denied"]["code"], "POLICY_DENIED");
    assert!(
        seen["denied"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("the test's deny rule")
    );
    assert!(!dir.join("denied-marker").exists(), "a denied command ran");
    // 5 MB of output reaches the client cut, and whole on disk.
    assert_eq!(seen["big"]["is_error"], false);
    let big = seen["big"]["text_bytes"].as_u64().unwrap_or(u64::MAX);
    assert!(big < 100_000, "the 5 MB result was not capped: {big} bytes");
    // The slow call was cancelled by the client and stopped: aborted in the log, its last
    // command never ran; the session went on.
    assert_eq!(seen["slow_cancelled"], true);
    assert_eq!(seen["after_cancel"]["is_error"], false);
    let (file, events) = log_of(dir);
    let denied = seen["denied"]["call_id"].as_str().unwrap_or_default();
    assert!(
        !started(&events, denied),
        "the denied call has a tool/start"
    );
    let big_id = seen["big"]["call_id"].as_str().unwrap_or_default();
    let big_record = result_in_log(&events, big_id);
    assert!(
        big_record.to_string().contains("full output"),
        "the capped result names where the whole output went: {big_record}"
    );
    let slow = events
        .iter()
        .filter(|event| event["kind"] == "tool/result")
        .find(|event| event["data"]["error"]["code"] == "ABORTED")
        .unwrap_or_else(|| panic!("no aborted call in the log"));
    let slow_id = slow["call_id"].as_str().unwrap_or_default();
    assert!(started(&events, slow_id));
    assert!(
        events
            .iter()
            .any(|event| event["kind"] == "turn/end" && event["data"]["kind"] == "aborted")
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !dir.join("slow-finished").exists(),
        "the cancelled call ran to its end"
    );
    // The log of the served calls replays like any session's.
    let replay = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .arg("replay")
        .arg(&file)
        .output()
        .expect("replay");
    let shown = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(
        shown.contains("POLICY_DENIED") && shown.contains("ABORTED"),
        "{shown}"
    );
    assert!(shown.contains("called `grep`"), "{shown}");
}

/// The two calls a rule asks about were asked through the client: the first allowed once
/// (it ran), the second rejected (it never ran); the log holds both answers.
fn check_asked(seen: &Value, dir: &Path) {
    let questions = seen["questions"].as_array().cloned().unwrap_or_default();
    assert_eq!(questions.len(), 2, "{questions:?}");
    assert!(
        questions[0]
            .as_str()
            .unwrap_or_default()
            .contains("echo asked-and-ran"),
        "{questions:?}"
    );
    assert_eq!(seen["asked"]["is_error"], false, "{}", seen["asked"]);
    assert!(
        seen["asked"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("asked-and-ran")
    );
    assert_eq!(
        seen["rejected"]["code"], "APPROVAL_REJECTED",
        "{}",
        seen["rejected"]
    );
    assert!(
        !dir.join("rejected-marker").exists(),
        "a rejected command ran"
    );
    let (_, events) = log_of(dir);
    let answer_of = |call: &Value| {
        let call = call.as_str().unwrap_or_default();
        events
            .iter()
            .filter(|event| event["kind"] == "approval/decided" && event["call_id"] == call)
            .map(|event| event["data"]["answer"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(answer_of(&seen["asked"]["call_id"]), ["allowed_once"]);
    assert_eq!(answer_of(&seen["rejected"]["call_id"]), ["rejected"]);
    let rejected = seen["rejected"]["call_id"].as_str().unwrap_or_default();
    assert!(
        !started(&events, rejected),
        "the rejected call has a tool/start"
    );
    // While the slow call ran, the client heard how it stood.
    let progress = seen["progress"].as_array().cloned().unwrap_or_default();
    assert!(
        progress.iter().any(|note| note == "running"),
        "{progress:?}"
    );
}

/// The Python client on stdio in a fresh workspace (`mode`, `answers`: see the script),
/// or `None` where the SDK is not installed (outside CI).
fn on_stdio(mode: &str, answers: &str) -> Option<(tempfile::TempDir, Value)> {
    let python = installed(VENV_PYTHON, "the Python MCP SDK")?;
    let dir = workspace();
    let path = dir.path().to_string_lossy().to_string();
    let seen = python_client(
        &python,
        &[
            env!("CARGO_BIN_EXE_toolrail"),
            &path,
            "stdio",
            mode,
            answers,
        ],
    );
    check_common(&seen, dir.path());
    Some((dir, seen))
}

#[test]
fn the_python_sdk_on_stdio_with_the_handshake_is_asked_mid_call() {
    let Some((dir, seen)) = on_stdio("legacy", "answers") else {
        return;
    };
    assert_eq!(seen["protocol"], "2025-11-25");
    assert_eq!(seen["server"], "toolrail");
    check_asked(&seen, dir.path());
}

#[test]
fn the_python_sdk_on_the_stateless_revision_answers_through_input_required() {
    let Some((dir, seen)) = on_stdio("auto", "answers") else {
        return;
    };
    assert_eq!(seen["protocol"], "2026-07-28");
    check_asked(&seen, dir.path());
}

#[test]
fn a_client_that_cannot_answer_a_form_gets_an_honest_refusal_for_what_asks() {
    let Some((dir, seen)) = on_stdio("auto", "none") else {
        return;
    };
    // Nobody could be asked, and the result says so; neither command ran.
    for call in ["asked", "rejected"] {
        assert_eq!(seen[call]["code"], "APPROVAL_UNAVAILABLE", "{}", seen[call]);
    }
    assert!(!dir.path().join("rejected-marker").exists());
    assert!(seen["questions"].as_array().is_some_and(Vec::is_empty));
}

/// `toolrail mcp serve --listen 127.0.0.1:0`, and the URL it printed.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_server(dir: &Path) -> HttpServer {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .args(["mcp", "serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcp serve");
    let stderr = child.stderr.take().expect("stderr");
    let (found, url) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let url: String = line[at..]
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let _ = found.send(url);
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = url
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("mcp serve printed its URL");
    HttpServer { child, url }
}

#[test]
fn the_python_sdk_over_streamable_http() {
    let Some(python) = installed(VENV_PYTHON, "the Python MCP SDK") else {
        return;
    };
    let dir = workspace();
    let server = http_server(dir.path());
    assert!(server.url.starts_with("http://127.0.0.1:") && server.url.ends_with("/mcp"));
    let path = dir.path().to_string_lossy().to_string();
    let seen = python_client(
        &python,
        &[
            env!("CARGO_BIN_EXE_toolrail"),
            &path,
            "http",
            &server.url,
            "auto",
            "answers",
        ],
    );
    check_common(&seen, dir.path());
    check_asked(&seen, dir.path());
}

#[test]
fn a_non_loopback_listen_address_is_refused() {
    let dir = workspace();
    let output = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .args(["mcp", "serve", "--listen", "0.0.0.0:0", "--workspace"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("not a loopback address"), "{said}");
}

fn inspector(folder: &Path, dir: &Path, args: &[&str]) -> Value {
    let output = Command::new("node")
        .arg("index.js")
        .arg(env!("CARGO_BIN_EXE_toolrail"))
        .args(["mcp", "serve", "--workspace"])
        .arg(dir)
        .args(args)
        // It finds its own package.json from its folder.
        .current_dir(folder)
        .output()
        .expect("run the inspector");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the inspector failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = &stdout[stdout.find('{').unwrap_or(0)..];
    serde_json::from_str(json).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

#[test]
fn the_inspector_cli_lists_calls_and_is_refused() {
    let Some(folder) = installed(INSPECTOR, "@modelcontextprotocol/inspector-cli") else {
        return;
    };
    let dir = workspace();
    let listed = inspector(&folder, dir.path(), &["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    for name in ["read", "grep", "glob", "bash", "edit", "write"] {
        assert!(names.contains(&name), "{name} is not listed: {names:?}");
    }
    let read = inspector(
        &folder,
        dir.path(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "read",
            "--tool-arg",
            "path=notes.txt",
        ],
    );
    assert_eq!(read["isError"], false, "{read}");
    assert!(read.to_string().contains("hello from notes"));
    let grep = inspector(
        &folder,
        dir.path(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "grep",
            "--tool-arg",
            "pattern=needle",
        ],
    );
    assert_eq!(grep["structuredContent"]["matches"], 1, "{grep}");
    let denied = inspector(
        &folder,
        dir.path(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "bash",
            "--tool-arg",
            "command=touch denied-marker",
            "--tool-arg",
            "description=marker",
        ],
    );
    assert_eq!(denied["isError"], true, "{denied}");
    assert_eq!(denied["_meta"]["toolrail/error_code"], "POLICY_DENIED");
    assert!(!dir.path().join("denied-marker").exists());
}

/// toolrail as an MCP client asks for the newest revision first: `toolrail mcp serve`
/// speaks it (2026-07-28, stateless), and a server of an earlier revision
/// (server-everything, 2025-11-25) is met with the handshake and keeps working.
#[test]
fn as_a_client_toolrail_negotiates_the_newest_revision_and_older_servers_keep_working() {
    let Some(modules) = installed("target/ci-npm/node_modules", "the npm MCP servers") else {
        return;
    };
    let everything = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let dir = workspace();
    let servers = serde_json::json!({"mcpServers": {
        "self": {"command": env!("CARGO_BIN_EXE_toolrail"),
                 "args": ["mcp", "serve", "--workspace", dir.path()]},
        "everything": {"command": "node", "args": [everything, "stdio"]},
    }});
    let file = dir.path().join("servers.json");
    std::fs::write(&file, servers.to_string()).expect("servers");
    let output = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .args(["mcp", "list", "--config"])
        .arg(&file)
        .current_dir(dir.path())
        .output()
        .expect("mcp list");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        shown.contains("self: running, version 0.1.0, protocol 2026-07-28"),
        "{shown}"
    );
    assert!(
        shown.contains("everything: running, version 2.0.0, protocol 2025-11-25"),
        "{shown}"
    );
    assert!(shown.contains("mcp__self__grep"), "{shown}");
}

/// A workspace for the edge cases: reads, a slow command allowed, one that asks, and
/// approvals that expire after 1.5 s.
fn edge_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("notes.txt"), "hello\n").expect("notes");
    std::fs::write(
        dir.path().join("toolrail.toml"),
        r#"[permissions]
preset = "workspace"
allow = [{ rule = "bash(sleep *)" }, { rule = "bash(touch slow*)" }]
ask = [{ rule = "bash(echo asked*)" }]

[limits]
approval_timeout_ms = 1500
"#,
    )
    .expect("config");
    dir
}

fn edge(python: &Path, dir: &Path, case: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_serve/edge_client.py");
    let output = Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_toolrail"))
        .arg(dir)
        .arg(case)
        .output()
        .expect("run the edge client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the edge client failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("the client's JSON")
}

/// Requests written together are served, and committed, in the order they were sent
/// (each handler is a task of its own, so the order is taken where stdin is read).
#[test]
fn calls_sent_together_commit_in_the_order_they_were_sent() {
    let Some(python) = installed(VENV_PYTHON, "the Python MCP SDK") else {
        return;
    };
    let dir = edge_workspace();
    let seen = edge(&python, dir.path(), "order");
    let (_, events) = log_of(dir.path());
    let order_of = |kind: &str| -> Vec<Value> {
        events
            .iter()
            .filter(|event| event["kind"] == kind)
            .map(|event| event["call_id"].clone())
            .collect()
    };
    assert_eq!(
        order_of("tool/call"),
        seen["sent"].as_array().cloned().unwrap_or_default()
    );
    assert_eq!(order_of("tool/result"), order_of("tool/call"));
}

/// A client that goes away mid-call: the server ends, and the call it left has an honest
/// outcome in the log first (aborted, its command stopped), never an open turn.
#[test]
fn a_client_that_leaves_mid_call_leaves_an_honest_outcome() {
    let Some(python) = installed(VENV_PYTHON, "the Python MCP SDK") else {
        return;
    };
    let dir = edge_workspace();
    let seen = edge(&python, dir.path(), "disconnect");
    assert_eq!(seen["exit"], 0, "{seen}");
    let (_, events) = log_of(dir.path());
    let result = result_in_log(&events, "mcp-1");
    assert_eq!(result["data"]["error"]["code"], "ABORTED", "{result}");
    let last = events.last().expect("events");
    assert_eq!(
        last["kind"], "turn/end",
        "the log ends inside a turn: {last}"
    );
    assert!(!dir.path().join("slow-finished").exists());
}

/// On the stateless revision a question goes back as `input_required`; a client that never
/// answers holds the calls behind it only until the question's own deadline, which refuses
/// the call (it never ran); the next call is then served.
#[test]
fn an_unanswered_question_expires_and_frees_the_calls_behind_it() {
    let Some(python) = installed(VENV_PYTHON, "the Python MCP SDK") else {
        return;
    };
    let dir = edge_workspace();
    let seen = edge(&python, dir.path(), "abandon");
    assert_eq!(seen["first"], "input_required", "{seen}");
    assert_eq!(seen["read_ok"], true, "{seen}");
    let waited = seen["read_after_s"].as_f64().unwrap_or(f64::MAX);
    assert!(
        waited < 30.0,
        "the read waited {waited} s behind an abandoned question"
    );
    let (_, events) = log_of(dir.path());
    let result = result_in_log(&events, "mcp-2");
    assert_eq!(
        result["data"]["error"]["code"], "APPROVAL_EXPIRED",
        "{result}"
    );
    assert!(!started(&events, "mcp-2"));
    assert!(!dir.path().join("abandoned-marker").exists());
}
