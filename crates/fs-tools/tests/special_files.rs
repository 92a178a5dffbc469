//! A FIFO or a unix socket given to the file tools: `read`, `write` and `edit` refuse it at
//! once (`FS_NOT_A_REGULAR_FILE`) without opening it — a FIFO with no writer would block a
//! reader forever — and leave it in place; `grep` and `glob` pass over it silently.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

use rustix::fs::{CWD, FileType, Mode};
use serde_json::{Value, json};
use support::{Bench, bench, code, text};
use toolrail_tools_core::CommittedResult;

/// A call that must answer promptly: a hang fails the test instead of stalling it.
async fn prompt(b: &Bench, tool: &str, args: Value) -> CommittedResult {
    tokio::time::timeout(Duration::from_secs(20), b.call(tool, args.clone()))
        .await
        .unwrap_or_else(|_| panic!("{tool} {args} hung"))
}

fn plant(b: &Bench) -> std::os::unix::net::UnixListener {
    rustix::fs::mknodat(
        CWD,
        b.path("pipe"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    b.write("src/a.txt", "needle\n");
    std::os::unix::net::UnixListener::bind(b.path("sock")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_sockets_are_refused_at_once_and_left_alone() {
    let b = bench();
    let _listener = plant(&b);
    for (name, described) in [("pipe", "a named pipe (FIFO)"), ("sock", "a socket")] {
        for (tool, args) in [
            ("read", json!({"path": name})),
            ("write", json!({"path": name, "content": "x\n"})),
            (
                "edit",
                json!({"path": name, "edits": [{"old": "a", "new": "b"}]}),
            ),
        ] {
            let result = prompt(&b, tool, args).await;
            assert_eq!(
                code(&result).as_deref(),
                Some("FS_NOT_A_REGULAR_FILE"),
                "{tool} {name}: {}",
                text(&result)
            );
            assert_eq!(
                text(&result),
                format!(
                    "Error: `{name}` is {described}, not a regular file; the file tools read and write regular files only (nothing was opened)"
                )
            );
        }
    }
    let kinds = |name: &str| std::fs::symlink_metadata(b.path(name)).unwrap().file_type();
    assert!(kinds("pipe").is_fifo(), "the FIFO is still there");
    assert!(kinds("sock").is_socket(), "the socket is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_and_glob_pass_over_special_files() {
    let b = bench();
    let _listener = plant(&b);
    let all = prompt(&b, "grep", json!({"pattern": "needle"})).await;
    assert_eq!(text(&all), "src/a.txt\n     1: needle");
    for name in ["pipe", "sock"] {
        let direct = prompt(&b, "grep", json!({"pattern": "needle", "path": name})).await;
        assert_eq!(code(&direct), None, "{}", text(&direct));
        assert!(text(&direct).starts_with("No matches"), "{}", text(&direct));
    }
    let listed = prompt(&b, "glob", json!({"pattern": "*"})).await;
    assert!(
        text(&listed).starts_with("No files under `.` match `*`"),
        "{}",
        text(&listed)
    );
}
