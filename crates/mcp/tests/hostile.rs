//! MCP servers that misbehave (`tests/hostile/server.py`, one way each), called through the
//! real pipeline into a JSONL log that is read back and replayed: every call ends with the
//! outcome that is true (DESIGN §3, honest outcomes at the seams) — a 20 MiB answer read and
//! capped, a hang `TOOL_TIMEOUT` while progress keeps a slow call alive, a crash after the
//! call `TOOL_OUTCOME_UNKNOWN`, a malformed tool skipped and named beside a good one, a
//! result that breaks its `outputSchema` `INVALID_TOOL_OUTPUT`, a name collision resolved the
//! same in both start orders, a flood of list changes coalesced, a `setsid` grandchild ended
//! with its server, and the server's stderr kept.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolrail_mcp::{McpConfig, McpOptions, McpServers, ServerState, name_of};
use toolrail_session_log::replay::call_records;
use toolrail_session_log::{
    EventData, SessionId, SessionLog, ToolResultRecord,
    event::{FORMAT_VERSION, SessionStart},
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_test_support::processes::alive;
use toolrail_tool_probe::Probe;
use toolrail_tools_core::{
    CallRequest, Pipeline, PipelineConfig, Registry, RegistryBuilder, pipeline::BatchControl,
};

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile/server.py");

/// A server entry running the hostile script in `mode`.
fn hostile(mode: &str, args: &[&str], extra: Value) -> Value {
    let argv: Vec<&str> = [SERVER, mode]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let mut entry = json!({
        "command": "python3",
        "args": argv,
        "startupTimeoutMs": 10_000,
        "maxRestarts": 0,
    });
    if let (Some(entry), Value::Object(extra)) = (entry.as_object_mut(), extra) {
        entry.extend(extra);
    }
    entry
}

fn config(servers: Value) -> McpConfig {
    McpConfig::from_json(&json!({ "mcpServers": servers }).to_string(), "test").unwrap()
}

fn registry() -> Registry {
    RegistryBuilder::new()
        .builtin(Probe::new(None))
        .build()
        .unwrap()
        .0
}

/// A session in a JSONL store: the pipeline logs into it; `replayed` reads it back.
struct Session {
    dir: tempfile::TempDir,
    store: JsonlStore,
    log: Arc<dyn SessionLog>,
    pipeline: Pipeline,
}

impl Session {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path().join("sessions"), Durability::Strict).unwrap();
        let log: Arc<dyn SessionLog> = Arc::new(
            store
                .create(SessionStart {
                    format_version: FORMAT_VERSION,
                    session_id: SessionId::new("hostile"),
                    tools: vec![],
                    meta: None,
                })
                .unwrap(),
        );
        let pipeline = Pipeline::builder(log.clone())
            .config(PipelineConfig {
                cancel_grace: Duration::from_secs(2),
                ..PipelineConfig::default()
            })
            .build();
        Self {
            dir,
            store,
            log,
            pipeline,
        }
    }

    async fn call(
        &self,
        registry: &Registry,
        id: &str,
        name: &str,
        args: Value,
    ) -> Arc<ToolResultRecord> {
        let result = self
            .pipeline
            .execute_one(
                &registry.snapshot(),
                CallRequest::new(id, 0, name, args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap();
        Arc::clone(result.record())
    }

    /// The log read back from the store, replayed: the record of call `id` as replay sees it.
    async fn replayed(&self, id: &str) -> ToolResultRecord {
        self.log.barrier().await.unwrap();
        let events = self.store.read(&SessionId::new("hostile")).unwrap().events;
        let records = call_records(&events);
        let record = records
            .iter()
            .find(|record| record.call_id.as_str() == id)
            .unwrap_or_else(|| panic!("`{id}` is not in the replayed log"));
        let result = record
            .result
            .clone()
            .expect("the call has a result in the log");
        let logged = events.iter().rev().find_map(|event| match &event.data {
            EventData::ToolResult(logged)
                if event.call_id.as_ref().is_some_and(|c| c.as_str() == id) =>
            {
                Some(logged.clone())
            }
            _ => None,
        });
        assert_eq!(logged.as_ref(), Some(&result));
        (*result).clone()
    }

    fn stderr_dir(&self) -> PathBuf {
        self.dir.path().join("mcp")
    }
}

fn code(record: &ToolResultRecord) -> Option<String> {
    record.error_code().map(|code| code.as_str().to_owned())
}

async fn start(servers: Value, session: &Session, registry: &Registry) -> McpServers {
    McpServers::start_with(
        &config(servers),
        registry,
        &McpOptions {
            stderr_dir: Some(session.stderr_dir()),
        },
    )
    .await
}

/// Waits, bounded, for `check` to hold.
async fn eventually(what: &str, within: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mib_answer_is_read_whole_then_capped_and_kept_beside_the_log() {
    for order in ["py", "ts"] {
        let session = Session::new();
        let registry = registry();
        let servers = start(
            json!({"big": hostile("big", &["20971520", order], json!({}))}),
            &session,
            &registry,
        )
        .await;
        let began = Instant::now();
        let record = session
            .call(&registry, "b1", "mcp__big__big", json!({}))
            .await;
        assert_eq!(code(&record), None, "{order}: {}", record.text());
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "answered, not timed out"
        );
        // What the model reads is capped (64 KiB, head and tail); the whole is kept.
        assert!(record.text().len() <= 64 << 10, "{}", record.text().len());
        assert!(record.text().contains("bytes left out here"), "{order}");
        let replayed = session.replayed("b1").await;
        assert_eq!(replayed.elided.len(), 1);
        let whole = replayed.elided[0]
            .whole
            .as_ref()
            .and_then(|block| block.as_text())
            .unwrap();
        assert_eq!(
            whole.len(),
            20 << 20,
            "{order}: the whole answer comes back from beside the log"
        );
        servers.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_limit_is_an_honest_unknown_at_once() {
    for order in ["py", "ts"] {
        let session = Session::new();
        let registry = registry();
        let servers = start(
            json!({"big": hostile("big", &["3000000", order], json!({"maxMessageBytes": 1_000_000, "callTimeoutMs": 60_000}))}),
            &session,
            &registry,
        )
        .await;
        let began = Instant::now();
        let record = session
            .call(&registry, "b1", "mcp__big__big", json!({}))
            .await;
        assert_eq!(
            code(&record).as_deref(),
            Some("TOOL_OUTCOME_UNKNOWN"),
            "{order}: {}",
            record.text()
        );
        assert!(
            record
                .text()
                .contains("over this server's limit of 1000000 bytes"),
            "{}",
            record.text()
        );
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "said at once, not after the call timeout"
        );
        assert_eq!(session.replayed("b1").await, *record);
        // The connection survives: the next call is answered (and lost the same way).
        let again = session
            .call(&registry, "b2", "mcp__big__big", json!({}))
            .await;
        assert_eq!(
            code(&again).as_deref(),
            Some("TOOL_OUTCOME_UNKNOWN"),
            "{}",
            again.text()
        );
        servers.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_is_a_timeout_and_progress_keeps_a_slow_call_alive() {
    let session = Session::new();
    let registry = registry();
    let servers = start(
        json!({"h": hostile("hang", &[], json!({"callTimeoutMs": 600}))}),
        &session,
        &registry,
    )
    .await;
    let record = session
        .call(&registry, "h1", "mcp__h__hang", json!({}))
        .await;
    assert_eq!(
        code(&record).as_deref(),
        Some("TOOL_TIMEOUT"),
        "{}",
        record.text()
    );
    assert!(record.text().contains("within 600 ms"), "{}", record.text());
    assert!(
        record.text().contains("may have acted"),
        "{}",
        record.text()
    );
    assert_eq!(session.replayed("h1").await, *record);
    // 1.5 s of work, reported every 100 ms: never 600 ms without a word.
    let slow = session
        .call(&registry, "s1", "mcp__h__slow", json!({"ms": 1500}))
        .await;
    assert_eq!(code(&slow), None, "{}", slow.text());
    assert_eq!(slow.text(), "slept 1500 ms");
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_call_is_an_unknown_outcome_with_the_server_s_last_words() {
    let session = Session::new();
    let registry = registry();
    let marker = session.dir.path().join("acted");
    let servers = start(
        json!({"c": hostile("crash", &[marker.to_str().unwrap()], json!({}))}),
        &session,
        &registry,
    )
    .await;
    let record = session
        .call(&registry, "c1", "mcp__c__act", json!({}))
        .await;
    assert_eq!(
        code(&record).as_deref(),
        Some("TOOL_OUTCOME_UNKNOWN"),
        "{}",
        record.text()
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "acted\n",
        "it did act"
    );
    assert!(
        record.text().contains("its stderr ended with: "),
        "{}",
        record.text()
    );
    assert!(
        record.text().contains("hostile: acted, now crashing"),
        "{}",
        record.text()
    );
    assert_eq!(session.replayed("c1").await, *record);
    // The whole stderr is in the session folder.
    let file = servers.stderr_file("c").unwrap();
    assert!(file.starts_with(session.stderr_dir()));
    eventually("the stderr file", Duration::from_secs(5), || {
        std::fs::read_to_string(&file)
            .is_ok_and(|text| text.contains("hostile: acted, now crashing"))
    })
    .await;
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("--- c started, pid "), "{text}");
    assert!(text.contains("hostile: crash server up\n"), "{text}");
    // Withdrawn (no restarts configured): its tool is gone, the call after says so.
    eventually("the withdrawal", Duration::from_secs(5), || {
        matches!(servers.states()[0].1, ServerState::Withdrawn { .. })
    })
    .await;
    let after = session
        .call(&registry, "c2", "mcp__c__act", json!({}))
        .await;
    assert_eq!(
        code(&after).as_deref(),
        Some("UNKNOWN_TOOL"),
        "{}",
        after.text()
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "acted\n");
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_tools_are_skipped_and_named_and_the_good_one_is_offered() {
    let session = Session::new();
    let registry = registry();
    let servers = start(
        json!({"s": hostile("schemas", &[], json!({}))}),
        &session,
        &registry,
    )
    .await;
    let (_, state) = &servers.states()[0];
    let ServerState::Running { tools, skipped, .. } = state else {
        panic!("{state:?}");
    };
    assert_eq!(tools, &["mcp__s__ok"]);
    let mut named: Vec<(&str, &str)> = skipped
        .iter()
        .map(|tool| (tool.name.as_str(), tool.why.as_str()))
        .collect();
    named.sort();
    assert_eq!(named.len(), 3, "{named:?}");
    assert_eq!(named[0].0, "?");
    assert_eq!(named[1].0, "deep");
    assert!(named[1].1.contains("deeper than"), "{}", named[1].1);
    assert_eq!(named[2].0, "nope");
    assert!(named[2].1.contains("inputSchema"), "{}", named[2].1);
    let record = session.call(&registry, "k1", "mcp__s__ok", json!({})).await;
    assert_eq!(code(&record), None, "{}", record.text());
    // The CLI shows the same: `toolrail mcp list` prints each skipped tool (crates/cli).
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_must_match_the_output_schema_except_on_errors() {
    let session = Session::new();
    let registry = registry();
    let servers = start(
        json!({"o": hostile("output", &[], json!({}))}),
        &session,
        &registry,
    )
    .await;
    let good = session
        .call(&registry, "o1", "mcp__o__typed", json!({}))
        .await;
    assert_eq!(code(&good), None, "{}", good.text());
    assert_eq!(good.value, Some(json!({"n": 1})));
    let bad = session
        .call(&registry, "o2", "mcp__o__typed", json!({"bad": true}))
        .await;
    assert_eq!(
        code(&bad).as_deref(),
        Some("INVALID_TOOL_OUTPUT"),
        "{}",
        bad.text()
    );
    assert!(bad.text().contains("/n"), "{}", bad.text());
    let failed = session
        .call(&registry, "o3", "mcp__o__typed", json!({"fail": true}))
        .await;
    assert_eq!(
        code(&failed).as_deref(),
        Some("TOOL_FAILED"),
        "{}",
        failed.text()
    );
    assert!(failed.text().contains("it failed"), "{}", failed.text());
    for (id, record) in [("o1", &good), ("o2", &bad), ("o3", &failed)] {
        assert_eq!(session.replayed(id).await, **record);
    }
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_names_get_the_same_owners_in_both_start_orders() {
    let a = || hostile("named", &["b__t"], json!({}));
    let ab = || hostile("named", &["t"], json!({}));
    let mut seen = Vec::new();
    // Lazy servers connect in the background: start each order a few times.
    for lazy_first in ["a", "a__b"] {
        let session = Session::new();
        let registry = registry();
        let mut first = if lazy_first == "a" { a() } else { ab() };
        first["start"] = json!("session");
        let mut second = if lazy_first == "a" { ab() } else { a() };
        second["start"] = json!("lazy");
        let other = if lazy_first == "a" { "a__b" } else { "a" };
        let servers = start(
            json!({lazy_first: first, other: second}),
            &session,
            &registry,
        )
        .await;
        eventually("both servers running", Duration::from_secs(15), || {
            servers
                .states()
                .iter()
                .all(|(_, state)| matches!(state, ServerState::Running { .. }))
        })
        .await;
        let mut names: Vec<(String, Vec<String>)> = servers
            .states()
            .into_iter()
            .map(|(server, state)| match state {
                ServerState::Running { tools, .. } => (server, tools),
                other => panic!("{other:?}"),
            })
            .collect();
        names.sort();
        let one = session
            .call(&registry, "n1", &name_of("a", "b__t"), json!({}))
            .await;
        let two = session
            .call(&registry, "n2", &name_of("a__b", "t"), json!({}))
            .await;
        assert_eq!((code(&one), code(&two)), (None, None));
        seen.push(names);
        servers.shutdown().await;
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(
        seen[0][0],
        ("a".to_owned(), vec!["mcp__a__b__t".to_owned()])
    );
    assert_ne!(seen[0][1].1, seen[0][0].1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changes_is_read_a_few_times_and_the_last_list_wins() {
    let session = Session::new();
    let registry = registry();
    let lists = session.dir.path().join("lists");
    let servers = start(
        json!({"f": hostile("flood", &["10000", lists.to_str().unwrap()], json!({}))}),
        &session,
        &registry,
    )
    .await;
    let record = session
        .call(&registry, "f1", "mcp__f__flood", json!({}))
        .await;
    assert_eq!(code(&record), None, "{}", record.text());
    eventually("the new tool", Duration::from_secs(10), || {
        registry.snapshot().names().contains(&"mcp__f__v2")
    })
    .await;
    // Let the tail of the flood be read before counting.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let read = std::fs::read_to_string(&lists).unwrap().lines().count();
    let relisted = servers.relisted("f");
    eprintln!("10,001 list_changed notifications: the list was read again {relisted} times");
    assert!(
        (1..=20).contains(&relisted),
        "10,001 notifications read the list {relisted} times"
    );
    assert_eq!(
        read as u64,
        relisted + 1,
        "the first listing and each reading"
    );
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_grandchild_ends_with_its_server() {
    let session = Session::new();
    let registry = registry();
    let pidfile = session.dir.path().join("sleeper.pid");
    let servers = start(
        json!({"g": hostile("setsid", &[pidfile.to_str().unwrap()], json!({}))}),
        &session,
        &registry,
    )
    .await;
    eventually("the grandchild", Duration::from_secs(5), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|text| !text.is_empty())
    })
    .await;
    // The pid the server saw is its namespace's; the host's is found by its parent chain.
    let sleeper = sleeper_of(servers.pid("g").unwrap());
    assert!(alive(sleeper));
    match servers.contained("g") {
        Some(true) => {}
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "no process tree here: {other:?}"
            );
            return;
        }
    }
    servers.shutdown().await;
    eventually("the grandchild's end", Duration::from_secs(5), || {
        !alive(sleeper)
    })
    .await;
}

/// The host pid of the `sleep 300` below `root` (in its namespace, in a session of its own).
fn sleeper_of(root: u32) -> u32 {
    let mut queue = vec![root];
    let mut seen = Vec::new();
    while let Some(pid) = queue.pop() {
        seen.push(pid);
        let children = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|task| {
                std::fs::read_to_string(task.path().join("children"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|pid| pid.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            });
        queue.extend(children);
    }
    seen.into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.starts_with(b"sleep\x00300"))
        })
        .unwrap_or_else(|| panic!("no sleeper below {root}"))
}
