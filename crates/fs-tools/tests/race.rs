//! The symlink race: while a thread swaps a folder inside the workspace with a symlink to a
//! folder outside (`renameat2(RENAME_EXCHANGE)`, as fast as it can), writes, reads, edits,
//! greps and globs run through the tools into that folder. None may land outside or return
//! anything from outside. `TOOLRAIL_FS_RACE_SECS` sets how long it runs (default 10).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{CWD, RenameFlags};
use serde_json::json;
use support::{bench, code, text};
use toolrail_tools_core::CommittedResult;

const OUTSIDE_TEXT: &str = "OUTSIDE CONTENT";
const INSIDE_TEXT: &str = "inside content";

/// Stops the swapper however the test ends, before its folder is removed.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Tally {
    attempted: AtomicU64,
    succeeded: AtomicU64,
    refused: AtomicU64,
    /// Acts that landed outside or brought back something from outside.
    escapes: AtomicU64,
    /// Refusals per code.
    codes: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn count(&self, result: &CommittedResult) {
        self.attempted.fetch_add(1, Ordering::Relaxed);
        if result.record().is_error() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            let code = code(result).unwrap_or_default();
            *self.codes.lock().unwrap().entry(code).or_default() += 1;
        } else {
            self.succeeded.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn line(&self, what: &str) -> String {
        format!(
            "{what}: {} attempted, {} succeeded, {} refused {:?}, {} escapes",
            self.attempted.load(Ordering::Relaxed),
            self.succeeded.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.codes.lock().unwrap(),
            self.escapes.load(Ordering::Relaxed),
        )
    }
}

fn duration() -> Duration {
    let seconds = std::env::var("TOOLRAIL_FS_RACE_SECS")
        .ok()
        .and_then(|value| value.parse::<f64>().ok())
        .unwrap_or(10.0);
    Duration::from_secs_f64(seconds)
}

