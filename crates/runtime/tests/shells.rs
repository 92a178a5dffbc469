//! Background shells in a whole session: the scheduler runs reads of two shells side by
//! side and keeps a write and a read of one shell in model order; input written to a shell
//! that reads commands is judged by the rules as a `bash` command (a deny holds), input to
//! another program is not.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use serde_json::json;
use toolrail_interaction::ScriptedApprovals;
use toolrail_runtime::scenario::ScriptedModel;
use toolrail_runtime::{Agent, PresetName, SessionConfig, Store};
use toolrail_session_log::event::{AssistantBlock, AssistantMessage, StopReason};
use toolrail_session_log::{Event, EventData, SessionId};
use toolrail_tools_core::ApprovalAnswer;

fn config(folder: &tempfile::TempDir) -> SessionConfig {
    let workspace = folder.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let mut config = SessionConfig::default();
    config.workspace.roots = vec![workspace];
    config.permissions.preset = Some(PresetName::FullAuto);
    config
}

/// One assistant message with several calls: `(id, tool, arguments)`.
fn calls(list: &[(&str, &str, serde_json::Value)]) -> AssistantMessage {
    AssistantMessage {
        blocks: list
            .iter()
            .map(|(id, name, arguments)| AssistantBlock::ToolCall {
                call_id: (*id).into(),
                name: (*name).to_owned(),
                arguments_raw: arguments.to_string(),
            })
            .collect(),
        stop_reason: StopReason::ToolCalls,
    }
}

fn background(command: &str) -> serde_json::Value {
    json!({"command": command, "description": "server", "background": true})
}

/// The `seq` of the first event of `kind` for `call`.
fn seq_of(events: &[Event], kind: &str, call: &str) -> u64 {
    events
        .iter()
        .find(|event| {
            event.data.kind() == kind
                && event.call_id.as_ref().is_some_and(|id| id.as_str() == call)
        })
        .map(|event| event.seq)
        .unwrap_or_else(|| panic!("no {kind} for {call}"))
}

