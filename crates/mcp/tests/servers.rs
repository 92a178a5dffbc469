//! End to end against real MCP servers from npm (`.ci/run` installs them under
//! `target/ci-npm`): `@modelcontextprotocol/server-everything` (tools listed and called,
//! bad arguments refused before sending, a long call cancelled while the connection
//! survives, progress, a list that changes) and `@modelcontextprotocol/server-filesystem`
//! (structured content; read-only tools running in parallel); a server killed, restarted,
//! then withdrawn; and no process left after shutdown.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolrail_mcp::{McpConfig, McpServers, ServerState};
use toolrail_session_log::{ContentBlock, EventData, MemorySink, ToolSource};
use toolrail_test_support::processes::alive;
use toolrail_tool_probe::Probe;
use toolrail_tools_core::{
    CallRequest, CommittedResult, Concurrency, Pipeline, PipelineConfig, Registry, RegistryBuilder,
    context::ProgressSink, pipeline::BatchControl, registry::CallOrigin,
};

/// Where `.ci/run` installs the servers, relative to the workspace root.
const CI_MODULES: &str = "target/ci-npm/node_modules";

fn modules() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TOOLRAIL_MCP_NODE_MODULES") {
        return Some(PathBuf::from(dir));
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(CI_MODULES);
    dir.join("@modelcontextprotocol/server-everything")
        .is_dir()
        .then_some(dir)
}

/// The servers' folder, or `None` outside CI when they are not installed.
fn servers_or_skip() -> Option<PathBuf> {
    let found = modules();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the MCP servers are missing: .ci/run installs them into {CI_MODULES}"
        );
        eprintln!("MCP servers not installed (set TOOLRAIL_MCP_NODE_MODULES): not run here");
    }
    found
}

