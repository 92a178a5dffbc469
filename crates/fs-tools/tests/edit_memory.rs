//! `edit` streams: editing a large file raises the process's peak memory by a bounded amount
//! (pieces of the file, the edits' strings, the lines around each change), not by copies of
//! the file. The file is `TOOLRAIL_FS_EDIT_MB` megabytes (default 64; the measurement in
//! `examples/edit_rss.rs` uses 200). Linux only: the peak is `VmHWM`, reset through
//! `/proc/self/clear_refs`. nextest runs each test in a process of its own, so the peak is
//! this test's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::io::Write;

use serde_json::json;
use support::{bench, text};

/// The peak resident size of this process, in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// What the edit may add to the peak, whatever the file's size.
const BOUND_KIB: u64 = 32 * 1024;

#[tokio::test]
async fn editing_a_large_file_does_not_hold_copies_of_it() {
    let megabytes: u64 = std::env::var("TOOLRAIL_FS_EDIT_MB")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(64);
    let b = bench();
    let line = "a line of the big file, long enough to look like source code;\n";
    let lines = megabytes * 1_000_000 / line.len() as u64;
    {
        let file = std::fs::File::create(b.path("big.txt")).unwrap();
        let mut out = std::io::BufWriter::new(file);
        for n in 0..lines {
            if n == lines / 2 {
                out.write_all(b"THE MARKED LINE\n").unwrap();
            }
            out.write_all(line.as_bytes()).unwrap();
        }
        out.flush().unwrap();
    }
    let size = std::fs::metadata(b.path("big.txt")).unwrap().len();
    let read = b.call("read", json!({"path": "big.txt", "limit": 1})).await;
    assert!(!read.record().is_error(), "{}", text(&read));

    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = peak_kib();
    let edited = b
        .call(
            "edit",
            json!({"path": "big.txt", "edits": [{"old": "THE MARKED LINE", "new": "THE EDITED LINE"}]}),
        )
        .await;
    let grown = peak_kib().saturating_sub(before);
    println!("edit of {size} bytes: peak {before} KiB before, +{grown} KiB during the edit");
    assert!(!edited.record().is_error(), "{}", text(&edited));
    assert_eq!(text(&edited), "Edited `big.txt`: 1 edit, +1 −1 lines.");
    let diff = serde_json::to_value(edited.record().details.as_ref().unwrap()).unwrap()["files"][0]
        ["diff"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        diff.contains("-THE MARKED LINE\n+THE EDITED LINE\n"),
        "{diff}"
    );
    assert!(
        grown < BOUND_KIB,
        "the edit of a {size}-byte file grew the peak by {grown} KiB"
    );
    assert_eq!(std::fs::metadata(b.path("big.txt")).unwrap().len(), size);
}
