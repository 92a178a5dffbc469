//! The child of `cargo xtask torture`: `run DIR TOKEN` drives a session of mixed batches
//! (parallel reads, edits of one shared file, a write that asks, sandboxed bash, probe calls
//! with markers) and prints `COMMITTED <call id>` as each result becomes durable, until it
//! ends or is killed; `check DIR TOKEN COMMITTED_FILE` opens what a killed run left, applies
//! recovery and compares the log with the world (markers, files, the process table),
//! printing one JSON verdict.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolrail_agent_loop::LiveEvent;
use toolrail_fs_tools::FsEffectProbe;
use toolrail_session_log::{
    ConversationItem, Event, EventData, SessionId, SessionLog, conversation, recover,
    recovery::EffectProbe,
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_testkit::processes::live_with;
use toolrail_testkit::{RunOptions, Scenario};

/// The files the session starts with, and what they may hold afterwards.
const SHARED_VERSIONS: [&str; 3] = ["version 0\n", "version 1\n", "version 2\n"];

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args.to_string()})
}

/// The session: its sleeps carry `token`, so its processes can be found in `/proc`.
fn scenario(token: &str) -> Value {
    json!({
        "config": {
            "tools": {"enabled": ["read", "write", "edit", "glob", "grep", "bash", "probe"]},
            "sandbox": {"mode": "workspace-write"},
            "limits": {"cancel_grace_ms": 200},
            "permissions": {"preset": "full-auto", "ask": ["write"]}
        },
        "approvals": ["allowed_once", "allowed_once"],
        "workspace": {"files": {
            "a.txt": "alpha\nline one\n",
            "b.txt": "beta\nline two\n",
            "shared.txt": SHARED_VERSIONS[0],
            "out/keep.txt": "kept\n"
        }},
        "turns": [
            {"user": "work", "model": [
                {"tool_calls": [
                    call("r1", "read", json!({"path": "a.txt"})),
                    call("r2", "read", json!({"path": "b.txt"})),
                    call("g1", "glob", json!({"pattern": "**/*.txt"})),
                    call("g2", "grep", json!({"pattern": "line"})),
                    call("r3", "read", json!({"path": "shared.txt"}))
                ], "stop_reason": "tool_use"},
                {"tool_calls": [
                    call("e1", "edit", json!({"path": "shared.txt",
                        "edits": [{"old": "version 0", "new": "version 1"}]})),
                    call("p1", "probe", json!({"marker": true, "sleep_ms": 40})),
                    call("p2", "probe", json!({"marker": true})),
                    call("b1", "bash", json!({"description": "slow write",
                        "command": format!("(setsid sleep 600{token} &) ; sleep 0.1{token}; echo one > out/bash_one.txt")}))
                ], "stop_reason": "tool_use"},
                {"tool_calls": [
                    call("w1", "write", json!({"path": "new.txt", "content": "fresh\n"})),
                    call("e2", "edit", json!({"path": "shared.txt",
                        "edits": [{"old": "version 1", "new": "version 2"}]})),
                    call("p3", "probe", json!({"marker": true, "sleep_ms": 20}))
                ], "stop_reason": "tool_use"},
                {"tool_calls": [
                    call("b2", "bash", json!({"description": "append",
                        "command": format!("echo two >> out/bash_one.txt; sleep 0.05{token}")}))
                ], "stop_reason": "tool_use"},
                {"text": "done", "stop_reason": "end_turn"}
            ]},
            {"user": "again", "model": [
                {"tool_calls": [call("p4", "probe", json!({"marker": true, "sleep_ms": 10}))],
                 "stop_reason": "tool_use"},
                {"text": "done again", "stop_reason": "end_turn"}
            ]}
        ]
    })
}

fn run(dir: &Path, token: &str) -> ExitCode {
    let scenario = Scenario::from_json(&scenario(token).to_string()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let options = RunOptions {
        live: Some(Arc::new(sender)),
        ..RunOptions::default()
    };
    let report = runtime.block_on(async {
        let printer = tokio::spawn(async move {
            let mut out = std::io::stdout();
            while let Some(event) = receiver.recv().await {
                if let LiveEvent::Committed { call_id, .. } = event {
                    writeln!(out, "COMMITTED {call_id}").unwrap();
                    out.flush().unwrap();
                }
            }
        });
        let report = scenario.run_with(dir, options).await;
        printer.await.unwrap();
        report
    });
    match report {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("torture run: {error}");
            ExitCode::FAILURE
        }
    }
}

fn code_of(event: &Event) -> Option<String> {
    match &event.data {
        EventData::ToolResult(record) => Some(
            record
                .error_code()
                .map_or_else(|| "ok".to_owned(), ToString::to_string),
        ),
        _ => None,
    }
}