/// Refusals the race may cause: the path led outside when it was resolved, or changed
/// while it was used (or the file was not there, when the other folder stood in its place).
fn refused_as_expected(result: &CommittedResult) -> bool {
    matches!(
        code(result).as_deref(),
        Some(
            "FS_OUTSIDE_WORKSPACE"
                | "FS_PATH_CHANGED"
                | "FS_NOT_FOUND"
                | "FS_NOT_OBSERVED"
                | "FS_STALE_VERSION"
                | "FS_EDIT_FAILED"
        )
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_folder_swapped_for_a_symlink_never_lets_an_act_out() {
    let b = bench();
    // `d` inside; `l` a symlink to the outside folder. The swapper exchanges the two names.
    std::fs::create_dir(b.path("d")).unwrap();
    std::fs::write(b.path("d/f.txt"), format!("{INSIDE_TEXT}\n")).unwrap();
    std::fs::write(b.path("d/e.txt"), "count 0\n").unwrap();
    std::fs::write(b.outside.join("f.txt"), format!("{OUTSIDE_TEXT}\n")).unwrap();
    std::fs::write(b.outside.join("e.txt"), format!("count 0 {OUTSIDE_TEXT}\n")).unwrap();
    std::fs::write(b.outside.join("only-outside.txt"), OUTSIDE_TEXT).unwrap();
    std::os::unix::fs::symlink(&b.outside, b.path("l")).unwrap();
    let outside_before = listing(&b.outside);

    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (Arc::clone(&stop.0), Arc::clone(&swaps));
        let (d, l) = (b.path("d"), b.path("l"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(CWD, &d, CWD, &l, RenameFlags::EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let b = Arc::new(b);
    let deadline = Instant::now() + duration();
    let (writes, reads, edits, searches) = (
        Arc::new(Tally::default()),
        Arc::new(Tally::default()),
        Arc::new(Tally::default()),
        Arc::new(Tally::default()),
    );
    let mut tasks = Vec::new();
    for worker in 0..2 {
        let (b, writes) = (Arc::clone(&b), Arc::clone(&writes));
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let path = format!("d/w{worker}-{n}.txt");
                let result = b
                    .call("write", json!({"path": path, "content": "written\n"}))
                    .await;
                assert!(
                    !result.record().is_error() || refused_as_expected(&result),
                    "{}",
                    text(&result)
                );
                writes.count(&result);
                n += 1;
            }
        }));
    }
    {
        let (b, reads) = (Arc::clone(&b), Arc::clone(&reads));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let result = b.call("read", json!({"path": "d/f.txt"})).await;
                assert!(
                    !result.record().is_error() || refused_as_expected(&result),
                    "{}",
                    text(&result)
                );
                if text(&result).contains(OUTSIDE_TEXT) {
                    reads.escapes.fetch_add(1, Ordering::Relaxed);
                }
                reads.count(&result);
            }
        }));
    }
    {
        let (b, edits) = (Arc::clone(&b), Arc::clone(&edits));
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let read = b.call("read", json!({"path": "d/e.txt"})).await;
                if text(&read).contains(OUTSIDE_TEXT) {
                    edits.escapes.fetch_add(1, Ordering::Relaxed);
                }
                let result = b
                    .call(
                        "edit",
                        json!({"path": "d/e.txt", "edits": [{"old": format!("count {n}\n"), "new": format!("count {}\n", n + 1)}]}),
                    )
                    .await;
                assert!(
                    !result.record().is_error() || refused_as_expected(&result),
                    "{}",
                    text(&result)
                );
                edits.count(&result);
                if !result.record().is_error() {
                    n += 1;
                }
            }
        }));
    }
    {
        let (b, searches) = (Arc::clone(&b), Arc::clone(&searches));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                for (tool, args) in [
                    ("grep", json!({"pattern": "content|written", "path": "d"})),
                    ("grep", json!({"pattern": "content", "path": "d/f.txt"})),
                    ("glob", json!({"pattern": "*", "path": "d"})),
                ] {
                    let result = b.call(tool, args).await;
                    assert!(
                        !result.record().is_error() || refused_as_expected(&result),
                        "{}",
                        text(&result)
                    );
                    let shown = text(&result);
                    if shown.contains(OUTSIDE_TEXT) || shown.contains("only-outside") {
                        searches.escapes.fetch_add(1, Ordering::Relaxed);
                    }
                    searches.count(&result);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    drop(stop);
    swapper.join().unwrap();

    // Whatever landed outside is an escape: new files, or a changed file.
    let landed: Vec<String> = listing(&b.outside)
        .into_iter()
        .filter(|entry| !outside_before.contains(entry))
        .collect();
    writes
        .escapes
        .fetch_add(landed.len() as u64, Ordering::Relaxed);
    let unchanged = std::fs::read_to_string(b.outside.join("e.txt")).unwrap()
        == format!("count 0 {OUTSIDE_TEXT}\n")
        && std::fs::read_to_string(b.outside.join("f.txt")).unwrap() == format!("{OUTSIDE_TEXT}\n");
    if !unchanged {
        edits.escapes.fetch_add(1, Ordering::Relaxed);
    }

    let report = [
        format!("swaps: {}", swaps.load(Ordering::Relaxed)),
        writes.line("writes"),
        reads.line("reads"),
        edits.line("edits"),
        searches.line("searches"),
    ]
    .join("\n");
    println!("{report}");
    for tally in [&writes, &reads, &edits, &searches] {
        assert_eq!(
            tally.escapes.load(Ordering::Relaxed),
            0,
            "{report}\n{landed:?}"
        );
        // The race must have been run both ways, or it proves little.
        assert!(tally.succeeded.load(Ordering::Relaxed) > 0, "{report}");
    }
    assert!(swaps.load(Ordering::Relaxed) > 1000, "{report}");
    let refused = writes.refused.load(Ordering::Relaxed) + reads.refused.load(Ordering::Relaxed);
    assert!(refused > 0, "no act met the swap: {report}");
}

/// The names in a folder, sorted.
fn listing(folder: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
