//! `toolrail acp` driven by the official ACP TypeScript SDK (`@agentclientprotocol/sdk`,
//! which `.ci/run` installs under `target/ci-npm`) against a scripted model server on
//! 127.0.0.1: streamed text, a call allowed once, a call rejected, a batch cancelled while
//! its first call runs, then the session loaded in a new process and prompted again. What
//! the client received is checked against the session's JSONL log.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};

/// Where `.ci/run` installs the SDK, relative to the workspace root.
const CI_MODULES: &str = "target/ci-npm/node_modules";

/// The SDK's folder, or `None` (outside CI only) when node or the SDK is missing.
fn sdk_or_skip() -> Option<PathBuf> {
    let dir = std::env::var_os("TOOLRAIL_ACP_SDK").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(CI_MODULES)
                .join("@agentclientprotocol/sdk")
        },
        PathBuf::from,
    );
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    let found = node && dir.join("package.json").is_file();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "node or the ACP SDK is missing (node found: {node}): .ci/run installs @agentclientprotocol/sdk into {CI_MODULES}"
        );
        eprintln!(
            "node or @agentclientprotocol/sdk not installed (set TOOLRAIL_ACP_SDK): not run here"
        );
        return None;
    }
    Some(dir)
}

/// The model's answers: words and a call that asks, words; another call that asks, words;
/// words and a batch of two slow calls (allowed by a rule), cancelled; after the load, words.
fn answers() -> Vec<Answer> {
    let bash = |index, id, command: &str| {
        call_chunk(
            index,
            id,
            "bash",
            &format!(r#"{{"command": "{command}", "description": "d"}}"#),
        )
    };
    vec![
        Answer::new(vec![
            text_chunk("I will "),
            text_chunk("make it."),
            bash(0, "t1", "touch made.txt"),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![text_chunk("Made."), finish_chunk("stop")]),
        Answer::new(vec![
            text_chunk("Another."),
            bash(0, "t2", "touch other.txt"),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![text_chunk("Not made."), finish_chunk("stop")]),
        Answer::new(vec![
            text_chunk("Waiting."),
            bash(0, "t3", "sleep 30"),
            bash(1, "t4", "sleep 31"),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![text_chunk("Resumed."), finish_chunk("stop")]),
    ]
}

/// The session's log, one JSON value per event.
fn log_events(workspace: &Path, session: &str) -> Vec<Value> {
    let log = workspace
        .join(".toolrail/sessions")
        .join(format!("{session}.jsonl"));
    std::fs::read_to_string(&log)
        .unwrap_or_else(|error| panic!("{}: {error}", log.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Each call's last `tool_call_update` with a final status, and the text of the agent's
/// chunks, among the updates of `phase`.
fn seen(updates: &[Value], phase: &str) -> (BTreeMap<String, Value>, String, Vec<String>) {
    let mut finals = BTreeMap::new();
    let mut text = String::new();
    let mut user = Vec::new();
    for seen in updates.iter().filter(|seen| seen["phase"] == phase) {
        let update = &seen["update"];
        match update["sessionUpdate"].as_str().unwrap() {
            "agent_message_chunk" => text.push_str(update["content"]["text"].as_str().unwrap()),
            "user_message_chunk" => {
                user.push(update["content"]["text"].as_str().unwrap().to_owned())
            }
            "tool_call_update"
                if matches!(update["status"].as_str(), Some("completed" | "failed")) =>
            {
                finals.insert(
                    update["toolCallId"].as_str().unwrap().to_owned(),
                    update.clone(),
                );
            }
            _ => {}
        }
    }
    (finals, text, user)
}

#[test]
fn an_acp_client_made_with_the_official_sdk_sees_what_the_log_holds() {
    let Some(sdk) = sdk_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("work");
    std::fs::create_dir(&workspace).unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, requests) = scripted_server(answers(), gate);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.mjs");
    let mut child = Command::new("node")
        .arg(&script)
        .arg(&sdk)
        .arg(env!("CARGO_BIN_EXE_toolrail"))
        .arg(&workspace)
        .args([
            "--",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            &url,
        ])
        .args(["--sandbox", "workspace-write", "--allow", "bash(sleep *)"])
        .env("OPENAI_API_KEY", "test")
        .env("NO_COLOR", "1")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: the client gives up after 90 s; this waits a little longer, then kills it.
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let transcript: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "no transcript ({error}): {}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    assert!(
        output.status.success(),
        "{}\n{stderr}",
        serde_json::to_string_pretty(&transcript).unwrap()
    );
    let session = transcript["sessionId"].as_str().unwrap();
    let updates = transcript["updates"].as_array().unwrap();

    // Every turn ended as it should have; both processes exited cleanly.
    let stops: Vec<(&str, &str)> = transcript["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|prompt| {
            (
                prompt["text"].as_str().unwrap(),
                prompt["stopReason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        stops,
        [
            ("Make the file", "end_turn"),
            ("Make another", "end_turn"),
            ("Wait a while", "cancelled"),
            ("Go on", "end_turn"),
        ]
    );
    assert_eq!(transcript["exits"], serde_json::json!([0, 0]), "{stderr}");
    assert_eq!(transcript["liveInitialize"]["protocolVersion"], 1);
    assert_eq!(
        transcript["liveInitialize"]["agentCapabilities"]["loadSession"],
        true
    );

    // The two questions, with the options toolrail offers, answered once yes and once no.
    let permissions = transcript["permissions"].as_array().unwrap();
    let asked: Vec<(&str, &str, &str)> = permissions
        .iter()
        .map(|asked| {
            (
                asked["toolCallId"].as_str().unwrap(),
                asked["title"].as_str().unwrap(),
                asked["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("t1", "bash: touch made.txt", "execute"),
            ("t2", "bash: touch other.txt", "execute")
        ]
    );
    assert_eq!(
        permissions[0]["options"],
        serde_json::json!([
            ["allow_once", "allow_once"],
            ["allow_for_session", "allow_always"],
            ["reject", "reject_once"]
        ])
    );
    assert!(
        permissions
            .iter()
            .all(|asked| asked["announcedFirst"] == true),
        "a call is announced (tool_call) before the client is asked about it"
    );
    assert!(workspace.join("made.txt").is_file());
    assert!(!workspace.join("other.txt").exists(), "a rejected call ran");
    assert_eq!(transcript["cancelled"], "t3");

    // The log agrees: the approvals' answers, every call's outcome, the words.
    let events = log_events(&workspace, session);
    let decided: Vec<(&str, &str)> = events
        .iter()
        .filter(|event| event["kind"] == "approval/decided")
        .map(|event| {
            (
                event["call_id"].as_str().unwrap(),
                event["data"]["answer"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(decided, [("t1", "allowed_once"), ("t2", "rejected")]);
    let results: BTreeMap<String, Option<String>> = events
        .iter()
        .filter(|event| event["kind"] == "tool/result")
        .map(|event| {
            (
                event["call_id"].as_str().unwrap().to_owned(),
                event["data"]["error"]["code"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        results.keys().collect::<Vec<_>>(),
        ["t1", "t2", "t3", "t4"],
        "every call has an outcome in the log"
    );
    let codes: Vec<Option<&str>> = results.values().map(Option::as_deref).collect();
    // t3's `in_progress` triggered the cancel, and it is shown only once its `tool/start`
    // is in the log: it was running when cancelled, never "not executed" (before, it was
    // shown at launch, and a loaded machine let the cancel beat the start).
    assert!(
        events
            .iter()
            .any(|event| event["kind"] == "tool/start" && event["call_id"] == "t3"),
        "{events:#?}"
    );
    let t3 = "ABORTED";
    assert_eq!(
        codes,
        [
            None,
            Some("APPROVAL_REJECTED"),
            Some(t3),
            Some("NOT_EXECUTED")
        ],
        "allowed and ran; rejected; stopped while running (or cancelled before it started); never started"
    );
    let (live, live_text, _) = seen(updates, "live");
    let shown: BTreeMap<String, Option<String>> = live
        .iter()
        .map(|(id, update)| {
            assert_eq!(
                update["status"],
                if results[id].is_some() {
                    "failed"
                } else {
                    "completed"
                },
                "{id}"
            );
            (
                id.clone(),
                update["rawOutput"]["error"]["code"]
                    .as_str()
                    .map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        shown, results,
        "the client saw each call end as the log has it"
    );
    let turn_ends: Vec<&str> = events
        .iter()
        .filter(|event| event["kind"] == "turn/end")
        .map(|event| event["data"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        turn_ends,
        ["completed", "completed", "aborted", "completed"]
    );
    let logged_text: String = events
        .iter()
        .filter(|event| event["kind"] == "assistant/message")
        .flat_map(|event| event["data"]["blocks"].as_array().unwrap())
        .filter_map(|block| block["text"].as_str())
        .collect();
    assert_eq!(
        logged_text,
        "I will make it.Made.Another.Not made.Waiting.Resumed."
    );
    assert_eq!(live_text, "I will make it.Made.Another.Not made.Waiting.");

    // The load replayed the log (the prompts, the words, each call's final status) before
    // the next turn streamed.
    let (loaded, loaded_text, loaded_user) = seen(updates, "load");
    assert!(transcript["loadedUpdates"].as_u64().unwrap() > 0);
    assert_eq!(
        loaded_user,
        ["Make the file", "Make another", "Wait a while"]
    );
    assert_eq!(
        loaded_text,
        "I will make it.Made.Another.Not made.Waiting.Resumed."
    );
    let statuses = |finals: &BTreeMap<String, Value>| -> Vec<(String, Value)> {
        finals
            .iter()
            .map(|(id, update)| (id.clone(), update["status"].clone()))
            .collect()
    };
    assert_eq!(statuses(&loaded), statuses(&live));
    let announced = |phase: &str| -> Vec<(String, String, String)> {
        updates
            .iter()
            .filter(|seen| seen["phase"] == phase && seen["update"]["sessionUpdate"] == "tool_call")
            .map(|seen| {
                let update = &seen["update"];
                let field = |name: &str| update[name].as_str().unwrap().to_owned();
                (field("toolCallId"), field("title"), field("kind"))
            })
            .collect()
    };
    assert_eq!(announced("live"), announced("load"));
    assert_eq!(
        announced("live")[3],
        (
            "t4".to_owned(),
            "bash: sleep 31".to_owned(),
            "execute".to_owned()
        ),
        "a call the cancel kept from being prepared is named from the model's message"
    );
    // The model was asked six times: nothing more ran after the cancel.
    assert_eq!(requests.try_iter().count(), 6);
}
