//! `toolrail run --otlp` exports a real session to an OTLP/HTTP receiver on 127.0.0.1 that
//! decodes the protobuf with the official `opentelemetry-proto` package (`.ci/run` installs
//! it into `target/ci-venv/otel`; with `CI` set a missing one fails the test). The session:
//! two parallel reads, a `bash` a rule asks about (answered over `--approvals-listen`), a
//! `bash` a rule denies, a call to an MCP server (`toolrail mcp serve` itself, exporting to
//! the same receiver), then a `run_code` whose program makes two calls. The test checks the
//! span tree, names, kinds, attributes, parent links, the span ids the log records, the
//! trace context the MCP server received (its own spans continue the trace under the
//! client's `tools/call` span), the histograms, and that no argument or result text leaves
//! the process while content capture is off.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};

const VENV_PYTHON: &str = "target/ci-venv/otel/bin/python";

/// Text that must never be exported while capture is off: in a file the reads return, in
/// the commands, and in the program.
const FILE_SECRET: &str = "file-secret-QWV";
const COMMAND_SECRET: &str = "command-secret-ZQX";
const PROGRAM_SECRET: &str = "program-secret-JKL";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The receiver's interpreter, or `None` (outside CI only) when it is missing.
fn receiver_python() -> Option<PathBuf> {
    let path = root().join(VENV_PYTHON);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "opentelemetry-proto is missing at {VENV_PYTHON}: .ci/run installs it"
    );
    eprintln!("opentelemetry-proto is not installed at {VENV_PYTHON}: not run here");
    None
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The receiver, started, and the port it listens on.
fn receiver(python: &Path, out: &Path) -> (KillOnDrop, u16) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(out)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("the receiver said {line:?}"))
        .parse()
        .unwrap();
    (KillOnDrop(child), port)
}

fn answers() -> Vec<Answer> {
    let program = format!(
        r#"const a = await read({{path: "a.txt"}}); const b = await read({{path: "b.txt"}}); return "{PROGRAM_SECRET}";"#
    );
    let run_code = json!({"code": program, "description": "read both", "language": "javascript"});
    vec![
        Answer::new(vec![
            call_chunk(0, "r1", "read", r#"{"path": "a.txt"}"#),
            call_chunk(1, "r2", "read", r#"{"path": "b.txt"}"#),
            call_chunk(
                2,
                "ask",
                "bash",
                &json!({"command": format!("echo asked {COMMAND_SECRET}"), "description": "asked"})
                    .to_string(),
            ),
            call_chunk(
                3,
                "deny",
                "bash",
                &json!({"command": format!("touch denied-{COMMAND_SECRET}"), "description": "denied"})
                    .to_string(),
            ),
            call_chunk(4, "m1", "mcp__self__read", r#"{"path": "a.txt"}"#),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![
            call_chunk(0, "code", "run_code", &run_code.to_string()),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![text_chunk("Done."), finish_chunk("stop")]),
    ]
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), format!("alpha {FILE_SECRET}\n")).unwrap();
    std::fs::write(dir.path().join("b.txt"), format!("beta {FILE_SECRET}\n")).unwrap();
    std::fs::write(
        dir.path().join("toolrail.toml"),
        r#"[permissions]
preset = "workspace"
allow = [{ rule = "run_code" }, { rule = "mcp__self__read" }]
ask = [{ rule = "bash(echo asked*)" }]
deny = [{ rule = "bash(touch denied*)", reason = "the test's deny rule" }]

[code]
languages = ["javascript"]

# Every call's phases, however fast, so the tree below is checked whole.
[telemetry]
phase_spans_min_ms = 0
"#,
    )
    .unwrap();
    dir
}

/// The MCP server the session calls: `toolrail mcp serve` on the same workspace, exporting
/// its own spans (as `toolrail-served`) to the receiver on `port`.
fn write_servers(dir: &Path, port: u16) {
    let servers = json!({"mcpServers": {
        "self": {"command": env!("CARGO_BIN_EXE_toolrail"),
                 "args": ["mcp", "serve", "--workspace", dir, "--otlp"],
                 "env": {
                     "OTEL_EXPORTER_OTLP_ENDPOINT": format!("http://127.0.0.1:{port}"),
                     "OTEL_SERVICE_NAME": "toolrail-served",
                     "XDG_STATE_HOME": dir.join("served-state"),
                 }},
    }});
    std::fs::write(dir.join("servers.json"), servers.to_string()).unwrap();
}

/// The served session's log: the one in the workspace that is not the session's own.
fn served_log(dir: &Path, own: &Path) -> PathBuf {
    let sessions = dir.join(".toolrail/sessions");
    std::fs::read_dir(&sessions)
        .unwrap_or_else(|error| panic!("{}: {error}", sessions.display()))
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            path.extension().is_some_and(|ext| ext == "jsonl")
                && path.file_name() != own.file_name()
        })
        .unwrap_or_else(|| panic!("no served session in {}", sessions.display()))
}

