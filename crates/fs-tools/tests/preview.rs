//! What a person asked to approve a `write` or an `edit` is shown: the diff the call would
//! make to the file as it is now, computed without changing anything.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use toolrail_tools_core::Tool;

fn tool(bench: &support::Bench, name: &str) -> Arc<dyn Tool> {
    bench
        .files
        .tools()
        .into_iter()
        .find(|tool| tool.spec().name() == name)
        .unwrap()
}

async fn preview(bench: &support::Bench, name: &str, args: Value) -> String {
    tool(bench, name)
        .preview(&toolrail_tools_core::CallArgs::from(args))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_write_shows_the_lines_it_replaces_and_changes_nothing() {
    let bench = support::bench();
    std::fs::write(
        bench.root.join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let shown = preview(
        &bench,
        "write",
        json!({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
    )
    .await;
    assert!(shown.contains("--- a/calc.py"), "{shown}");
    assert!(shown.contains("-    return a - b"), "{shown}");
    assert!(shown.contains("+    return a + b"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(bench.root.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a - b\n"
    );
}

#[tokio::test]
async fn a_new_file_is_all_additions() {
    let bench = support::bench();
    let shown = preview(
        &bench,
        "write",
        json!({"path": "src/new.txt", "content": "one\ntwo\n"}),
    )
    .await;
    assert!(shown.contains("--- /dev/null"), "{shown}");
    assert!(shown.contains("+one\n+two"), "{shown}");
    assert!(!bench.root.join("src/new.txt").exists());
}

#[tokio::test]
async fn an_edit_shows_its_hunk_or_why_it_would_not_apply() {
    let bench = support::bench();
    std::fs::write(bench.root.join("notes.md"), "alpha\nbeta\ngamma\n").unwrap();
    let shown = preview(
        &bench,
        "edit",
        json!({"path": "notes.md", "edits": [{"old": "beta", "new": "BETA"}]}),
    )
    .await;
    assert!(
        shown.contains("-beta") && shown.contains("+BETA"),
        "{shown}"
    );
    let refused = preview(
        &bench,
        "edit",
        json!({"path": "notes.md", "edits": [{"old": "delta", "new": "x"}]}),
    )
    .await;
    assert!(
        refused.starts_with("(the edit would not apply:"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(bench.root.join("notes.md")).unwrap(),
        "alpha\nbeta\ngamma\n"
    );
    let staged: Vec<_> = std::fs::read_dir(&bench.root).unwrap().collect();
    assert_eq!(
        staged.len(),
        2,
        "nothing staged beside the file: {staged:?}"
    );
}

#[tokio::test]
async fn a_path_outside_the_workspace_has_no_preview() {
    let bench = support::bench();
    let outside = bench.outside.join("secret.txt").display().to_string();
    let shown = tool(&bench, "write")
        .preview(&toolrail_tools_core::CallArgs::from(
            json!({"path": outside, "content": "x"}),
        ))
        .await;
    assert_eq!(shown, None);
}

#[tokio::test]
async fn a_write_s_result_carries_the_diff_from_what_it_replaced() {
    let bench = support::bench();
    std::fs::write(
        bench.root.join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let read = bench.call("read", json!({"path": "calc.py"})).await;
    assert!(!read.record().is_error());
    let written = bench
        .call(
            "write",
            json!({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
        )
        .await;
    assert!(!written.record().is_error(), "{:?}", written.record());
    let file =
        &serde_json::to_value(written.record().details.as_ref().unwrap()).unwrap()["files"][0];
    assert_eq!(
        (file["added"].as_u64(), file["removed"].as_u64()),
        (Some(1), Some(1)),
        "{file}"
    );
    let diff = file["diff"].as_str().unwrap();
    assert!(
        diff.contains("-    return a - b\n+    return a + b"),
        "{diff}"
    );
}
