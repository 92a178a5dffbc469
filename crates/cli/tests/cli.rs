//! The `toolrail` binary end to end (assert_cmd): the demo in a fresh folder, `run` on
//! scenario files, `replay` showing the cards the live run showed, `recover` on a crafted
//! interrupted log, `tools`, and exit code 2 with a message naming what is wrong for bad
//! input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;
use toolrail_session_log::{
    AppendUrgency, CallId, EventData, EventDraft, EventSink, SessionId, SessionLog, StepId,
    Timestamp, TurnId,
    event::{
        AssistantBlock, AssistantMessage, FORMAT_VERSION, SessionStart, StopReason, ToolCall,
        ToolStart, TurnStart,
    },
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};

fn toolrail(args: &[&str]) -> Output {
    Command::cargo_bin("toolrail")
        .unwrap()
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Scenario files on the shipped tools (the CLI has no test probes).
const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios/");

#[test]
fn the_demo_runs_in_a_fresh_folder_and_leaves_its_log_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("demo");
    let output = toolrail(&["demo", "--session-dir", path(&session)]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}\n{}", stderr(&output));
    // Every call's card, the approval, the denial, the tests passing, the summary.
    for expected in [
        "✓ todo_write (0/3 done)",
        "✓ glob **/*.py",
        "✓ grep def mean",
        "✓ read calc.py",
        "✓ read test_calc.py",
        "✓ edit calc.py",
        "⚑ asked: `edit` needs an approval",
        "→ allowed once",
        "✓ $ python3 -m unittest -q",
        "exit 0",
        "✗ $ curl -s https://docs.python.org/3/library/statistics.html  POLICY_DENIED",
        "9 calls in 4 batches · ",
        "errors: POLICY_DENIED × 1",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    // The reads run side by side. Lanes are placed by millisecond timestamps, so the edit
    // and the bash call that starts within the millisecond the edit commits can look
    // overlapped too: one group, or two.
    assert!(
        text.contains("· 1 parallel group ·") || text.contains("· 2 parallel groups ·"),
        "{text}"
    );
    // Not a terminal: progress comes as plain lines.
    assert!(text.contains("… c7 bash started"), "{text}");
    assert!(session.join("scenario.jsonl").exists());
    let page = std::fs::read_to_string(session.join("session.html")).unwrap();
    assert_eq!(page.matches("<article class=\"card").count(), 9);
    // The fix is in the workspace.
    let fixed = std::fs::read_to_string(session.join("workspace/calc.py")).unwrap();
    assert!(fixed.contains("return sum(values) / len(values)"));
}

#[test]
fn a_relative_session_dir_is_taken_from_the_current_folder_and_bash_runs_in_it() {
    // The sandboxed `bash` runs each command from the workspace: a session folder left
    // relative made every call SANDBOX_UNAVAILABLE.
    let dir = tempfile::tempdir().unwrap();
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .args(["demo", "--session-dir", "relative/demo"])
        .output()
        .unwrap();
    let text = stdout(&output);
    assert!(output.status.success(), "{text}\n{}", stderr(&output));
    assert!(text.contains("✓ $ python3 -m unittest -q"), "{text}");
    assert!(!text.contains("SANDBOX_UNAVAILABLE"), "{text}");
    let session = dir.path().join("relative/demo");
    assert!(
        text.contains(&format!(
            "log:  {}",
            session.join("scenario.jsonl").display()
        )),
        "the paths shown are absolute: {text}"
    );
    assert!(session.join("scenario.jsonl").exists());
}

#[test]
fn a_relative_session_dir_is_made_absolute_for_a_run_without_bash_too() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .args([
            "run",
            "--scenario",
            &format!("{SHIPPED}approvals.json"),
            "--session-dir",
            "./s",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        report["log"],
        Value::from(path(&dir.path().join("s").join("scenario.jsonl")))
    );
}

#[test]
fn run_replays_to_the_same_cards_and_writes_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("s");
    let page = dir.path().join("page.html");
    let scenario = format!("{SHIPPED}approvals.json");
    let output = toolrail(&[
        "run",
        "--scenario",
        &scenario,
        "--session-dir",
        path(&session),
        "--html",
        path(&page),
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let live: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(live["mismatches"], serde_json::json!([]));
    assert_eq!(live["summary"]["calls"], 6);
    assert!(page.exists());

    let log = session.join("scenario.jsonl");
    let output = toolrail(&["replay", path(&log), "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let replayed: Value = serde_json::from_str(&stdout(&output)).unwrap();
    // The cards shown live, as each call committed, are the cards the log alone gives.
    let live_calls = live["calls"].as_array().unwrap();
    assert_eq!(live_calls.len(), 6, "every call is reported");
    for call in live_calls {
        assert!(
            call["call_id"].is_string() && call["arguments"].is_object(),
            "{call}"
        );
    }
    // In the same order too: commits are in model order, and so is the log.
    assert_eq!(live_calls, replayed["calls"].as_array().unwrap());
    assert_eq!(live["summary"], replayed["summary"]);

    // The page replay writes from the log is the page the run wrote.
    let replayed_page = dir.path().join("replayed.html");
    let output = toolrail(&["replay", path(&log), "--html", path(&replayed_page)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let (live_page, replayed_page) = (
        std::fs::read_to_string(&page).unwrap(),
        std::fs::read_to_string(&replayed_page).unwrap(),
    );
    assert_eq!(live_page.matches("<article class=\"card").count(), 6);
    assert!(live_page == replayed_page, "the replayed page differs");

    // Plain replay prints the conversation and the cards.
    let output = toolrail(&["replay", path(&log)]);
    let text = stdout(&output);
    assert!(
        text.contains("user: Record the step, then echo twice more."),
        "{text}"
    );
    assert!(text.contains("APPROVAL_REJECTED"), "{text}");
    assert!(
        text.contains("NOT_EXECUTED  (by the runtime)")
            || text.contains("NOT_EXECUTED (by the runtime)"),
        "{text}"
    );
}

#[test]
fn run_takes_a_tool_set_and_a_rule_file() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.json");
    std::fs::write(
        &scenario,
        r#"{
          "config": {"tools": {"enabled": []}, "permissions": {"preset": "full-auto"}},
          "workspace": {"files": {"a.txt": "alpha\n"}},
          "turns": [
            {
              "user": "go",
              "model": [
                {
                  "tool_calls": [
                    {"id": "c1", "name": "glob", "arguments": "{\"pattern\": \"*.txt\"}"},
                    {"id": "c2", "name": "grep", "arguments": "{\"pattern\": \"alpha\"}"}
                  ],
                  "stop_reason": "tool_use"
                },
                {"text": "done", "stop_reason": "end_turn"}
              ]
            }
          ]
        }"#,
    )
    .unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "preset = \"full-auto\"\n\n[[deny]]\nrule = \"grep\"\nreason = \"not today\"\n",
    )
    .unwrap();
    let output = toolrail(&[
        "run",
        "--scenario",
        path(&scenario),
        "--session-dir",
        path(&dir.path().join("s")),
        "--toolset",
        "glob,grep",
        "--rules",
        path(&rules),
    ]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert!(text.contains("✓ glob *.txt"), "{text}");
    assert!(text.contains("✗ grep alpha  POLICY_DENIED"), "{text}");
    assert!(text.contains("not today"), "{text}");
}

#[test]
fn bad_input_exits_with_2_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bad.json");
    std::fs::write(
        &scenario,
        r#"{
      "config": {"tools": {"enabled": []}, "permissions": {"preset": "full-auto"}},
      "turns": [],
      "speed": 9
    }"#,
    )
    .unwrap();
    let output = toolrail(&["run", "--scenario", path(&scenario)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("speed") && stderr(&output).contains("bad.json"),
        "{}",
        stderr(&output)
    );

    let unknown_tool = dir.path().join("tool.json");
    std::fs::write(
        &unknown_tool,
        r#"{
      "config": {"tools": {"enabled": ["teleport"]}, "permissions": {"preset": "full-auto"}},
      "turns": []
    }"#,
    )
    .unwrap();
    let output = toolrail(&[
        "run",
        "--scenario",
        path(&unknown_tool),
        "--session-dir",
        path(&dir.path().join("t")),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("`teleport` is neither a shipped tool"),
        "{}",
        stderr(&output)
    );

    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "preset = \"yolo\"\n").unwrap();
    let good = format!("{SHIPPED}approvals.json");
    let output = toolrail(&["run", "--scenario", &good, "--rules", path(&rules)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("rules.toml"),
        "{}",
        stderr(&output)
    );

    // Zero slots would start no call: refused before anything runs, naming the field.
    let stuck = dir.path().join("stuck.json");
    std::fs::write(
        &stuck,
        r#"{
          "config": {
            "tools": {"enabled": ["read"]},
            "limits": {"max_parallel": 0},
            "permissions": {"preset": "full-auto"}
          },
          "turns": []
        }"#,
    )
    .unwrap();
    let output = toolrail(&[
        "run",
        "--scenario",
        path(&stuck),
        "--session-dir",
        path(&dir.path().join("stuck")),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("config.limits.max_parallel: is 0: no call could ever start")
            && stderr(&output).contains("use 1 for strict serial"),
        "{}",
        stderr(&output)
    );

    for args in [
        vec!["replay", "/no/such/session.jsonl"],
        vec!["recover", path(&scenario)],
        vec!["run"],
        vec!["launch"],
    ] {
        let output = toolrail(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // Every command has help.
    for command in ["demo", "run", "replay", "recover", "tools"] {
        let output = toolrail(&[command, "--help"]);
        assert!(output.status.success());
        assert!(stdout(&output).contains("Usage: toolrail"), "{command}");
    }
}

/// A log whose session stopped while `c2` ran: `c1` was called and never started.
fn interrupted_log(dir: &Path) -> std::path::PathBuf {
    let store = JsonlStore::new(dir, Durability::Strict).unwrap();
    let log = store
        .create(SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("crashed"),
            tools: Vec::new(),
            meta: None,
        })
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let draft = |call: Option<&str>, data| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    };
    let call = |id: &str| AssistantBlock::ToolCall {
        call_id: CallId::from(id),
        name: "bash".into(),
        arguments_raw: r#"{"command": "make deploy", "description": "deploy"}"#.into(),
    };
    let recorded = |index: u32| {
        EventData::ToolCall(ToolCall {
            index,
            name: "bash".into(),
            arguments_raw: r#"{"command": "make deploy", "description": "deploy"}"#.into(),
            source: None,
            version: None,
            trace: None,
        })
    };
    let events = vec![
        draft(
            None,
            EventData::TurnStart(TurnStart {
                user: vec![],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        draft(
            None,
            EventData::AssistantMessage(AssistantMessage {
                blocks: vec![call("c1"), call("c2")],
                stop_reason: StopReason::ToolCalls,
            }),
        ),
        draft(Some("c1"), recorded(0)),
        draft(Some("c2"), recorded(1)),
        draft(
            Some("c2"),
            EventData::ToolStart(ToolStart { timeout_ms: None }),
        ),
    ];
    runtime.block_on(async {
        for event in events {
            log.append(event, AppendUrgency::Durable).await.unwrap();
        }
        log.barrier().await.unwrap();
    });
    drop(log);
    store.path_of(&SessionId::new("crashed")).unwrap()
}

#[test]
fn recover_repairs_an_interrupted_log_once_and_replay_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = interrupted_log(dir.path());
    // Before recovery, replay shows the calls as pending.
    let output = toolrail(&["replay", path(&log)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("· $ make deploy"),
        "{}",
        stdout(&output)
    );

    let output = toolrail(&["recover", path(&log)]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert!(text.contains("c1 (bash): TOOL_NOT_STARTED"), "{text}");
    assert!(
        text.contains("c2 (bash): TOOL_OUTCOME_UNKNOWN — it started and may have acted"),
        "{text}"
    );
    assert!(text.contains("turn 1 closed as interrupted"), "{text}");

    let again = toolrail(&["recover", path(&log)]);
    assert!(
        stdout(&again).contains("nothing to repair"),
        "{}",
        stdout(&again)
    );

    let output = toolrail(&["replay", path(&log)]);
    let text = stdout(&output);
    assert!(
        text.contains("✗ $ make deploy  TOOL_OUTCOME_UNKNOWN (by the runtime)"),
        "{text}"
    );
    assert!(text.contains("(turn ended: interrupted: "), "{text}");
}

#[test]
fn tools_lists_the_tool_set() {
    let output = toolrail(&["tools", "--toolset", "read,bash,todo_write"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(text.lines().next().unwrap().starts_with("name"), "{text}");
    let read = text.lines().find(|line| line.starts_with("read ")).unwrap();
    assert!(
        read.contains("read") && read.contains("builtin") && read.contains("yes"),
        "{read}"
    );
    assert!(read.contains("shared: a read claim on the file"), "{read}");
    let bash = text.lines().find(|line| line.starts_with("bash ")).unwrap();
    assert!(bash.contains("execute") && bash.contains(" no "), "{bash}");
    assert_eq!(text.lines().count(), 4, "{text}");
}

#[test]
fn calls_no_live_event_announced_still_get_their_cards() {
    // A message cut by the length limit executes nothing: its calls get TRUNCATED_CALL
    // results without passing the scheduler.
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("cut.json");
    std::fs::write(
        &scenario,
        r#"{
          "config": {"tools": {"enabled": ["read"]}, "permissions": {"preset": "full-auto"}},
          "turns": [
            {
              "user": "go",
              "model": [
                {
                  "tool_calls": [{"id": "c1", "name": "read", "arguments": "{\"val"}],
                  "stop_reason": "length"
                }
              ]
            }
          ]
        }"#,
    )
    .unwrap();
    let output = toolrail(&[
        "run",
        "--scenario",
        path(&scenario),
        "--session-dir",
        path(&dir.path().join("s")),
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let calls = report["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{report}");
    assert_eq!(calls[0]["card"]["status"]["code"], "TRUNCATED_CALL");
    assert_eq!(calls[0]["error"]["code"], "TRUNCATED_CALL");
}

/// A one-shot model server on 127.0.0.1: answers the first request with `stream` as
/// server-sent events and hands back what it was asked.
fn one_answer_server(stream: &'static str) -> (String, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        // Bounded: headers and a small body, until the body's length is in.
        for _ in 0..1_000 {
            let read = socket.read(&mut buffer).unwrap_or(0);
            if read == 0 {
                break;
            }
            request.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&request);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        line.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    break;
                }
            }
        }
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        socket.write_all(head.as_bytes()).unwrap();
        socket.write_all(stream.as_bytes()).unwrap();
        String::from_utf8_lossy(&request).into_owned()
    });
    (url, handle)
}

#[test]
fn run_with_a_provider_drives_a_turn_with_a_real_model_client() {
    let (url, server) = one_answer_server(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Nothing to change.\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .env("NO_COLOR", "1")
        .env("TEST_MODEL_KEY", "sk-cli-test")
        .args([
            "run",
            "--provider",
            "openai",
            "--base-url",
            &url,
            "--model",
            "m1",
        ])
        .args([
            "--api-key-env",
            "TEST_MODEL_KEY",
            "--prompt",
            "Anything to fix?",
        ])
        .args(["--workspace", path(dir.path()), "--approve", "never"])
        .output()
        .unwrap();
    let text = stdout(&output);
    assert!(output.status.success(), "{text}\n{}", stderr(&output));
    assert!(text.starts_with("Nothing to change.\n"), "{text}");
    // The session is kept in the workspace, under a readable id.
    let kept: Vec<_> = std::fs::read_dir(dir.path().join(".toolrail/sessions"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0].starts_with("20") && kept[0].ends_with(".jsonl"),
        "{kept:?}"
    );
    assert!(text.contains(kept[0].trim_end_matches(".jsonl")), "{text}");
    let request = server.join().unwrap();
    assert!(
        request.contains("authorization: Bearer sk-cli-test"),
        "{request}"
    );
    assert!(
        request.contains("\"content\":\"Anything to fix?\""),
        "{request}"
    );
    // The shipped tools were offered.
    for tool in [
        "\"name\":\"bash\"",
        "\"name\":\"edit\"",
        "\"name\":\"grep\"",
    ] {
        assert!(request.contains(tool), "{tool}: {request}");
    }
    assert!(!text.contains("sk-cli-test") && !stderr(&output).contains("sk-cli-test"));
}

#[test]
fn run_with_a_provider_refuses_incomplete_or_unknown_settings() {
    let output = toolrail(&["run", "--provider", "openai", "--prompt", "hi"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--model"), "{}", stderr(&output));
    let output = toolrail(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "m",
        "--prompt",
        "hi",
        "--preset",
        "yolo",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("untrusted, workspace, never-ask, full-auto"),
        "{}",
        stderr(&output)
    );
    let output = toolrail(&[
        "run",
        "--provider",
        "anthropic",
        "--model",
        "m",
        "--prompt",
        "hi",
        "--base-url",
        "http://127.0.0.1:9",
        "--api-key-env",
        "TOOLRAIL_NEVER_SET_KEY",
        "--approve",
        "never",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("TOOLRAIL_NEVER_SET_KEY"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn mcp_list_shows_a_server_s_tools_as_registered_and_refuses_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("servers.json");
    std::fs::write(&bad, r#"{"mcpServers": {"x": {"comand": "node"}}}"#).unwrap();
    let output = toolrail(&["mcp", "list", "--config", path(&bad)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("servers.json"),
        "{}",
        stderr(&output)
    );
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ci-npm/node_modules");
    let everything = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the MCP test servers are missing: .ci/run installs them"
        );
        return;
    }
    let config = dir.path().join("servers.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything.to_str().unwrap()
        ),
    )
    .unwrap();
    let output = toolrail(&["mcp", "list", "--config", path(&config)]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}\n{}", stderr(&output));
    assert!(text.contains("everything: running"), "{text}");
    assert!(text.contains("mcp__everything__echo"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_lists_a_postgres_store_with_states_and_lease_holders() {
    use toolrail_session_store::{PostgresStore, SessionStore};
    let Some(server) = toolrail_test_support::pg::PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let start = |id: &str| SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools: Vec::new(),
        meta: None,
    };
    drop(store.create(start("alpha")).unwrap());
    let lease = store
        .acquire(
            &SessionId::new("beta"),
            "worker-7",
            std::time::Duration::from_secs(60),
        )
        .unwrap();
    drop(store.create_leased(start("beta"), &lease).unwrap());
    // Queued, with no event yet: listed all the same.
    store.enqueue(&SessionId::new("gamma"), "{}").unwrap();
    let output = toolrail(&["sessions", "--store", &url]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}\n{}", stderr(&output));
    let line = |id: &str| {
        text.lines()
            .find(|line| line.starts_with(id))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        line("alpha").contains("open") && line("alpha").ends_with("none"),
        "{text}"
    );
    assert!(line("beta").ends_with("held by worker-7"), "{text}");
    assert!(
        line("gamma").contains("(no events)") && line("gamma").contains(" waiting "),
        "{text}"
    );
    let output = toolrail(&["sessions", "--store", "/tmp/sessions"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn sandbox_says_which_tier_runs_and_why_one_cannot() {
    let usable = toolrail(&["sandbox"]);
    let text = stdout(&usable);
    assert!(usable.status.success(), "{text}\n{}", stderr(&usable));
    assert!(text.contains("sandbox tier `namespaces`: usable"), "{text}");
    assert!(text.contains("Landlock"), "{text}");
    let missing = toolrail(&[
        "sandbox",
        "--tier",
        "bubblewrap",
        "--bwrap",
        "/no/such/bwrap",
    ]);
    let text = stdout(&missing);
    assert_eq!(missing.status.code(), Some(1), "{text}");
    assert!(
        text.contains("UNAVAILABLE") && text.contains("apt-get install bubblewrap"),
        "{text}"
    );
    assert!(stderr(&missing).contains("no sandbox tier is usable"));
}

/// A reader that leaves before the output ends (`toolrail tools | head -1`) ends the program
/// quietly, as any Unix tool: no panic on stderr, SIGPIPE's status.
#[test]
fn a_closed_stdout_ends_the_output_without_a_panic() {
    let (reader, writer) = std::io::pipe().unwrap();
    // The reader is gone before the first line is written.
    drop(reader);
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("toolrail"))
        .arg("tools")
        .env("NO_COLOR", "1")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let said = stderr(&output);
    assert!(!said.contains("panicked"), "{said}");
    assert_eq!(output.status.code(), Some(141), "{said}");
}
