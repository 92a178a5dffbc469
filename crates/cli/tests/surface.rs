//! What a new user meets around a run: a scenario never writes over a file of theirs,
//! `--json-stream` is one event a line, `mcp list` fails loudly for a server that cannot
//! start and names a tool it cannot offer, a flag a scenario cannot honour is refused while
//! `--mcp` adds servers to it, and `run --prompt` works against llm-katan, a model server
//! toolrail did not write.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use support::{text, toolrail};
use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};

#[test]
fn a_scenario_never_replaces_a_file_in_the_workspace_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("mine");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("calc.py"), "my own work\n").unwrap();
    let scenario = dir.path().join("seeded.json");
    std::fs::write(
        &scenario,
        r#"{
          "workspace": {"files": {"calc.py": "def add(a, b):\n    return a - b\n", "new.txt": "x"}},
          "config": {"tools": {"enabled": ["read"]}},
          "turns": [{"user": "go", "model": [{"text": "done", "stop_reason": "end_turn"}]}]
        }"#,
    )
    .unwrap();
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--scenario",
            scenario.to_str().unwrap(),
            "--workspace",
            workspace.to_str().unwrap(),
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("`calc.py`"),
        "names the file: {}",
        text(&output)
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("calc.py")).unwrap(),
        "my own work\n"
    );
    assert!(!workspace.join("new.txt").exists(), "nothing was seeded");
    assert!(
        !workspace.join(".toolrail").exists(),
        "no session was started"
    );

    // An empty folder is seeded and run in.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--scenario",
            scenario.to_str().unwrap(),
            "--workspace",
            empty.to_str().unwrap(),
        ],
    );
    assert!(output.status.success(), "{}", text(&output));
    assert!(empty.join("calc.py").is_file());
}

#[test]
fn json_stream_prints_each_event_as_it_happens_then_the_report() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, requests) = scripted_server(
        vec![
            Answer::new(vec![
                text_chunk("Reading "),
                text_chunk("it."),
                call_chunk(0, "c1", "read", r#"{"path": "a.txt"}"#),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![text_chunk("It says alpha."), finish_chunk("stop")]),
        ],
        gate,
    );
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--prompt",
            "What is in a.txt?",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            &url,
            "--approve",
            "never",
            "--json-stream",
            "--system",
            "You are terse.",
            "--temperature",
            "0.25",
            "--code",
            "js",
            "--deferred",
            "grep",
        ],
    );
    assert!(output.status.success(), "{}", text(&output));
    // What the flags set reached the model.
    let first: Value = serde_json::from_str(&requests.try_iter().next().unwrap()).unwrap();
    let system = &first["messages"][0];
    assert_eq!(system["role"], "system");
    // Code mode adds how to call the tools from a program after the prompt.
    assert!(
        system["content"]
            .as_str()
            .unwrap()
            .starts_with("You are terse.\n"),
        "{system}"
    );
    assert_eq!(first["temperature"], 0.25);
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        offered.contains(&"run_code") && offered.contains(&"tool_search"),
        "{offered:?}"
    );
    assert!(!offered.contains(&"grep"), "grep is deferred: {offered:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let types: Vec<&str> = lines
        .iter()
        .map(|line| line["type"].as_str().unwrap())
        .collect();
    let at = |kind: &str| {
        types
            .iter()
            .position(|t| *t == kind)
            .unwrap_or_else(|| panic!("{kind}: {types:?}"))
    };
    assert!(at("text") < at("call_prepared"), "{types:?}");
    assert!(at("call_started") < at("call_committed"), "{types:?}");
    assert_eq!(types.last(), Some(&"report"), "{types:?}");
    let committed = &lines[at("call_committed")];
    assert_eq!(committed["call_id"], "c1");
    assert_eq!(
        committed["arguments"]["path"], "a.txt",
        "arguments are JSON, not a string"
    );
    let report = lines.last().unwrap();
    assert_eq!(report["answer"], "It says alpha.");
    assert_eq!(report["calls"][0]["call_id"], "c1");
    assert_eq!(report["calls"][0]["arguments"]["path"], "a.txt");
    assert_eq!(report["usage"].as_array().unwrap().len(), 2, "{report}");
    assert_eq!(report["end"], "completed");
}

