//! read, write and edit through the pipeline, on real files.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use serde_json::json;
use support::{bench, code, text};
use toolrail_fs_tools::{FileTools, file_digest};
use toolrail_tools_core::WorkspaceRoots;
use toolrail_tools_core::log::{Effect, EventData};

#[tokio::test]
async fn read_numbers_lines_reports_totals_and_reads_on() {
    let b = bench();
    let content: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    b.write("src/ten.txt", &content);
    let all = b.call("read", json!({"path": "src/ten.txt"})).await;
    assert_eq!(
        text(&all),
        content
            .lines()
            .enumerate()
            .map(|(at, line)| format!("{:>6}\t{line}\n", at + 1))
            .collect::<String>()
    );
    assert_eq!(
        all.record().value,
        Some(
            json!({"path": "src/ten.txt", "start_line": 1, "end_line": 10, "total_lines": 10, "truncated": false})
        )
    );
    assert_eq!(
        serde_json::to_value(all.record().details.as_ref().unwrap()).unwrap()["type"],
        "read"
    );

    let window = b
        .call(
            "read",
            json!({"path": "src/ten.txt", "offset": 4, "limit": 3}),
        )
        .await;
    let shown = text(&window);
    assert!(
        shown.starts_with("     4\tline 4\n     5\tline 5\n     6\tline 6\n"),
        "{shown}"
    );
    assert!(
        shown.ends_with("[lines 4–6 of 10; read on with offset=7]\n"),
        "{shown}"
    );
    let past = b
        .call("read", json!({"path": "src/ten.txt", "offset": 40}))
        .await;
    assert!(text(&past).contains("has 10 lines; offset 40 is past the end"));

    // The version read is observed, in memory and in the log.
    let digest = file_digest(&b.path("src/ten.txt")).unwrap().unwrap();
    assert_eq!(
        b.files.observed(&b.path("src/ten.txt")),
        Some(digest.clone())
    );
    assert!(b.events().iter().any(|event| matches!(&event.data,
        EventData::FsObserved(observed) if observed.digest == digest)));
}

#[tokio::test]
async fn read_handles_odd_files() {
    let b = bench();
    b.write("empty.txt", "");
    assert!(text(&b.call("read", json!({"path": "empty.txt"})).await).contains("is empty"));
    b.write("open.txt", "a\nb");
    let open = b.call("read", json!({"path": "open.txt"})).await;
    assert_eq!(open.record().value.as_ref().unwrap()["total_lines"], 2);
    assert!(text(&open).ends_with("     2\tb\n"));
    b.write("crlf.txt", "a\r\nb\r\n");
    assert_eq!(
        text(&b.call("read", json!({"path": "crlf.txt"})).await),
        "     1\ta\n     2\tb\n"
    );
    b.write("long.txt", format!("{}\n", "x".repeat(2_500)));
    let long = text(&b.call("read", json!({"path": "long.txt"})).await);
    assert!(
        long.contains("… [line cut: 500 more characters]"),
        "{}",
        &long[long.len() - 80..]
    );
    // Far past what is kept of a line: the count still covers every character.
    b.write("longer.txt", format!("{}\r\n", "é".repeat(10_000)));
    let longer = text(&b.call("read", json!({"path": "longer.txt"})).await);
    assert!(
        longer.contains("… [line cut: 8000 more characters]"),
        "{}",
        &longer[longer.len() - 60..]
    );
    b.write("blob.bin", [0x89, b'P', b'N', b'G', 0, 0, 1, 2]);
    let binary = b.call("read", json!({"path": "blob.bin"})).await;
    assert_eq!(code(&binary).as_deref(), Some("FS_BINARY_FILE"));
    assert!(text(&binary).contains("looks binary"));
    let missing = b.call("read", json!({"path": "nope.txt"})).await;
    assert_eq!(code(&missing).as_deref(), Some("FS_NOT_FOUND"));
    let folder = b.call("read", json!({"path": "src"})).await;
    assert!(text(&folder).contains("is a folder"));
}