/// The result the log holds for `call`.
fn result_of(events: &[Event], call: &str) -> Arc<toolrail_session_log::ToolResultRecord> {
    events
        .iter()
        .find_map(|event| match &event.data {
            EventData::ToolResult(record)
                if event.call_id.as_ref().is_some_and(|id| id.as_str() == call) =>
            {
                Some(Arc::clone(record))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call}"))
}

/// A rule for the session, and who answers its approvals.
enum Policy {
    None,
    Deny(&'static str),
    Ask(&'static str, Arc<ScriptedApprovals>),
}

async fn session(
    folder: &tempfile::TempDir,
    config: SessionConfig,
    script: Vec<AssistantMessage>,
    policy: Policy,
) -> (Agent, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new(script));
    let mut builder = Agent::builder()
        .config(config)
        .store(Store::jsonl(folder.path().join("sessions")).unwrap())
        .session_id("shells")
        .model_client(model.clone());
    match policy {
        Policy::None => {}
        Policy::Deny(rule) => builder = builder.deny(rule),
        Policy::Ask(rule, approvals) => builder = builder.ask(rule).approvals(approvals),
    }
    (builder.build().await.unwrap(), model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_two_shells_overlap_and_a_write_and_a_read_of_one_keep_model_order() {
    let folder = tempfile::tempdir().unwrap();
    // Reads that wait for a line that never comes: each holds its slot for its whole wait.
    let wait = |id: &str| json!({"id": id, "filter": "never-printed", "wait_ms": 1500});
    let script = vec![
        calls(&[
            ("c1", "bash", background("echo one; exec sleep 44.1")),
            ("c2", "bash", background("cat")),
        ]),
        calls(&[
            ("c3", "shell_output", wait("sh1")),
            ("c4", "shell_output", wait("sh2")),
        ]),
        calls(&[
            (
                "c5",
                "shell_write",
                json!({"id": "sh2", "input": "hello\n", "wait_ms": 5000}),
            ),
            ("c6", "shell_output", json!({"id": "sh2"})),
        ]),
        ScriptedModel::text("done"),
    ];
    let (agent, _) = session(&folder, config(&folder), script, Policy::None).await;
    let answer = agent.prompt("start and read them").await.unwrap();
    assert_eq!(answer.text, "done");
    let events = agent.store().read(&SessionId::new("shells")).unwrap();
    // Two shells: the second read started before the first one's result.
    assert!(
        seq_of(&events, "tool/start", "c4") < seq_of(&events, "tool/result", "c3"),
        "reads of different shells run side by side"
    );
    // One shell: the read starts only after the write settled, and reads what the write
    // left (its answer was the write's to report).
    assert!(seq_of(&events, "tool/start", "c6") > seq_of(&events, "tool/start", "c5"));
    let result = |call: &str| result_of(&events, call);
    let written = result("c5");
    assert!(written.text().starts_with("hello\n"), "{}", written.text());
    let read = result("c6");
    assert!(!read.text().contains("hello"), "{}", read.text());
    assert_eq!(
        read.value.as_ref().unwrap()["since"],
        written.value.as_ref().unwrap()["cursor"]
    );
    let killed = toolrail_test_support::processes::live_with(&["44.1".to_owned()]);
    drop(agent);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !toolrail_test_support::processes::live_with(&["sleep 44.1".to_owned()]).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "a shell outlived its agent: {killed:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_to_a_shell_is_judged_by_the_rules_as_its_command_line() {
    let folder = tempfile::tempdir().unwrap();
    let marker = folder.path().join("workspace").join("fetched");
    let script = vec![
        ScriptedModel::tool_call("c1", "bash", &background("exec sh").to_string()),
        calls(&[(
            "c2",
            "shell_write",
            json!({"id": "sh1", "input": format!("curl http://127.0.0.1:9/ ; touch {}\n", marker.display())}),
        )]),
        // A rejection stops its batch: the next write comes in the next answer.
        calls(&[(
            "c3",
            "shell_write",
            json!({"id": "sh1", "input": "echo fine\n"}),
        )]),
        ScriptedModel::text("done"),
    ];
    let mut config = config(&folder);
    config.sandbox.mode = toolrail_runtime::SandboxModeName::WorkspaceWrite;
    // The shell's start is asked about too (its commands are read at run time): allowed;
    // the curl line is asked about and rejected; `echo fine` is asked about by nothing.
    let approvals = Arc::new(ScriptedApprovals::new([
        ApprovalAnswer::AllowedOnce,
        ApprovalAnswer::Rejected { reason: None },
    ]));
    let policy = Policy::Ask("bash(curl *)", Arc::clone(&approvals));
    let (agent, _) = session(&folder, config, script, policy).await;
    agent.prompt("talk to the shell").await.unwrap();
    let events = agent.store().read(&SessionId::new("shells")).unwrap();
    let text = |call: &str| result_of(&events, call).text();
    let code = |call: &str| {
        result_of(&events, call)
            .error_code()
            .map(|code| code.as_str().to_owned())
    };
    assert_eq!(code("c1"), None, "{}", text("c1"));
    assert_eq!(
        code("c2").as_deref(),
        Some("APPROVAL_REJECTED"),
        "{}",
        text("c2")
    );
    let asked = approvals.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[1].reason.contains("judged as a `bash` command"),
        "{:?}",
        asked[1]
    );
    assert!(
        !marker.exists(),
        "the rejected input never reached the shell"
    );
    assert_eq!(code("c3"), None, "{}", text("c3"));
    assert!(text("c3").contains("fine"), "{}", text("c3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_written_to_a_repl_is_refused_by_a_deny_rule_and_data_to_a_program_is_not() {
    let folder = tempfile::tempdir().unwrap();
    let script = vec![
        calls(&[
            ("c1", "bash", background("python3 -q -i")),
            ("c2", "bash", background("cat")),
        ]),
        calls(&[
            (
                "c3",
                "shell_write",
                json!({"id": "sh1", "input": "print('code')\n"}),
            ),
            (
                "c4",
                "shell_write",
                json!({"id": "sh2", "input": "curl is only text to cat\n"}),
            ),
        ]),
        ScriptedModel::text("done"),
    ];
    let (agent, _) = session(
        &folder,
        config(&folder),
        script,
        Policy::Deny("bash(curl *)"),
    )
    .await;
    agent.prompt("talk to the shells").await.unwrap();
    let events = agent.store().read(&SessionId::new("shells")).unwrap();
    let text = |call: &str| result_of(&events, call).text();
    let code = |call: &str| {
        result_of(&events, call)
            .error_code()
            .map(|code| code.as_str().to_owned())
    };
    for call in ["c1", "c2"] {
        assert_eq!(code(call), None, "{call}: {}", text(call));
    }
    // Code a REPL runs could run curl: the deny rule over commands refuses it.
    assert_eq!(
        code("c3").as_deref(),
        Some("POLICY_DENIED"),
        "{}",
        text("c3")
    );
    assert!(
        text("c3").contains("judged as a `bash` command"),
        "{}",
        text("c3")
    );
    // Another program's input is data.
    assert_eq!(code("c4"), None, "cat is no interpreter: {}", text("c4"));
    assert!(
        text("c4").contains("curl is only text to cat"),
        "{}",
        text("c4")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_judged_as_the_terminal_will_run_it_not_as_written() {
    let folder = tempfile::tempdir().unwrap();
    let marker = folder.path().join("workspace").join("made");
    let marker = marker.display().to_string();
    let write = |id: &str, arguments: serde_json::Value| calls(&[(id, "shell_write", arguments)]);
    let script = vec![
        ScriptedModel::tool_call("c1", "bash", &background("exec sh").to_string()),
        // A carriage return ends a line on a terminal: two commands, not one `echo`.
        write(
            "c2",
            json!({"id": "sh1", "input": format!("echo hi\rtouch {marker}\r")}),
        ),
        // A command typed over two writes is judged whole when its line ends.
        write("c3", json!({"id": "sh1", "input": "tou"})),
        write(
            "c4",
            json!({"id": "sh1", "input": format!("ch {marker}\n")}),
        ),
        // Keys that edit the line or recall history cannot be read as a command.
        write("c5", json!({"id": "sh1", "keys": ["up", "enter"]})),
        write("c6", json!({"id": "sh1", "input": "\u{15}echo fine\n"})),
        ScriptedModel::text("done"),
    ];
    let mut config = config(&folder);
    config.sandbox.mode = toolrail_runtime::SandboxModeName::WorkspaceWrite;
    let approvals = Arc::new(ScriptedApprovals::new([
        ApprovalAnswer::AllowedOnce,
        ApprovalAnswer::Rejected { reason: None },
        ApprovalAnswer::Rejected { reason: None },
        ApprovalAnswer::Rejected { reason: None },
        ApprovalAnswer::Rejected { reason: None },
    ]));
    let policy = Policy::Ask("bash(touch *)", Arc::clone(&approvals));
    let (agent, _) = session(&folder, config, script, policy).await;
    agent.prompt("type into the shell").await.unwrap();
    let events = agent.store().read(&SessionId::new("shells")).unwrap();
    let code = |call: &str| {
        result_of(&events, call)
            .error_code()
            .map(|code| code.as_str().to_owned())
    };
    let rejected = Some("APPROVAL_REJECTED".to_owned());
    assert_eq!(code("c1"), None);
    assert_eq!(code("c2"), rejected, "{}", result_of(&events, "c2").text());
    assert_eq!(code("c3"), None, "an unfinished `tou` runs nothing yet");
    assert_eq!(code("c4"), rejected, "{}", result_of(&events, "c4").text());
    assert_eq!(code("c5"), rejected, "{}", result_of(&events, "c5").text());
    assert_eq!(code("c6"), rejected, "{}", result_of(&events, "c6").text());
    assert_eq!(approvals.asked().len(), 5);
    assert!(!std::path::Path::new(&marker).exists());
}