fn check(dir: &Path, token: &str, committed_file: &Path) -> ExitCode {
    let mut problems: Vec<String> = Vec::new();
    let reported: BTreeSet<String> = std::fs::read_to_string(committed_file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix("COMMITTED "))
        .map(str::to_owned)
        .collect();
    let workspace = dir.join("workspace");
    let markers = dir.join("markers");

    // No process of the session outlives it (the lifeline ends them; give it a moment).
    // The commands' sleeps — one of them detached for ten minutes, so only the end of the
    // namespace ends it — and the runtime's forks that never exec (waiter, init), which
    // carry the runtime's own command line.
    let needles = vec![
        format!("0.1{token}"),
        format!("0.05{token}"),
        format!("600{token}"),
        format!("run {} {token}", dir.display()),
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = live_with(&needles);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        left = live_with(&needles);
    }
    if !left.is_empty() {
        problems.push(format!("processes outlived the session: {left:?}"));
    }

    let store = JsonlStore::new(dir, Durability::Strict).unwrap();
    let id = SessionId::new("scenario");
    let log_exists = store
        .path_of(&id)
        .map(|path| path.exists())
        .unwrap_or(false);
    let mut repairs: BTreeMap<String, usize> = BTreeMap::new();
    let mut torn = 0;
    let mut events: Vec<Event> = Vec::new();
    if log_exists {
        match store.open(&id) {
            Ok(opened) => {
                torn = opened.torn_bytes_dropped;
                let log: Arc<dyn SessionLog> = Arc::new(opened.log);
                let probes: Vec<Arc<dyn EffectProbe>> =
                    vec![Arc::new(FsEffectProbe::for_strict_log())];
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let recovered = runtime.block_on(async {
                    let report = recover(
                        &opened.events,
                        opened.torn_bytes_dropped,
                        &probes,
                        log.as_ref(),
                    )
                    .await;
                    log.barrier().await.map(|()| report)
                });
                drop(log);
                match recovered {
                    Ok(Ok(report)) => {
                        for (_, code) in &report.repaired {
                            let code = code.as_ref().map_or_else(
                                || "completed (probe)".to_owned(),
                                ToString::to_string,
                            );
                            *repairs.entry(code).or_default() += 1;
                        }
                    }
                    Ok(Err(error)) | Err(error) => {
                        problems.push(format!("recovery failed: {error}"))
                    }
                }
                match store.read(&id) {
                    Ok(read) => events = read.events,
                    Err(error) => {
                        problems.push(format!("the recovered log cannot be read: {error}"))
                    }
                }
            }
            Err(error) => problems.push(format!("the log cannot be opened: {error}")),
        }
    } else if !reported.is_empty() {
        problems.push("results were reported committed but there is no log".to_owned());
    }

    // One result per call; every result reported committed is there, and not synthetic.
    let mut results: BTreeMap<String, (String, bool)> = BTreeMap::new();
    for event in &events {
        if let (EventData::ToolResult(record), Some(call_id)) = (&event.data, &event.call_id) {
            let previous = results.insert(
                call_id.to_string(),
                (code_of(event).unwrap_or_default(), record.synthetic),
            );
            if previous.is_some() {
                problems.push(format!("call {call_id} has two results"));
            }
        }
    }
    for call_id in &reported {
        match results.get(call_id) {
            Some((_, false)) => {}
            Some((_, true)) => problems.push(format!(
                "call {call_id} was reported committed, but its result in the log is recovery's"
            )),
            None => problems.push(format!(
                "call {call_id} was reported committed, but the log has no result for it"
            )),
        }
    }

    // "Did not run" must be true: no marker, no effect.
    let not_run = |code: &str| code == "TOOL_NOT_STARTED" || code == "NOT_EXECUTED";
    for (call_id, (code, _)) in &results {
        if !not_run(code) {
            continue;
        }
        if call_id.starts_with('p') && markers.join(call_id).exists() {
            problems.push(format!("{call_id} is {code} but its marker exists"));
        }
    }
    // The workspace is seeded once the log exists and before the first turn: a run killed
    // before that may have no files yet.
    let seeded = events
        .iter()
        .any(|event| matches!(event.data, EventData::TurnStart(_)));
    let shared = std::fs::read_to_string(workspace.join("shared.txt"));
    let shared_version = match &shared {
        // Killed while seeding: the file may be empty; nothing has edited it yet.
        Ok(_) | Err(_) if !seeded => Some(0),
        Ok(shared) => SHARED_VERSIONS.iter().position(|version| version == shared),
        Err(_) => None,
    };
    match shared_version {
        None => problems.push(format!("shared.txt is torn, foreign or gone: {shared:?}")),
        Some(version) => {
            let code = |id: &str| results.get(id).map(|(code, _)| code.as_str());
            if version >= 1 && code("e1").is_some_and(not_run) {
                problems.push(format!(
                    "e1 is {:?} but shared.txt holds version {version}",
                    code("e1")
                ));
            }
            if version >= 2 && code("e2").is_some_and(not_run) {
                problems.push(format!(
                    "e2 is {:?} but shared.txt holds version 2",
                    code("e2")
                ));
            }
            if version < 1 && code("e1") == Some("ok") && results.get("e1").is_some_and(|r| !r.1) {
                problems.push("e1 succeeded but shared.txt holds version 0".to_owned());
            }
        }
    }
    match std::fs::read_to_string(workspace.join("new.txt")) {
        Ok(content) if content != "fresh\n" => {
            problems.push(format!("new.txt is torn: {content:?}"));
        }
        Ok(_) => {
            if results.get("w1").is_some_and(|(code, _)| not_run(code)) {
                problems.push("w1 did not run by its result, but new.txt exists".to_owned());
            }
        }
        Err(_) => {}
    }
    for unchanged in [
        ("a.txt", "alpha\nline one\n"),
        ("b.txt", "beta\nline two\n"),
    ] {
        if let Ok(content) = std::fs::read_to_string(workspace.join(unchanged.0))
            && content != unchanged.1
            && seeded
        {
            problems.push(format!("{} changed: {content:?}", unchanged.0));
        }
    }
    if workspace.join("out/bash_one.txt").exists()
        && results.get("b1").is_some_and(|(code, _)| not_run(code))
    {
        problems.push("b1 did not run by its result, but out/bash_one.txt exists".to_owned());
    }
    let bash_out = std::fs::read_to_string(workspace.join("out/bash_one.txt")).unwrap_or_default();
    if bash_out.contains("two") && results.get("b2").is_some_and(|(code, _)| not_run(code)) {
        problems
            .push("b2 did not run by its result, but out/bash_one.txt holds its line".to_owned());
    }
    // What recovery's probe said of an interrupted file write is the truth on disk.
    let settled = |id: &str| -> Option<bool> {
        match results.get(id) {
            Some((code, true)) if code == "ok" => Some(true),
            Some((code, true)) if code == "TOOL_FAILED" => Some(false),
            _ => None,
        }
    };
    let version = shared_version.unwrap_or(0);
    let new_exists = workspace.join("new.txt").exists();
    for (id, happened, truth) in [
        ("e1", settled("e1"), version >= 1),
        ("e2", settled("e2"), version >= 2),
        ("w1", settled("w1"), new_exists),
    ] {
        if let Some(happened) = happened
            && happened != truth
        {
            problems.push(format!(
                "recovery said {id} {} but the file says otherwise",
                if happened {
                    "completed"
                } else {
                    "did not happen"
                }
            ));
        }
    }
    // A file write left unknown is a probe that failed to settle it.
    for id in ["e1", "e2", "w1"] {
        if results
            .get(id)
            .is_some_and(|(code, _)| code == "TOOL_OUTCOME_UNKNOWN")
        {
            problems.push(format!("{id} (a file write) was left TOOL_OUTCOME_UNKNOWN"));
        }
    }

    // Resuming continues: no open turn, and the conversation the next request carries has
    // a result for every call of the last assistant message.
    if !events.is_empty() {
        let last_turn_open = events
            .iter()
            .rev()
            .find_map(|event| match &event.data {
                EventData::TurnStart(_) => Some(true),
                EventData::TurnEnd(_) => Some(false),
                _ => None,
            })
            .unwrap_or(false);
        if last_turn_open {
            problems.push("a turn is still open after recovery".to_owned());
        }
        let items = conversation(&events);
        let last_calls: Vec<String> = items
            .iter()
            .rev()
            .find_map(|item| match item {
                ConversationItem::Assistant(message) => Some(
                    message
                        .tool_calls()
                        .into_iter()
                        .map(|call| call.call_id.to_string())
                        .collect(),
                ),
                _ => None,
            })
            .unwrap_or_default();
        let answered: BTreeSet<String> = items
            .iter()
            .filter_map(|item| match item {
                ConversationItem::ToolResult { call_id, .. } => Some(call_id.to_string()),
                _ => None,
            })
            .collect();
        for call_id in last_calls {
            if !answered.contains(&call_id) {
                problems.push(format!(
                    "the next request would lack a result for {call_id}"
                ));
            }
        }
        let seqs_dense = events
            .iter()
            .enumerate()
            .all(|(at, event)| event.seq == at as u64 + 1);
        if !seqs_dense {
            problems.push("seq is not dense".to_owned());
        }
    }

    let verdict = json!({
        "ok": problems.is_empty(),
        "problems": problems,
        "events": events.len(),
        "reported_committed": reported.len(),
        "repairs": repairs,
        "torn_bytes": torn,
        "log": log_exists,
    });
    println!("{verdict}");
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("run") if args.len() == 4 => run(&PathBuf::from(&args[2]), &args[3]),
        Some("check") if args.len() == 5 => {
            check(&PathBuf::from(&args[2]), &args[3], &PathBuf::from(&args[4]))
        }
        _ => {
            eprintln!(
                "usage: toolrail-torture run DIR TOKEN | check DIR TOKEN COMMITTED_FILE (driven by `cargo xtask torture`)"
            );
            ExitCode::from(2)
        }
    }
}