/// Reads the approvals endpoint from the run's first stderr line, then answers the asked
/// `bash` with `allow_once` (bounded wait).
fn answer_the_approval(stderr: &mut BufReader<std::process::ChildStderr>) -> bool {
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
    let auth = format!("Authorization: Bearer {token}");
    let curl = |args: &[&str]| {
        let output = Command::new("curl")
            .args(["-s", "-m", "10", "-H", &auth])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let body = curl(&[&format!("http://{address}/pending")]);
        if let Ok(listed) = serde_json::from_str::<Value>(&body)
            && let Some(id) = listed["pending"][0]["id"].as_u64()
        {
            break id;
        }
        if Instant::now() > deadline {
            eprintln!("never asked: {body}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let body = format!(r#"{{"id": {id}, "answer": "allow_once"}}"#);
    curl(&[
        "-X",
        "POST",
        "--data",
        &body,
        &format!("http://{address}/answer"),
    ]);
    true
}

/// The spans and metrics the receiver wrote, once the export has arrived.
fn received(out: &Path) -> (Vec<Value>, Vec<Value>) {
    let lines: Vec<Value> = std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    lines
        .into_iter()
        .partition(|line| line.get("metric").is_none())
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[test]
fn a_session_is_exported_as_genai_spans_and_metrics_over_otlp() {
    let Some(python) = receiver_python() else {
        return;
    };
    let dir = workspace();
    let out = dir.path().join("received.jsonl");
    let (_receiver, port) = receiver(&python, &out);
    write_servers(dir.path(), port);
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(answers(), gate);

    let mut child = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_SERVICE_NAME", "toolrail-otlp-test")
        .env_remove("OTEL_SEMCONV_STABILITY_OPT_IN")
        .args(["run", "--prompt", "Look around", "--json", "--otlp"])
        .args(["--provider", "openai", "--model", "m", "--base-url", &url])
        .args(["--approvals-listen", "127.0.0.1:0", "--mcp", "servers.json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let answered = answer_the_approval(&mut stderr);
    if !answered {
        let _ = child.kill();
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(answered && output.status.success(), "{stdout}\n{rest}");
    let report: Value = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .filter_map(Result::ok)
        .last()
        .unwrap_or_else(|| panic!("no report: {stdout}\n{rest}"));
    let session = report["session"].as_str().unwrap().to_owned();
    let log: Vec<Value> = std::fs::read_to_string(report["log"].as_str().unwrap())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();

    // The process flushed at exit, and stopped its MCP server the way MCP asks (stdin
    // closed, a grace), which flushed too: everything is in by the time it ended.
    let (received_spans, metrics) = received(&out);
    let (served, spans): (Vec<Value>, Vec<Value>) = received_spans
        .into_iter()
        .partition(|span| span["service"] == "toolrail-served");
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|span| (span["span_id"].as_str().unwrap(), span))
        .collect();
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|span| span["name"] == name).collect() };
    let children = |parent: &Value| -> Vec<&Value> {
        spans
            .iter()
            .filter(|span| span["parent_span_id"] == parent["span_id"])
            .collect()
    };
    let names = |of: &[&Value]| -> Vec<String> {
        let mut names: Vec<String> = of
            .iter()
            .map(|span| span["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };

    eprintln!("{} spans, {} metrics received", spans.len(), metrics.len());
    // One trace, one turn at its root.
    let turns = named("invoke_agent toolrail");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    assert_eq!(turn["parent_span_id"], "");
    assert_eq!(turn["kind"], "SPAN_KIND_INTERNAL");
    assert_eq!(turn["service"], "toolrail-otlp-test");
    assert_eq!(turn["scope"], "toolrail");
    assert_eq!(attr(turn, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(turn, "gen_ai.agent.name"), "toolrail");
    assert_eq!(attr(turn, "gen_ai.conversation.id"), session.as_str());
    assert_eq!(attr(turn, "gen_ai.provider.name"), "openai");
    assert_eq!(attr(turn, "toolrail.turn.end"), "completed");
    assert!(
        spans
            .iter()
            .all(|span| span["trace_id"] == turn["trace_id"]),
        "one trace"
    );

    // Three model requests and two batches under the turn.
    assert_eq!(
        names(&children(turn)),
        [
            "chat m",
            "chat m",
            "chat m",
            "toolrail.batch",
            "toolrail.batch"
        ]
    );
    let chats = named("chat m");
    for chat in &chats {
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
        assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(chat, "gen_ai.request.model"), "m");
        assert_eq!(attr(chat, "gen_ai.provider.name"), "openai");
        assert_eq!(
            attr(chat, "gen_ai.system"),
            "openai",
            "the deprecated name beside"
        );
        assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), 10);
        assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), 5);
    }
    let mut reasons: Vec<String> = chats
        .iter()
        .map(|chat| attr(chat, "gen_ai.response.finish_reasons").to_string())
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [r#"["stop"]"#, r#"["tool_calls"]"#, r#"["tool_calls"]"#]
    );

    // The first batch: its five calls are siblings under it; the reads ran in parallel.
    let mut batches = named("toolrail.batch");
    batches.sort_by_key(|batch| batch["start"].as_u64());
    assert_eq!(attr(batches[0], "toolrail.batch.calls"), 5);
    let first = children(batches[0]);
    assert_eq!(
        names(&first),
        [
            "execute_tool bash",
            "execute_tool bash",
            "execute_tool mcp__self__read",
            "execute_tool read",
            "execute_tool read"
        ]
    );
    let call = |id: &str| -> &Value {
        spans
            .iter()
            .find(|span| attr(span, "gen_ai.tool.call.id") == id)
            .unwrap_or_else(|| panic!("no span of {id}: {spans:#?}"))
    };
    for id in ["r1", "r2"] {
        let read = call(id);
        assert_eq!(read["kind"], "SPAN_KIND_INTERNAL");
        assert_eq!(read["parent_span_id"], batches[0]["span_id"]);
        assert_eq!(attr(read, "gen_ai.operation.name"), "execute_tool");
        assert_eq!(attr(read, "gen_ai.tool.name"), "read");
        assert_eq!(attr(read, "gen_ai.tool.type"), "function");
        assert!(
            attr(read, "gen_ai.tool.description")
                .as_str()
                .is_some_and(|text| !text.is_empty())
        );
        assert_eq!(attr(read, "error.type"), &Value::Null);
        let phases = names(&children(read));
        assert!(phases.contains(&"toolrail.run".to_owned()), "{phases:?}");
    }

    // The asked call: the approval's events and its wait.
    let asked = call("ask");
    let events: Vec<&str> = asked["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        ["toolrail.approval.asked", "toolrail.approval.decided"]
    );
    assert_eq!(
        asked["events"][1]["attributes"]["toolrail.approval.answer"],
        "allowed_once"
    );
    let waits: Vec<&Value> = children(asked)
        .into_iter()
        .filter(|span| span["name"] == "toolrail.approval_wait")
        .collect();
    assert_eq!(waits.len(), 1);
    assert_eq!(attr(asked, "error.type"), &Value::Null);

    // The denied call: its code, a deny event, an error status, nothing run.
    let denied = call("deny");
    assert_eq!(attr(denied, "error.type"), "POLICY_DENIED");
    assert_eq!(denied["status"]["code"], 2, "STATUS_CODE_ERROR");
    assert_eq!(denied["events"][0]["name"], "toolrail.denied");
    assert_eq!(
        denied["events"][0]["attributes"]["toolrail.by"],
        "permissions"
    );
    assert_eq!(names(&children(denied)), ["toolrail.policy"]);

    // The MCP server's tool is an extension.
    let mcp = call("m1");
    assert_eq!(attr(mcp, "gen_ai.tool.type"), "extension");
    assert_eq!(attr(mcp, "toolrail.tool.source"), "mcp(self)");
    assert_eq!(attr(mcp, "error.type"), &Value::Null, "{mcp:#?}");
    // Its request is an MCP client span under it, which the log's `mcp/request` names.
    let requests: Vec<&Value> = children(mcp)
        .into_iter()
        .filter(|span| span["name"] == "tools/call read")
        .collect();
    assert_eq!(requests.len(), 1, "{:#?}", children(mcp));
    let request = requests[0];
    assert_eq!(request["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(attr(request, "mcp.method.name"), "tools/call");
    assert_eq!(attr(request, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr(request, "gen_ai.tool.name"), "read");
    assert_eq!(attr(request, "mcp.protocol.version"), "2026-07-28");
    assert_eq!(attr(request, "network.transport"), "pipe");
    assert_eq!(attr(request, "toolrail.mcp.server"), "self");
    let request_id = attr(request, "jsonrpc.request.id").as_str().unwrap();
    assert!(!request_id.is_empty());
    let sent: Vec<&Value> = log
        .iter()
        .filter(|event| event["kind"] == "mcp/request")
        .collect();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0]["call_id"], "m1");
    assert_eq!(sent[0]["data"]["request_id"], request_id);
    assert_eq!(sent[0]["data"]["trace"]["span_id"], request["span_id"]);
    assert!(request["start"].as_u64() >= mcp["start"].as_u64());
    assert!(request["end"].as_u64() <= mcp["end"].as_u64());
    // The server received that span as `_meta.traceparent`: its log's turn names it as the
    // caller, and its spans continue the trace under it.
    let served_path = served_log(dir.path(), Path::new(report["log"].as_str().unwrap()));
    let served_events = read_log(&served_path);
    let callers: Vec<&Value> = served_events
        .iter()
        .filter(|event| event["kind"] == "turn/start")
        .map(|event| &event["data"]["caller"])
        .collect();
    assert_eq!(callers.len(), 1, "{served_events:#?}");
    assert_eq!(callers[0]["trace_id"], turn["trace_id"]);
    assert_eq!(callers[0]["span_id"], request["span_id"]);
    let served_turns: Vec<&Value> = served
        .iter()
        .filter(|span| span["name"] == "invoke_agent toolrail")
        .collect();
    assert_eq!(served_turns.len(), 1, "{served:#?}");
    assert_eq!(served_turns[0]["parent_span_id"], request["span_id"]);
    assert!(
        served
            .iter()
            .all(|span| span["trace_id"] == turn["trace_id"]),
        "the served spans are in the session's trace: {served:#?}"
    );
    let served_read: Vec<&Value> = served
        .iter()
        .filter(|span| span["name"] == "execute_tool read")
        .collect();
    assert_eq!(served_read.len(), 1, "{served:#?}");
    // A client's call asks no model: no `chat` span, live or replayed (the log marks it).
    assert!(
        served
            .iter()
            .all(|span| attr(span, "gen_ai.operation.name") != "chat"),
        "{served:#?}"
    );

    // The second batch: run_code, its program's two calls its children.
    assert_eq!(names(&children(batches[1])), ["execute_tool run_code"]);
    let run_code = call("code");
    let subs: Vec<&Value> = children(run_code)
        .into_iter()
        .filter(|span| span["name"] == "execute_tool read")
        .collect();
    let mut ids: Vec<&str> = subs
        .iter()
        .map(|span| attr(span, "gen_ai.tool.call.id").as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["code:code:1", "code:code:2"]);

    // The log names the spans its turn and calls opened.
    for event in &log {
        let traced = match event["kind"].as_str().unwrap() {
            "turn/start" => Some(turn),
            "tool/call" => Some(call(event["call_id"].as_str().unwrap())),
            _ => None,
        };
        if let Some(span) = traced {
            assert_eq!(
                event["data"]["trace"]["trace_id"], span["trace_id"],
                "{event}"
            );
            assert_eq!(
                event["data"]["trace"]["span_id"], span["span_id"],
                "{event}"
            );
        }
    }
    assert!(by_id.len() == spans.len(), "span ids are unique");

    // Capture is off: no argument or result text left the process.
    let exported = std::fs::read_to_string(&out).unwrap();
    for secret in [FILE_SECRET, COMMAND_SECRET, PROGRAM_SECRET, "Look around"] {
        assert!(!exported.contains(secret), "{secret} was exported");
    }
    assert!(!exported.contains("gen_ai.tool.call.arguments"));
    assert!(!exported.contains("gen_ai.tool.call.result"));

    // The histograms.
    let metric = |name: &str| -> &Value {
        metrics
            .iter()
            .rev()
            .find(|metric| metric["metric"] == name)
            .unwrap_or_else(|| panic!("no {name}: {metrics:#?}"))
    };
    let tools = metric("gen_ai.execute_tool.duration");
    assert_eq!(tools["unit"], "s");
    let denied_point = tools["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|point| point["attributes"]["error.type"] == "POLICY_DENIED")
        .unwrap_or_else(|| panic!("{tools:#?}"));
    assert_eq!(denied_point["attributes"]["gen_ai.tool.name"], "bash");
    assert_eq!(metric("gen_ai.client.operation.duration")["unit"], "s");
    let mcp_requests = metric("mcp.client.operation.duration");
    assert_eq!(mcp_requests["unit"], "s");
    assert_eq!(
        mcp_requests["points"][0]["attributes"]["mcp.method.name"],
        "tools/call"
    );
    let tokens = metric("gen_ai.client.token.usage");
    let types: Vec<&str> = tokens["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|point| point["attributes"]["gen_ai.token.type"].as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"input") && types.contains(&"output"),
        "{tokens:#?}"
    );

    the_replay_matches_the_live_export(
        &python,
        dir.path(),
        Path::new(report["log"].as_str().unwrap()),
        &spans,
    );
    the_replay_matches_the_live_export(&python, dir.path(), &served_path, &served);
}

/// `toolrail replay LOG --otlp --json` exporting to a receiver of its own: the spans it
/// received and the command's report.
fn replay_export(python: &Path, cwd: &Path, log: &Path) -> (Vec<Value>, Value) {
    let out = cwd.join(format!("replayed-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let (_receiver, port) = receiver(python, &out);
    let output = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_SERVICE_NAME", "toolrail-otlp-test")
        .env_remove("OTEL_SEMCONV_STABILITY_OPT_IN")
        .arg("replay")
        .arg(log)
        .args(["--otlp", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    // The command flushed before it exited: everything is in.
    let (spans, _metrics) = received(&out);
    let exported = std::fs::read_to_string(&out).unwrap_or_default();
    for secret in [FILE_SECRET, COMMAND_SECRET, PROGRAM_SECRET, "Look around"] {
        assert!(!exported.contains(secret), "{secret} was exported");
    }
    (spans, report)
}

/// Each span's name and its parent's name ("" for a root), sorted: the tree's shape
/// without its ids.
fn shape(spans: &[Value]) -> Vec<(String, String)> {
    let names: HashMap<&str, &str> = spans
        .iter()
        .map(|span| {
            (
                span["span_id"].as_str().unwrap(),
                span["name"].as_str().unwrap(),
            )
        })
        .collect();
    let mut shape: Vec<(String, String)> = spans
        .iter()
        .map(|span| {
            let parent = span["parent_span_id"].as_str().unwrap();
            // A served turn's parent is its caller's span, in another process.
            let parent = if parent.is_empty() {
                ""
            } else if span["name"] == "invoke_agent toolrail" {
                names.get(parent).copied().unwrap_or("(remote)")
            } else {
                names
                    .get(parent)
                    .unwrap_or_else(|| panic!("the parent of {span} is missing"))
            };
            (span["name"].as_str().unwrap().to_owned(), parent.to_owned())
        })
        .collect();
    shape.sort();
    shape
}

/// The log's first and last times, in nanoseconds since the epoch (the last widened by a
/// millisecond: a phase laid out from a call's timing may end inside the millisecond its
/// commit was stamped in).
fn time_range(log: &[Value]) -> (u64, u64) {
    let nanos = |event: &Value| -> u64 {
        let text = event["ts"].as_str().unwrap();
        let (date, time) = text.trim_end_matches('Z').split_once('T').unwrap();
        let day: Vec<i64> = date.split('-').map(|part| part.parse().unwrap()).collect();
        let (hms, millis) = time.split_once('.').unwrap();
        let hms: Vec<i64> = hms.split(':').map(|part| part.parse().unwrap()).collect();
        // Days from the civil date (Howard Hinnant's algorithm).
        let (y, m, d) = (day[0] - i64::from(day[1] <= 2), day[1], day[2]);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
        let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
        let secs = days * 86_400 + hms[0] * 3_600 + hms[1] * 60 + hms[2];
        u64::try_from(secs * 1_000 + millis.parse::<i64>().unwrap()).unwrap() * 1_000_000
    };
    let first = log.iter().map(nanos).min().unwrap();
    let last = log.iter().map(nanos).max().unwrap();
    (first, last + 1_000_000)
}

fn read_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A valid tree: every parent present, one root per turn (its `invoke_agent` span, whose
/// parent is the remote caller's span a served turn recorded), each turn's spans in its
/// trace, ids unique, times inside the log's.
fn assert_valid_tree(spans: &[Value], log: &[Value]) {
    let turns = log
        .iter()
        .filter(|event| event["kind"] == "turn/start")
        .count();
    let callers: Vec<&Value> = log
        .iter()
        .filter(|event| event["kind"] == "turn/start")
        .filter_map(|event| event["data"]["caller"].get("span_id"))
        .collect();
    let remote = |parent: &Value| parent == "" || callers.contains(&parent);
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|span| remote(&span["parent_span_id"]))
        .collect();
    assert_eq!(roots.len(), turns, "{spans:#?}");
    assert!(
        roots
            .iter()
            .all(|root| root["name"] == "invoke_agent toolrail")
    );
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|span| (span["span_id"].as_str().unwrap(), span))
        .collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are unique");
    for span in spans {
        assert_ne!(span["span_id"], "0000000000000000");
        assert_ne!(span["trace_id"], "00000000000000000000000000000000");
        let parent = span["parent_span_id"].as_str().unwrap();
        if !remote(&span["parent_span_id"]) {
            let parent = by_id
                .get(parent)
                .unwrap_or_else(|| panic!("the parent of {span} is missing"));
            assert_eq!(parent["trace_id"], span["trace_id"], "{span}");
        }
    }
    let (first, last) = time_range(log);
    for span in spans {
        let (start, end) = (
            span["start"].as_u64().unwrap(),
            span["end"].as_u64().unwrap(),
        );
        assert!(first <= start && start <= end && end <= last, "{span}");
    }
}

/// Replays the live test's log: the same tree as the live export, the ids the log recorded,
/// the recorded times.
fn the_replay_matches_the_live_export(python: &Path, cwd: &Path, log_path: &Path, live: &[Value]) {
    let log = read_log(log_path);
    let (replayed, report) = replay_export(python, cwd, log_path);
    assert_eq!(
        report["otlp"],
        json!({"sent": replayed.len(), "dropped": 0, "failed": 0})
    );
    assert_eq!(shape(&replayed), shape(live));
    assert_valid_tree(&replayed, &log);
    let mut recorded = 0;
    for event in &log {
        let Some(trace) = event["data"].get("trace") else {
            continue;
        };
        recorded += 1;
        let span = replayed
            .iter()
            .find(|span| span["span_id"] == trace["span_id"])
            .unwrap_or_else(|| panic!("no replayed span has the ids of {event}"));
        assert_eq!(span["trace_id"], trace["trace_id"]);
        let was = live
            .iter()
            .find(|span| span["span_id"] == trace["span_id"])
            .unwrap();
        assert_eq!(span["name"], was["name"]);
        // The same attributes, but an MCP tool's description: the replay starts no server.
        let mut attributes = was["attributes"].clone();
        if attributes["gen_ai.tool.type"] == "extension" {
            attributes
                .as_object_mut()
                .unwrap()
                .remove("gen_ai.tool.description");
        }
        assert_eq!(span["attributes"], attributes, "{}", span["name"]);
    }
    let traced = log
        .iter()
        .filter(|event| {
            matches!(
                event["kind"].as_str(),
                Some("turn/start" | "tool/call" | "mcp/request")
            )
        })
        .count();
    assert!(traced > 1, "{log:#?}");
    assert_eq!(recorded, traced, "the live log names every span it opened");
}

#[test]
fn a_log_written_before_span_ids_replays_as_a_valid_tree() {
    let Some(python) = receiver_python() else {
        return;
    };
    let fixtures = root().join("crates/presenters/tests/fixtures/02617dc");
    let cwd = tempfile::tempdir().unwrap();
    for name in ["demo.jsonl", "code.jsonl"] {
        let path = fixtures.join(name);
        let log = read_log(&path);
        assert!(
            log.iter().all(|event| event["data"].get("trace").is_none()),
            "{name} predates span ids"
        );
        let (spans, report) = replay_export(&python, cwd.path(), &path);
        assert_eq!(report["otlp"]["sent"], spans.len(), "{name}");
        assert_valid_tree(&spans, &log);
        let calls = log
            .iter()
            .filter(|event| event["kind"] == "tool/call")
            .count();
        let executed = spans
            .iter()
            .filter(|span| attr(span, "gen_ai.operation.name") == "execute_tool")
            .count();
        assert_eq!(executed, calls, "{name}: one execute_tool span a call");
    }
}

#[test]
fn mcp_serve_ended_by_sigterm_still_sends_its_spans() {
    let Some(python) = receiver_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let out = dir.path().join("received.jsonl");
    let (_receiver, port) = receiver(&python, &out);
    let mut server = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .current_dir(dir.path())
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_SERVICE_NAME", "toolrail-sigterm")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .args(["mcp", "serve", "--otlp", "--workspace"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "sigterm-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "read", "arguments": {"path": "a.txt"}}}),
    ] {
        std::io::Write::write_all(&mut stdin, format!("{message}\n").as_bytes()).unwrap();
    }
    // The call's answer; then, with stdin still open, the client's SIGTERM.
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap() > 0 {
        if serde_json::from_str::<Value>(&line).is_ok_and(|answer| answer["id"] == 2) {
            break;
        }
        line.clear();
    }
    assert!(line.contains("alpha"), "{line}");
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "mcp serve did not end after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    // Ended by its handler, not by the signal's default action, and after its spans went out.
    assert!(status.success(), "{status:?}");
    let (spans, _) = received(&out);
    assert!(
        spans.iter().any(
            |span| span["service"] == "toolrail-sigterm" && span["name"] == "execute_tool read"
        ),
        "{spans:#?}"
    );
}
