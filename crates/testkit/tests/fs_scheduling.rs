//! The file tools under the scheduler: claims on real paths let reads of different files run
//! together, serialize edits of one file in model order, and keep an edit and a read of the
//! same file in model order.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{LiveEvent, Scheduler, SchedulerConfig};
use toolrail_fs_tools::FileTools;
use toolrail_session_log::{MemorySink, ToolSource};
use toolrail_tools_core::{CallRequest, Pipeline, RegistryBuilder, ToolSet, WorkspaceRoots};

struct Setup {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    tools: ToolSet,
    scheduler: Scheduler,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(root.join("b.txt"), "beta\n").unwrap();
    let files = FileTools::new(WorkspaceRoots::new([&root]).unwrap());
    let mut builder = RegistryBuilder::new();
    for tool in files.tools() {
        builder = builder.external(ToolSource::Builtin, tool);
    }
    let (registry, _) = builder.build().unwrap();
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
    Setup {
        _dir: dir,
        root,
        tools: registry.snapshot(),
        scheduler: Scheduler::new(Arc::new(pipeline), SchedulerConfig::default()),
    }
}

fn call(id: &str, index: u32, tool: &str, args: serde_json::Value) -> CallRequest {
    CallRequest::new(id, index, tool, args.to_string())
}

impl Setup {
    /// Runs a batch; returns its started/finished events as `started c1`, `finished c1`.
    async fn batch(&self, calls: Vec<CallRequest>) -> (Vec<String>, Vec<String>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let outcome = self
            .scheduler
            .run_batch(
                &self.tools,
                calls,
                CancellationToken::new(),
                Some(std::sync::Arc::new(tx)),
            )
            .await
            .unwrap();
        let mut order = Vec::new();
        while let Ok(event) = rx.try_recv() {
            match event {
                LiveEvent::Started { call_id } => order.push(format!("started {call_id}")),
                LiveEvent::Finished { call_id } => order.push(format!("finished {call_id}")),
                _ => {}
            }
        }
        let texts = outcome
            .results
            .iter()
            .map(|result| {
                assert!(!result.record().is_error(), "{:?}", result.record());
                result.record().content[0].as_text().unwrap().to_owned()
            })
            .collect();
        (order, texts)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn reads_of_two_files_run_together() {
    let s = setup();
    let (order, _) = s
        .batch(vec![
            call("c1", 0, "read", json!({"path": "a.txt"})),
            call("c2", 1, "read", json!({"path": "b.txt"})),
        ])
        .await;
    assert_eq!(order[..2], ["started c1", "started c2"], "{order:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn two_edits_of_one_file_run_one_after_the_other_in_model_order() {
    let s = setup();
    s.batch(vec![call("r", 0, "read", json!({"path": "a.txt"}))])
        .await;
    // The second edit matches only what the first one leaves: it must run second.
    let (order, _) = s
        .batch(vec![
            call(
                "c1",
                0,
                "edit",
                json!({"path": "a.txt", "edits": [{"old": "alpha", "new": "gamma"}]}),
            ),
            call(
                "c2",
                1,
                "edit",
                json!({"path": "./a.txt", "edits": [{"old": "gamma", "new": "delta"}]}),
            ),
        ])
        .await;
    assert_eq!(
        order,
        ["started c1", "finished c1", "started c2", "finished c2"]
    );
    assert_eq!(
        std::fs::read_to_string(s.root.join("a.txt")).unwrap(),
        "delta\n"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn an_edit_and_a_read_of_one_file_keep_model_order_while_another_file_passes() {
    let s = setup();
    s.batch(vec![call("r", 0, "read", json!({"path": "a.txt"}))])
        .await;
    let (order, texts) = s
        .batch(vec![
            call(
                "c1",
                0,
                "edit",
                json!({"path": "a.txt", "edits": [{"old": "alpha", "new": "omega"}]}),
            ),
            call("c2", 1, "read", json!({"path": "a.txt"})),
            call("c3", 2, "read", json!({"path": "b.txt"})),
        ])
        .await;
    let at = |entry: &str| order.iter().position(|seen| seen == entry).unwrap();
    assert!(at("started c2") > at("finished c1"), "{order:?}");
    assert!(
        at("started c3") < at("finished c1"),
        "a read of another file need not wait: {order:?}"
    );
    assert_eq!(texts[1], "     1\tomega\n");
}