#[tokio::test]
async fn a_huge_file_is_streamed_and_only_the_window_returned() {
    let b = bench();
    // ~11 MB, 200,000 lines: far past every cap (debug builds hash slowly, so not more).
    let mut content = String::with_capacity(12_000_000);
    for n in 0..200_000 {
        content.push_str(&format!(
            "row {n:07} of the huge file, padded to be long enough\n"
        ));
    }
    b.write("huge.txt", &content);
    let result = b
        .call("read", json!({"path": "huge.txt", "offset": 199_999}))
        .await;
    assert!(!result.record().is_error(), "{}", text(&result));
    assert_eq!(
        result.record().value.as_ref().unwrap()["total_lines"],
        200_000
    );
    assert!(text(&result).contains("199999\trow 0199998"));
    let first = b.call("read", json!({"path": "huge.txt"})).await;
    let value = first.record().value.as_ref().unwrap();
    // 2,000 lines of ~65 bytes are over the 56 KiB a read returns: the byte cap ends it.
    let end = value["end_line"].as_u64().unwrap();
    assert!((800..2000).contains(&end), "{end}");
    assert_eq!(value["truncated"], true);
    assert!(text(&first).len() <= 60 * 1024);
    // The byte cap bounds what one read returns, whatever the limit.
    let capped = b
        .call("read", json!({"path": "huge.txt", "limit": 100_000}))
        .await;
    assert!(text(&capped).len() <= 60 * 1024);
    assert_eq!(capped.record().value.as_ref().unwrap()["truncated"], true);
}

