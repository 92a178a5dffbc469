//! The parts a configuration turns on, through the builder alone: code mode, whose
//! programs' tool calls re-enter the pipeline; deferred tools found through `tool_search`,
//! which stay loaded when the session resumes; and sampling options that reach the wire.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use toolrail_runtime::scenario::ScriptedModel;
use toolrail_runtime::{Agent, CodeLanguage, PresetName, SessionConfig, Store};
use toolrail_session_log::{EventData, SessionId};

fn config(folder: &tempfile::TempDir) -> SessionConfig {
    let workspace = folder.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(workspace.join("b.txt"), "beta\n").unwrap();
    let mut config = SessionConfig::default();
    config.workspace.roots = vec![workspace];
    config.permissions.preset = Some(PresetName::Workspace);
    config
}

fn store(folder: &tempfile::TempDir) -> Store {
    Store::jsonl(folder.path().join("sessions")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_s_tool_calls_reenter_the_pipeline_as_calls_of_their_own() {
    let folder = tempfile::tempdir().unwrap();
    let mut config = config(&folder);
    config.tools.enabled = vec!["glob".to_owned(), "read".to_owned()];
    config.code.languages = vec![CodeLanguage::Javascript];
    let program = r#"const found = await glob({pattern: "*.txt"}); const first = await read({path: "a.txt"}); return {found: found, first: first};"#;
    let arguments =
        serde_json::json!({"code": program, "description": "look", "language": "javascript"})
            .to_string();
    let model = Arc::new(ScriptedModel::new([
        ScriptedModel::tool_call("c1", "run_code", &arguments),
        ScriptedModel::text("done"),
    ]));
    // `run_code` executes: under the workspace preset it asks, unless a rule allows it (its
    // calls are judged one by one all the same).
    let agent = Agent::builder()
        .config(config)
        .allow("run_code")
        .store(store(&folder))
        .session_id("code")
        .model_client(model.clone())
        .build()
        .await
        .unwrap();
    let answer = agent.prompt("look around").await.unwrap();
    let record = &answer.results[0];
    assert!(!record.is_error(), "{}", record.text());
    assert!(record.text().contains("a.txt"), "{}", record.text());
    assert!(
        record.text().contains("\"total_lines\":1"),
        "{}",
        record.text()
    );
    // The SDK is in the system prompt, and each binding call was a call of its own.
    let system = model.requests()[0].system.clone().unwrap_or_default();
    assert!(system.contains("glob"), "{system}");
    let events = agent.store().read(&SessionId::new("code")).unwrap();
    let dispatched: Vec<String> = events
        .iter()
        .filter(|event| matches!(event.data, EventData::CodeDispatch(_)))
        .map(|event| event.call_id.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(dispatched, ["c1:code:1", "c1:code:2"]);
    assert_eq!(
        answer.results.len(),
        1,
        "a program's calls are part of its result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_tool_joins_once_found_and_stays_loaded_after_a_resume() {
    let folder = tempfile::tempdir().unwrap();
    let mut config = config(&folder);
    config.tools.enabled = vec!["read".to_owned(), "grep".to_owned()];
    config.tools.deferred = vec!["grep".to_owned()];
    let model = Arc::new(ScriptedModel::new([
        ScriptedModel::tool_call("c1", "tool_search", r#"{"query": "grep search contents"}"#),
        ScriptedModel::tool_call("c2", "grep", r#"{"pattern": "beta"}"#),
        ScriptedModel::text("found"),
    ]));
    let store = store(&folder);
    let agent = Agent::builder()
        .config(config.clone())
        .store(store.clone())
        .session_id("deferred")
        .model_client(model.clone())
        .build()
        .await
        .unwrap();
    let answer = agent.prompt("find beta").await.unwrap();
    let offered = |request: usize| -> Vec<String> {
        model.requests()[request]
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect()
    };
    assert_eq!(
        offered(0),
        ["read", "tool_search"],
        "grep waits to be found"
    );
    assert_eq!(offered(1), ["grep", "read", "tool_search"]);
    assert!(
        answer.results[1].text().contains("b.txt"),
        "{}",
        answer.results[1].text()
    );
    drop(agent);

    let later = Arc::new(ScriptedModel::new([ScriptedModel::text("still here")]));
    let resumed = Agent::builder()
        .config(config)
        .model_client(later.clone())
        .resume(&store, &SessionId::new("deferred"))
        .await
        .unwrap();
    assert!(resumed.recovery.is_empty(), "{}", resumed.recovery);
    resumed.agent.prompt("and now?").await.unwrap();
    let names: Vec<String> = later.requests()[0]
        .tools
        .iter()
        .map(|tool| tool.name.clone())
        .collect();
    assert_eq!(
        names,
        ["grep", "read", "tool_search"],
        "loaded tools stay loaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_names_what_the_configuration_gets_wrong_before_anything_is_written() {
    let folder = tempfile::tempdir().unwrap();
    let mut config = config(&folder);
    config.workspace.roots = vec![folder.path().join("no-such-folder")];
    let error = Agent::builder()
        .config(config)
        .store(store(&folder))
        .model_client(Arc::new(ScriptedModel::new([])))
        .build()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("`workspace.roots[0]`")
            && error.to_string().contains("give a folder that exists"),
        "{error}"
    );
    let error = Agent::builder()
        .workspace([folder.path()])
        .store(store(&folder))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(error, toolrail_runtime::BuildError::NoModel),
        "{error}"
    );
    assert_eq!(
        std::fs::read_dir(folder.path().join("sessions"))
            .unwrap()
            .count(),
        0,
        "no session was started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_configuration_keeps_no_secret_and_resume_says_what_to_do() {
    let folder = tempfile::tempdir().unwrap();
    let mut config = config(&folder);
    config.mcp_servers.insert(
        "vault".to_owned(),
        serde_json::from_value(serde_json::json!({
            "command": "/nonexistent/mcp-server", "start": "lazy",
            "env": {"VAULT_TOKEN": "s3cr3t-token-value"}
        }))
        .unwrap(),
    );
    let store = store(&folder);
    let agent = Agent::builder()
        .config(config)
        .store(store.clone())
        .session_id("secret")
        .model_client(Arc::new(ScriptedModel::new([])))
        .build()
        .await
        .unwrap();
    drop(agent);
    let log = std::fs::read_to_string(folder.path().join("sessions/secret.jsonl")).unwrap();
    assert!(log.contains("VAULT_TOKEN"), "the variable's name is kept");
    assert!(!log.contains("s3cr3t-token-value"), "{log}");
    let error = Agent::resume(&store, &SessionId::new("secret"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("vault") && error.contains("Agent::builder().config(...).resume(...)"),
        "{error}"
    );
}
