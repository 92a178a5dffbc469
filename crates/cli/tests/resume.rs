//! `toolrail resume` after a SIGKILL: a `run --prompt` is killed while a command runs; the
//! resume says what recovery repaired, the model is asked again with the whole
//! conversation, and the session ends with an honest outcome for every call — in a JSONL
//! folder and in PostgreSQL. `replay`, `recover --dry-run` and `sessions` name the same
//! session by id in either store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{text, toolrail};
use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};
use toolrail_test_support::pg::PgServer;

/// Runs a prompt whose answer starts a long command, and SIGKILLs toolrail once the
/// command runs (its `tool/start` is in the log, `events` says). The session's id, from
/// the log's name or the store.
fn killed_mid_call(dir: &Path, url: &str, store: Option<&str>, started: impl Fn() -> bool) {
    let mut args = vec![
        "run",
        "--prompt",
        "Run the long job",
        "--provider",
        "openai",
        "--model",
        "scripted",
        "--base-url",
        url,
        "--approve",
        "rules-only",
        "--allow",
        "bash(sleep*)",
    ];
    if let Some(store) = store {
        args.extend(["--store", store]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .current_dir(dir)
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.join("state"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started() {
        assert!(Instant::now() < deadline, "the command never started");
        assert!(child.try_wait().unwrap().is_none(), "toolrail ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The model's two answers: a long command, then (after the resume) words.
fn answers() -> Vec<Answer> {
    vec![
        Answer::new(vec![
            text_chunk("Starting it."),
            call_chunk(
                0,
                "k1",
                "bash",
                r#"{"command": "sleep 60", "description": "the long job"}"#,
            ),
            finish_chunk("tool_calls"),
        ]),
        Answer::new(vec![
            text_chunk("It was interrupted; I will check before retrying."),
            finish_chunk("stop"),
        ]),
    ]
}

/// What a resumed run must show and ask.
fn check_resumed(resumed: &Output, second_request: &str) {
    let shown = text(resumed);
    assert!(resumed.status.success(), "{shown}");
    assert!(
        shown.contains("user: Run the long job"),
        "the conversation so far: {shown}"
    );
    assert!(
        shown.contains("k1") && shown.contains("bash"),
        "recovery names the call: {shown}"
    );
    assert!(
        shown.contains("TOOL_OUTCOME_UNKNOWN") || shown.contains("may have acted"),
        "recovery says the command may have acted: {shown}"
    );
    assert!(
        shown.contains("It was interrupted; I will check"),
        "{shown}"
    );
    // The model read the repaired result and the new prompt with the old conversation.
    assert!(
        second_request.contains("Run the long job"),
        "{second_request}"
    );
    assert!(
        second_request.contains("it may have acted"),
        "{second_request}"
    );
    assert!(second_request.contains("Go on"), "{second_request}");
}

#[test]
fn resume_goes_on_with_a_jsonl_session_after_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (_gate_open, gate) = mpsc::channel();
    let (url, requests) = scripted_server(answers(), gate);
    let sessions = dir.path().join(".toolrail/sessions");
    killed_mid_call(dir.path(), &url, None, || {
        std::fs::read_dir(&sessions).ok().is_some_and(|entries| {
            entries.filter_map(Result::ok).any(|entry| {
                std::fs::read_to_string(entry.path())
                    .is_ok_and(|log| log.contains("\"tool/start\""))
            })
        })
    });
    let log = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            path.extension()
                .is_some_and(|extension| extension == "jsonl")
        })
        .unwrap();
    let id = log.file_stem().unwrap().to_str().unwrap().to_owned();

    // Listed, and what recovery would do is said without writing anything.
    let listed = toolrail(dir.path(), &["sessions"]);
    assert!(
        text(&listed).contains(&id) && text(&listed).contains("Run the long job"),
        "{}",
        text(&listed)
    );
    let before = std::fs::read(&log).unwrap();
    let dry = toolrail(dir.path(), &["recover", &id, "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(
        text(&dry).contains("would repair") && text(&dry).contains("k1"),
        "{}",
        text(&dry)
    );
    assert_eq!(
        std::fs::read(&log).unwrap(),
        before,
        "a dry run writes nothing"
    );

    let resumed = toolrail(
        dir.path(),
        &["resume", &id, "--prompt", "Go on", "--approve", "never"],
    );
    let asked: Vec<String> = requests.try_iter().collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    check_resumed(&resumed, &asked[1]);

    // Every call has its result, and the turn after the resume completed.
    let replayed = toolrail(dir.path(), &["replay", &id, "--json"]);
    assert!(replayed.status.success(), "{}", text(&replayed));
    let report: serde_json::Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(report["calls"][0]["call_id"], "k1");
    assert_eq!(report["calls"][0]["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
    assert_eq!(
        report["answer"],
        "It was interrupted; I will check before retrying."
    );
}

#[test]
fn resume_goes_on_with_a_postgres_session_after_a_sigkill() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let store = server.fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let (_gate_open, gate) = mpsc::channel();
    let (url, requests) = scripted_server(answers(), gate);
    let started = || {
        let listed = toolrail(dir.path(), &["sessions", "--store", &store]);
        text(&listed).contains("tool/start")
    };
    killed_mid_call(dir.path(), &url, Some(&store), started);
    let listed = text(&toolrail(dir.path(), &["sessions", "--store", &store]));
    let id = listed
        .lines()
        .find(|line| line.contains("tool/start"))
        .and_then(|line| line.split_whitespace().next())
        .unwrap()
        .to_owned();

    // A worker holding the session's lease keeps a resume out: writes beside its own would
    // interleave with them.
    let postgres = toolrail_session_store::PostgresStore::connect(
        &store,
        toolrail_session_store::Durability::Strict,
    )
    .unwrap();
    let held = postgres
        .acquire(
            &toolrail_session_log::SessionId::new(&id),
            "worker-9",
            Duration::from_secs(60),
        )
        .unwrap();
    let resume = [
        "resume",
        &id,
        "--store",
        &store,
        "--prompt",
        "Go on",
        "--approve",
        "never",
    ];
    let refused = toolrail(dir.path(), &resume);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("leased to `worker-9`"),
        "{}",
        text(&refused)
    );
    postgres.release(&held).unwrap();

    let resumed = toolrail(dir.path(), &resume);
    let asked: Vec<String> = requests.try_iter().collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    check_resumed(&resumed, &asked[1]);

    let replayed = toolrail(dir.path(), &["replay", &id, "--store", &store, "--json"]);
    assert!(replayed.status.success(), "{}", text(&replayed));
    let report: serde_json::Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(report["calls"][0]["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
    let listed = text(&toolrail(dir.path(), &["sessions", "--store", &store]));
    assert!(listed.contains("ended: completed"), "{listed}");
    // The resume held the session under a lease of its own, and let go of it as it left.
    let line = listed
        .lines()
        .find(|line| line.starts_with(id.as_str()))
        .unwrap();
    assert!(
        line.contains("resume-") && !line.contains("held by"),
        "{line}"
    );
}