#[test]
fn mcp_list_fails_with_the_spawn_error_of_a_server_that_cannot_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {"ghost": {"command": "/no/such/server", "max_restarts": 0}}}"#,
    )
    .unwrap();
    let output = toolrail(
        dir.path(),
        &["mcp", "list", "--config", config.to_str().unwrap()],
    );
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("ghost: withdrawn") || shown.contains("ghost: failed"),
        "{shown}"
    );
    assert!(
        shown.contains("/no/such/server") && shown.contains("could not be started"),
        "{shown}"
    );
    assert!(shown.contains("1 server is not running: ghost"), "{shown}");
}

/// The hostile MCP server of the MCP crate's tests.
const HOSTILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../mcp/tests/hostile/server.py"
);

#[test]
fn mcp_list_names_each_tool_it_cannot_offer_and_offers_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"mcpServers": {"odd": {"command": "python3", "args": [HOSTILE, "schemas"]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let output = toolrail(
        dir.path(),
        &["mcp", "list", "--config", config.to_str().unwrap()],
    );
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("odd: running, version 1.0, protocol ") && shown.contains(", 1 tool"),
        "{shown}"
    );
    assert!(shown.contains("mcp__odd__ok"), "{shown}");
    assert!(
        shown.contains(r#"not offered: nope: its inputSchema is "nope", not a JSON Schema object"#),
        "{shown}"
    );
    assert!(
        shown.contains("not offered: deep: its definition nests deeper"),
        "{shown}"
    );
}

#[test]
fn a_flag_a_scenario_cannot_honour_is_refused_and_mcp_servers_join_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("acted");
    let scenario = dir.path().join("scenario.json");
    let calls = serde_json::json!({"tool_calls": [{"id": "c1", "name": "mcp__c__act", "arguments": "{}"}], "stop_reason": "tool_use"});
    let script = serde_json::json!({
        "config": {"permissions": {"allow": ["mcp__c__act"]}},
        "turns": [{"user": "go", "model": [calls, {"text": "done", "stop_reason": "end_turn"}]}]
    });
    std::fs::write(&scenario, script.to_string()).unwrap();
    let scenario = scenario.to_str().unwrap();
    for flags in [
        &["--sandbox", "full-access"][..],
        &["--allow", "bash", "--max-steps", "3"],
    ] {
        let mut args = vec!["run", "--scenario", scenario];
        args.extend_from_slice(flags);
        let output = toolrail(dir.path(), &args);
        let shown = text(&output);
        assert_eq!(output.status.code(), Some(2), "{shown}");
        assert!(
            shown.contains(flags[0]) && shown.contains("for --prompt"),
            "{shown}"
        );
    }
    let servers = dir.path().join("servers.json");
    let config = serde_json::json!({"mcpServers": {"c": {
        "command": "python3", "args": [HOSTILE, "crash", marker.to_str().unwrap()], "maxRestarts": 0}}});
    std::fs::write(&servers, config.to_string()).unwrap();
    let session = dir.path().join("session");
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--scenario",
            scenario,
            "--mcp",
            servers.to_str().unwrap(),
            "--session-dir",
            session.to_str().unwrap(),
            "--json",
        ],
    );
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "acted\n",
        "the server ran the call"
    );
    // It crashed before answering: the honest outcome, with its last words and where the
    // rest of its stderr is.
    assert!(shown.contains("TOOL_OUTCOME_UNKNOWN"), "{shown}");
    assert!(shown.contains("hostile: acted, now crashing"), "{shown}");
    let stderr = session.join("mcp/scenario/c.stderr.log");
    assert!(
        std::fs::read_to_string(&stderr)
            .unwrap()
            .contains("hostile: acted, now crashing")
    );
}