#[tokio::test]
async fn write_creates_and_overwrites_only_what_was_read() {
    let b = bench();
    let created = b
        .call(
            "write",
            json!({"path": "src/deep/new.rs", "content": "fn a() {}\n"}),
        )
        .await;
    assert!(!created.record().is_error(), "{}", text(&created));
    assert_eq!(b.read("src/deep/new.rs"), b"fn a() {}\n");
    assert!(text(&created).starts_with("Created `src/deep/new.rs`"));

    b.write("src/old.rs", "old\n");
    let unread = b
        .call("write", json!({"path": "src/old.rs", "content": "new\n"}))
        .await;
    assert_eq!(code(&unread).as_deref(), Some("FS_NOT_OBSERVED"));
    assert_eq!(b.read("src/old.rs"), b"old\n");

    b.call("read", json!({"path": "src/old.rs"})).await;
    b.write("src/old.rs", "changed behind the session's back\n");
    let stale = b
        .call("write", json!({"path": "src/old.rs", "content": "new\n"}))
        .await;
    assert_eq!(code(&stale).as_deref(), Some("FS_STALE_VERSION"));
    assert!(text(&stale).contains("read it again"));
    assert_eq!(b.read("src/old.rs"), b"changed behind the session's back\n");

    b.call("read", json!({"path": "src/old.rs"})).await;
    let before = file_digest(&b.path("src/old.rs")).unwrap();
    let overwritten = b
        .call("write", json!({"path": "src/old.rs", "content": "new\n"}))
        .await;
    assert!(!overwritten.record().is_error(), "{}", text(&overwritten));
    assert_eq!(b.read("src/old.rs"), b"new\n");
    let after = file_digest(&b.path("src/old.rs")).unwrap().unwrap();
    assert_eq!(
        overwritten.record().effects,
        [Effect::FileWritten {
            path: b.path("src/old.rs").display().to_string(),
            before: before.clone(),
            after: after.clone(),
        }]
    );
    // The intent was logged before the file changed, and after the start.
    let kinds = b.sink.kinds();
    let tail: Vec<&str> = kinds
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "tool/call",
            "tool/start",
            "fs/write-intent",
            "fs/observed",
            "tool/result"
        ]
    );
    // Writing again needs no new read: the session knows what it wrote.
    let again = b
        .call("write", json!({"path": "src/old.rs", "content": "newer\n"}))
        .await;
    assert!(!again.record().is_error());
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(b.path("src"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn edit_applies_all_or_nothing_and_says_which_edit_failed() {
    let b = bench();
    let original = "fn main() {\n    let x = 1;\n    let x = 1;\n    println!(\"{x}\");\n}\n";
    b.write("src/main.rs", original);
    b.call("read", json!({"path": "src/main.rs"})).await;

    let twice = b
        .call(
            "edit",
            json!({"path": "src/main.rs", "edits": [
                {"old": "fn main()", "new": "fn start()"},
                {"old": "    let x = 1;\n", "new": "    let x = 2;\n"}
            ]}),
        )
        .await;
    assert_eq!(code(&twice).as_deref(), Some("FS_EDIT_FAILED"));
    assert!(
        text(&twice).contains("edit 2: `old` was found 2 times (lines 2, 3)"),
        "{}",
        text(&twice)
    );
    assert_eq!(
        b.read("src/main.rs"),
        original.as_bytes(),
        "nothing was applied"
    );

    let overlapping = b
        .call(
            "edit",
            json!({"path": "src/main.rs", "edits": [
                {"old": "fn main() {\n    let", "new": "fn main() {\n    const"},
                {"old": "main() {", "new": "main(){"}
            ]}),
        )
        .await;
    assert!(
        text(&overlapping).contains("edit 2 overlaps edit 1"),
        "{}",
        text(&overlapping)
    );
    assert_eq!(b.read("src/main.rs"), original.as_bytes());

    let missing = b
        .call(
            "edit",
            json!({"path": "src/main.rs", "edits": [{"old": "println!(\"{y}\");", "new": "x"}]}),
        )
        .await;
    assert!(
        text(&missing).contains("the closest line is 4: `println!(\"{x}\");`"),
        "{}",
        text(&missing)
    );

    let all = b
        .call(
            "edit",
            json!({"path": "src/main.rs", "edits": [
                {"old": "let x = 1;", "new": "let x = 2;", "replace_all": true},
                {"old": "fn main()", "new": "fn start()"}
            ]}),
        )
        .await;
    assert!(!all.record().is_error(), "{}", text(&all));
    assert_eq!(
        String::from_utf8(b.read("src/main.rs")).unwrap(),
        "fn start() {\n    let x = 2;\n    let x = 2;\n    println!(\"{x}\");\n}\n"
    );
    assert_eq!(text(&all), "Edited `src/main.rs`: 2 edits, +3 −3 lines.");
    let details = serde_json::to_value(all.record().details.as_ref().unwrap()).unwrap();
    assert_eq!(details["type"], "diff");
    let diff = details["files"][0]["diff"].as_str().unwrap();
    assert!(
        diff.contains("--- src/main.rs")
            && diff.contains("-fn main() {")
            && diff.contains("+fn start() {"),
        "{diff}"
    );

    // Bad edit lists are refused before anything runs.
    let empty = b
        .call(
            "edit",
            json!({"path": "src/main.rs", "edits": [{"old": "", "new": "x"}]}),
        )
        .await;
    assert_eq!(code(&empty).as_deref(), Some("INVALID_ARGS"));
}

#[tokio::test]
async fn edit_keeps_crlf_and_a_bom() {
    let b = bench();
    b.write("win.txt", "\u{feff}one\r\ntwo\r\nthree\r\n");
    b.call("read", json!({"path": "win.txt"})).await;
    let result = b
        .call(
            "edit",
            json!({"path": "win.txt", "edits": [{"old": "two\nthree", "new": "2\n3"}]}),
        )
        .await;
    assert!(!result.record().is_error(), "{}", text(&result));
    assert_eq!(b.read("win.txt"), "\u{feff}one\r\n2\r\n3\r\n".as_bytes());
}

#[tokio::test]
async fn edit_needs_a_read_and_a_fresh_one() {
    let b = bench();
    b.write("a.txt", "alpha\n");
    let unread = b
        .call(
            "edit",
            json!({"path": "a.txt", "edits": [{"old": "alpha", "new": "beta"}]}),
        )
        .await;
    assert_eq!(code(&unread).as_deref(), Some("FS_NOT_OBSERVED"));
    b.call("read", json!({"path": "a.txt"})).await;
    b.write("a.txt", "alpha!\n");
    let stale = b
        .call(
            "edit",
            json!({"path": "a.txt", "edits": [{"old": "alpha", "new": "beta"}]}),
        )
        .await;
    assert_eq!(code(&stale).as_deref(), Some("FS_STALE_VERSION"));
    assert_eq!(b.read("a.txt"), b"alpha!\n");
    let missing = b
        .call(
            "edit",
            json!({"path": "b.txt", "edits": [{"old": "x", "new": "y"}]}),
        )
        .await;
    assert_eq!(code(&missing).as_deref(), Some("FS_NOT_FOUND"));
}

#[tokio::test]
async fn observations_survive_a_resume() {
    let b = bench();
    b.write("kept.txt", "v1\n");
    b.call("read", json!({"path": "kept.txt"})).await;
    b.call("write", json!({"path": "made.txt", "content": "made\n"}))
        .await;
    // A new process: only the log is left.
    let resumed = FileTools::resumed(WorkspaceRoots::new([&b.root]).unwrap(), &b.events());
    for name in ["kept.txt", "made.txt"] {
        assert!(resumed.observed(&b.path(name)).is_some(), "{name}");
        assert_eq!(
            resumed.observed(&b.path(name)),
            b.files.observed(&b.path(name))
        );
    }
    // What the session wrote before the stop can be edited after it without a new read.
    let after = support::with_files(
        tempfile::tempdir().unwrap(),
        b.root.clone(),
        b.outside.clone(),
        resumed,
    );
    let edited = after
        .call(
            "edit",
            json!({"path": "made.txt", "edits": [{"old": "made", "new": "remade"}]}),
        )
        .await;
    assert!(!edited.record().is_error(), "{}", text(&edited));
}