fn server_script(modules: &std::path::Path, package: &str) -> String {
    modules
        .join("@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .to_str()
        .unwrap()
        .to_owned()
}

/// A configuration from its JSON.
fn config(json: serde_json::Value) -> McpConfig {
    McpConfig::from_json(&json.to_string(), "test").unwrap()
}

fn registry() -> Registry {
    RegistryBuilder::new()
        .builtin(Probe::new(None))
        .build()
        .unwrap()
        .0
}

async fn call(
    pipeline: &Pipeline,
    registry: &Registry,
    id: &str,
    name: &str,
    args: serde_json::Value,
    control: &BatchControl,
) -> CommittedResult {
    pipeline
        .execute_one(
            &registry.snapshot(),
            CallRequest::new(id, 0, name, args.to_string()),
            control,
        )
        .await
        .unwrap()
}

/// Waits, bounded, for `check` to hold.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_tools_are_called_through_the_pipeline() {
    let Some(modules) = servers_or_skip() else {
        return;
    };
    let config = config(json!({"mcpServers": {"everything": {
        "command": "node", "args": [server_script(&modules, "server-everything"), "stdio"],
        "trustAnnotations": true,
    }}}));
    let registry = registry();
    let servers = McpServers::start(&config, &registry).await;
    let version = match &servers.states()[0].1 {
        ServerState::Running { version, .. } => version.clone(),
        other => panic!("not running: {other:?}"),
    };
    let snapshot = registry.snapshot();
    let echo = snapshot
        .resolve(
            "mcp__everything__echo",
            toolrail_tools_core::registry::CallOrigin::Model,
        )
        .expect("echo is registered under its MCP name");
    assert_eq!(echo.source(), &ToolSource::Mcp(Arc::from("everything")));
    assert!(
        echo.spec().is_read_only(),
        "readOnlyHint makes it read-only"
    );
    assert!(snapshot.names().contains(&"probe"), "built-ins stay");

    let log = Arc::new(MemorySink::new());
    let pipeline = Pipeline::builder(log.clone()).build();
    let control = BatchControl::default();
    let result = call(
        &pipeline,
        &registry,
        "e1",
        "mcp__everything__echo",
        json!({"message": "hi there"}),
        &control,
    )
    .await;
    assert!(!result.record().is_error(), "{}", result.record().text());
    assert!(
        result.record().text().contains("hi there"),
        "{}",
        result.record().text()
    );
    // Provenance and the server's version are on the call's record.
    let recorded = log.events().into_iter().find_map(|event| match event.data {
        EventData::ToolCall(call)
            if event.call_id.as_ref().is_some_and(|id| id.as_str() == "e1") =>
        {
            Some(call)
        }
        _ => None,
    });
    let recorded = recorded.unwrap();
    assert_eq!(
        recorded.source,
        Some(ToolSource::Mcp(Arc::from("everything")))
    );
    assert_eq!(recorded.version.as_deref(), Some(version.as_str()));

    // Arguments that do not fit the server's schema never reach it.
    let result = call(
        &pipeline,
        &registry,
        "e2",
        "mcp__everything__echo",
        json!({"message": 5}),
        &control,
    )
    .await;
    assert_eq!(
        result
            .record()
            .error_code()
            .map(|code| code.as_str().to_owned())
            .as_deref(),
        Some("INVALID_ARGS")
    );

    // structuredContent is the value.
    let result = call(
        &pipeline,
        &registry,
        "e3",
        "mcp__everything__get-structured-content",
        json!({"location": "New York"}),
        &control,
    )
    .await;
    assert!(!result.record().is_error(), "{}", result.record().text());
    assert!(
        result
            .record()
            .value
            .as_ref()
            .is_some_and(|value| value.is_object()),
        "{:?}",
        result.record().value
    );

    // Progress reaches the batch's progress sink.
    let (sender, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let with_progress = BatchControl {
        progress: ProgressSink::channel(sender),
        ..BatchControl::default()
    };
    let result = call(
        &pipeline,
        &registry,
        "e4",
        "mcp__everything__trigger-long-running-operation",
        json!({"duration": 0.4, "steps": 2}),
        &with_progress,
    )
    .await;
    assert!(!result.record().is_error(), "{}", result.record().text());
    let first = updates.recv().await.unwrap();
    assert_eq!(first.data["total"], json!(2.0));

    // A long call cancelled mid-way: the call ends at once, the connection stays usable.
    let cancelling = BatchControl::default();
    let cancel = cancelling.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let result = call(
        &pipeline,
        &registry,
        "e5",
        "mcp__everything__trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
        &cancelling,
    )
    .await;
    assert!(result.record().is_error());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "cancelled, not waited out"
    );
    let result = call(
        &pipeline,
        &registry,
        "e6",
        "mcp__everything__echo",
        json!({"message": "still here"}),
        &control,
    )
    .await;
    assert!(
        result.record().text().contains("still here"),
        "{}",
        result.record().text()
    );

    // The server registers more tools once initialized and says so: they join the registry
    // for later snapshots, while one taken before keeps its own list.
    eventually("a list change", || servers.relisted("everything") > 0).await;
    assert!(
        registry
            .snapshot()
            .names()
            .iter()
            .any(|name| name.starts_with("mcp__everything__simulate-research")),
        "{:?}",
        registry.snapshot().names()
    );
    let pid = servers.pid("everything").unwrap();
    servers.shutdown().await;
    assert!(
        registry
            .snapshot()
            .names()
            .iter()
            .all(|name| !name.starts_with("mcp__"))
    );
    eventually("the server's exit", || !alive(pid)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_mcp_result_is_capped_like_any_tool_s() {
    let Some(modules) = servers_or_skip() else {
        return;
    };
    let config = config(json!({"mcpServers": {"everything": {
        "command": "node", "args": [server_script(&modules, "server-everything"), "stdio"],
    }}}));
    let registry = registry();
    let servers = McpServers::start(&config, &registry).await;
    let log = Arc::new(MemorySink::new());
    let pipeline = Pipeline::builder(log.clone())
        .config(PipelineConfig {
            max_content_text_bytes: 1_000,
            ..PipelineConfig::default()
        })
        .build();
    let message = "word ".repeat(2_000);
    let result = call(
        &pipeline,
        &registry,
        "e1",
        "mcp__everything__echo",
        json!({"message": message}),
        &BatchControl::default(),
    )
    .await;
    let record = &result.record();
    assert!(!record.is_error(), "{}", record.text());
    assert!(record.text().len() <= 1_000, "{}", record.text().len());
    assert!(
        record.text().starts_with("Echo: word word"),
        "{}",
        record.text()
    );
    assert!(
        record.text().contains(
            "bytes left out here; the whole text is kept beside the session log as sha256:"
        ),
        "{}",
        record.text()
    );
    assert_eq!(record.elided.len(), 1);
    assert_eq!(
        record.elided[0].whole,
        Some(ContentBlock::text(format!("Echo: {message}")))
    );
    // The log holds the record the caller got.
    let logged = log.events().into_iter().find_map(|event| match event.data {
        EventData::ToolResult(logged) => Some(logged),
        _ => None,
    });
    assert_eq!(logged.as_ref(), Some(result.record()));
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_reads_are_structured_and_may_share() {
    let Some(modules) = servers_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("a.txt"), "alpha").unwrap();
    std::fs::write(root_path.join("b.txt"), "beta").unwrap();
    let config = config(json!({"mcpServers": {"fs": {
        "command": "node",
        "args": [server_script(&modules, "server-filesystem"), root_path.to_str().unwrap()],
        "trustAnnotations": true,
    }}}));
    let registry = registry();
    let servers = McpServers::start(&config, &registry).await;
    let log = Arc::new(MemorySink::new());
    let pipeline = Pipeline::builder(log.clone()).build();
    let tools = registry.snapshot();
    let call = |n: usize, file: &str| {
        CallRequest::new(
            format!("r{n}"),
            u32::try_from(n).unwrap(),
            "mcp__fs__read_text_file",
            json!({"path": root_path.join(file)}).to_string(),
        )
    };
    // The server's own annotation (trusted here) makes the reads shareable: a scheduler
    // may run them side by side.
    let arguments = toolrail_tools_core::CallArgs::from(json!({"path": root_path.join("a.txt")}));
    let entry = tools
        .resolve("mcp__fs__read_text_file", CallOrigin::Model)
        .unwrap();
    assert_eq!(entry.tool().concurrency(&arguments), Concurrency::shared());
    // And the client takes both at once over one connection, each answered with its own.
    let control = BatchControl::default();
    let (first, second) = tokio::join!(
        pipeline.execute_one(&tools, call(0, "a.txt"), &control),
        pipeline.execute_one(&tools, call(1, "b.txt"), &control),
    );
    let results = [first.unwrap(), second.unwrap()];
    let texts: Vec<String> = results
        .iter()
        .map(|result| result.record().text())
        .collect();
    assert_eq!(texts, ["alpha", "beta"]);
    assert_eq!(
        results[0].record().value,
        Some(json!({"content": "alpha"})),
        "structuredContent is the value"
    );
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_restarted_then_withdrawn_after_its_limit() {
    let Some(modules) = servers_or_skip() else {
        return;
    };
    let config = config(json!({"mcpServers": {"everything": {
        "command": "node", "args": [server_script(&modules, "server-everything"), "stdio"],
        "maxRestarts": 1,
    }}}));
    let registry = registry();
    let servers = McpServers::start(&config, &registry).await;
    let kill = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    };
    let first = servers.pid("everything").unwrap();
    let before = registry.snapshot();
    kill(first);
    eventually("a restart", || {
        servers.pid("everything").is_some_and(|pid| pid != first)
    })
    .await;
    eventually("its tools back", || {
        registry
            .snapshot()
            .names()
            .contains(&"mcp__everything__echo")
    })
    .await;
    // A snapshot taken before the crash never changed.
    assert!(before.names().contains(&"mcp__everything__echo"));
    kill(servers.pid("everything").unwrap());
    eventually("withdrawal", || {
        matches!(servers.states()[0].1, ServerState::Withdrawn { .. })
    })
    .await;
    let names = registry
        .snapshot()
        .names()
        .iter()
        .map(|name| (*name).to_owned())
        .collect::<Vec<_>>();
    assert!(
        names.iter().all(|name| !name.starts_with("mcp__")),
        "{names:?}"
    );
    // A call to a withdrawn tool, from a new snapshot, is an unknown tool.
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
    let result = call(
        &pipeline,
        &registry,
        "w1",
        "mcp__everything__echo",
        json!({"message": "x"}),
        &BatchControl::default(),
    )
    .await;
    assert_eq!(
        result
            .record()
            .error_code()
            .map(|code| code.as_str().to_owned())
            .as_deref(),
        Some("UNKNOWN_TOOL")
    );
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_server_does_not_hold_up_the_session_and_joins_when_listed() {
    let Some(modules) = servers_or_skip() else {
        return;
    };
    let config = config(json!({"mcpServers": {"later": {
            "command": "node", "args": [server_script(&modules, "server-everything"), "stdio"],
            "start": "lazy", "enabledTools": ["echo"],
        }, "off": {"command": "node", "enabled": false}}}));
    let registry = registry();
    let servers = McpServers::start(&config, &registry).await;
    // Returned at once: a node server takes far longer than this to list its tools.
    assert_eq!(
        servers.states()[0],
        ("later".to_owned(), ServerState::Starting)
    );
    assert_eq!(
        servers.states()[1],
        ("off".to_owned(), ServerState::Disabled)
    );
    assert!(!registry.snapshot().names().contains(&"mcp__later__echo"));
    eventually("the lazy server's tools", || {
        registry.snapshot().names().contains(&"mcp__later__echo")
    })
    .await;
    // Only the enabled tool is offered.
    let offered: Vec<String> = registry
        .snapshot()
        .names()
        .iter()
        .filter(|name| name.starts_with("mcp__"))
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(offered, ["mcp__later__echo"]);
    // Its annotations are not trusted: `readOnlyHint` does not make it read-only (which the
    // presets would let run unasked), nor shared.
    let snapshot = registry.snapshot();
    let echo = snapshot
        .resolve(
            "mcp__later__echo",
            toolrail_tools_core::registry::CallOrigin::Model,
        )
        .unwrap();
    assert!(!echo.spec().is_read_only());
    assert_eq!(echo.spec().concurrency_summary(), Some("exclusive"));
    servers.shutdown().await;
}