/// llm-katan's program: `LLM_KATAN`, the virtualenv `.ci/run` makes, or the PATH.
fn katan() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LLM_KATAN") {
        return Some(PathBuf::from(path));
    }
    let venv =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ci-venv/llm-katan/bin/llm-katan");
    venv.is_file().then_some(venv)
}

#[test]
fn run_prompt_works_against_llm_katan() {
    let Some(program) = katan() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "llm-katan is missing: .ci/run installs it"
        );
        eprintln!("skipped: llm-katan is not installed");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(program)
        .args([
            "-m",
            "echo-model",
            "-b",
            "echo",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .args(["--providers", "openai", "--disable-dashboard"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listening = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let dir = tempfile::tempdir().unwrap();
    let output = listening.then(|| {
        toolrail(
            dir.path(),
            &[
                "run",
                "--prompt",
                "Say something.",
                "--provider",
                "openai",
                "--model",
                "echo-model",
                "--base-url",
                &format!("http://127.0.0.1:{port}/v1"),
                "--approve",
                "never",
                "--max-steps",
                "2",
                "--json",
            ],
        )
    });
    let _ = server.kill();
    let _ = server.wait();
    let output = output.expect("llm-katan listens within 30 s");
    assert!(output.status.success(), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    // Echo calls a tool each request: refused (nothing is approved), every call answered.
    let calls = report["calls"].as_array().unwrap();
    assert!(!calls.is_empty(), "{report}");
    for call in calls {
        assert!(
            call["call_id"].is_string() && call["error"]["code"].is_string(),
            "{call}"
        );
    }
    assert_eq!(report["usage"].as_array().unwrap().len(), 2, "{report}");
    assert!(
        report["session"].as_str().unwrap().starts_with("20"),
        "{report}"
    );
}

/// An answer asking for `touch made.txt` (which asks under the default preset), then words.
fn touch_answers() -> Vec<Answer> {
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

#[test]
fn without_a_terminal_nothing_that_asks_runs_on_an_implicit_yes() {
    let dir = tempfile::tempdir().unwrap();
    let run = |url: &str, more: &[&str]| {
        let mut args = vec![
            "run",
            "--prompt",
            "Make the file",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            url,
            "--sandbox",
            "workspace-write",
            "--json",
        ];
        args.extend_from_slice(more);
        toolrail(dir.path(), &args)
    };
    // No choice made: refused before the model is asked anything.
    let (_gate, gate) = mpsc::channel();
    let (url, requests) = scripted_server(touch_answers(), gate);
    let refused = run(&url, &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("--approve never")
            && text(&refused).contains("--approve rules-only")
    );
    assert_eq!(requests.try_iter().count(), 0);

    // `never`: the question is logged and rejected; nothing was made.
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(touch_answers(), gate);
    let never = run(&url, &["--approve", "never"]);
    assert!(never.status.success(), "{}", text(&never));
    let report: Value = serde_json::from_slice(&never.stdout).unwrap();
    assert_eq!(
        report["calls"][0]["error"]["code"], "APPROVAL_REJECTED",
        "{report}"
    );
    assert!(!dir.path().join("made.txt").exists());

    // `rules-only`: nothing asks; what no rule allows is denied by the policy.
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(touch_answers(), gate);
    let rules = run(&url, &["--approve", "rules-only"]);
    assert!(rules.status.success(), "{}", text(&rules));
    let report: Value = serde_json::from_slice(&rules.stdout).unwrap();
    assert_eq!(
        report["calls"][0]["error"]["code"], "POLICY_DENIED",
        "{report}"
    );
    assert!(
        report["calls"][0]["card"]["notes"]
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing was asked: {report}"
    );
    assert!(!dir.path().join("made.txt").exists());

    // ...and what a rule allows runs.
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(touch_answers(), gate);
    let allowed = run(
        &url,
        &["--approve", "rules-only", "--allow", "bash(touch *)"],
    );
    assert!(allowed.status.success(), "{}", text(&allowed));
    assert!(dir.path().join("made.txt").exists(), "{}", text(&allowed));
}

#[test]
fn a_toolrail_toml_names_the_model_and_the_sessions_stay_in_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, requests) = scripted_server(
        vec![Answer::new(vec![
            text_chunk("Hello."),
            finish_chunk("stop"),
        ])],
        gate,
    );
    std::fs::write(
        dir.path().join("toolrail.toml"),
        format!(
            "[model]\nprovider = \"openai\"\nmodel = \"from-toml\"\nbase_url = \"{url}\"\nsystem = \"Be brief.\"\n"
        ),
    )
    .unwrap();
    let output = toolrail(dir.path(), &["run", "--prompt", "Hi", "--approve", "never"]);
    assert!(output.status.success(), "{}", text(&output));
    let asked: Value = serde_json::from_str(&requests.try_iter().next().unwrap()).unwrap();
    assert_eq!(asked["model"], "from-toml");
    assert_eq!(asked["messages"][0]["content"], "Be brief.");
    // No [store] in the file: the workspace keeps its sessions, out of git.
    let sessions: Vec<_> = std::fs::read_dir(dir.path().join(".toolrail/sessions"))
        .unwrap()
        .collect();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".toolrail/.gitignore")).unwrap(),
        "*\n"
    );

    // Another provider than the file's, without a model name: refused, not guessed.
    let output = toolrail(
        dir.path(),
        &[
            "run",
            "--prompt",
            "Hi",
            "--approve",
            "never",
            "--provider",
            "anthropic",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("give --model NAME too"),
        "{}",
        text(&output)
    );

    // Commands that only read make no sessions folder where there is none.
    let elsewhere = tempfile::tempdir().unwrap();
    let listed = toolrail(elsewhere.path(), &["sessions"]);
    assert_eq!(listed.status.code(), Some(2), "{}", text(&listed));
    assert!(
        text(&listed).contains("no sessions are kept for"),
        "{}",
        text(&listed)
    );
    assert!(!elsewhere.path().join(".toolrail").exists());
}

/// `toolrail run --approvals-listen`: the address and token are printed once on stderr; the
/// question is answered from `curl` with them; without the token nothing is decided.
#[test]
fn an_approval_is_answered_over_http_with_the_token_printed_at_start() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(touch_answers(), gate);
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .args([
            "run",
            "--prompt",
            "Make the file",
            "--provider",
            "openai",
            "--model",
            "m",
        ])
        .args(["--base-url", &url, "--sandbox", "workspace-write", "--json"])
        .args(["--approvals-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
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
        .map(|rest| rest.trim_end_matches(|c: char| !c.is_ascii_hexdigit()))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_hexdigit()).next())
        .unwrap_or_else(|| panic!("no token in {line:?}"))
        .to_owned();
    let curl = |args: &[&str]| {
        let output = Command::new("curl")
            .args(["-s", "-m", "10", "-w", "\n%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap().to_owned();
        (status.to_owned(), body.to_owned())
    };
    let auth = format!("Authorization: Bearer {token}");
    let pending = format!("http://{address}/pending");
    let mut listed = String::new();
    for _ in 0..200 {
        let (status, body) = curl(&["-H", &auth, &pending]);
        assert_eq!(status, "200", "{body}");
        if body.contains("touch made.txt") {
            listed = body;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let id = listed["pending"][0]["id"].as_u64().unwrap();
    let answer = format!(r#"{{"id": {id}, "answer": "allow_once"}}"#);
    let url = format!("http://{address}/answer");
    let (status, _) = curl(&["-X", "POST", "--data", &answer, &url]);
    assert_eq!(status, "401", "no token, no decision");
    assert!(!dir.path().join("made.txt").exists());
    let (status, body) = curl(&["-H", &auth, "-X", "POST", "--data", &answer, &url]);
    assert_eq!(status, "200", "{body}");
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["calls"][0]["error"], Value::Null, "{report}");
    assert!(dir.path().join("made.txt").exists());
}
