//! The session page in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) loads the demo's page from disk with no network; the DOM it builds has
//! one card and one timeline lane per call, and a screenshot goes to the test's output
//! folder (`target/tmp/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Chromium on the PATH; CI must have it (`.ci/run` installs it), elsewhere its absence
/// skips the test with a note.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed; CI must have it (.ci/run installs it)"
        );
        eprintln!("chromium is not installed: the page is not checked in a browser here");
    }
    found
}

/// Runs headless Chromium on `page` with `extra` flags, killed after a minute. Its output
/// is read while it runs, so a large DOM cannot fill the pipe and stall it.
fn headless(chromium: &Path, profile: &Path, page: &Path, extra: &[&str]) -> Output {
    let child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("chromium did not finish within a minute");
        }
    }
}

#[test]
fn the_demo_page_has_a_card_and_a_lane_per_call_in_a_real_browser() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("demo");
    let demo = assert_cmd::Command::cargo_bin("toolrail")
        .unwrap()
        .args(["demo", "--session-dir", session.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let page = session.join("session.html");
    let profile = dir.path().join("profile");

    let dom = headless(&chromium, &profile, &page, &["--dump-dom"]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8(dom.stdout).unwrap();
    let calls: Vec<String> = (1..=9).map(|n| format!("c{n}")).collect();
    assert_eq!(
        dom.matches("<article class=\"card").count(),
        calls.len(),
        "{dom}"
    );
    assert_eq!(
        dom.matches("<div class=\"lane").count(),
        calls.len(),
        "{dom}"
    );
    for call in &calls {
        assert!(
            dom.contains(&format!(
                "<div class=\"call\" id=\"call-{call}\" data-call-id=\"{call}\">"
            )),
            "no card for {call}"
        );
        assert!(
            dom.contains(&format!("data-call-id=\"{call}\"><span class=\"label\">")),
            "no lane for {call}"
        );
    }
    // The denied call is a failed card; nothing on the page comes from the network.
    assert!(dom.contains("status-failed"), "{dom}");
    for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!dom.contains(external), "the page loads `{external}…`");
    }

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-session-page.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = headless(
        &chromium,
        &profile,
        &page,
        &[
            "--window-size=1200,2400",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        screenshot.status.success(),
        "{}",
        String::from_utf8_lossy(&screenshot.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}
