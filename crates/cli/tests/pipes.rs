//! A reader that leaves early (`toolrail … | head -1`), or is gone before the first line,
//! ends `toolrail`'s output quietly — status 0 (everything fit in the pipe before it
//! left) or 141 (SIGPIPE's), never a panic — for every command that prints: lists, replays,
//! live runs, help, the PostgreSQL listing, and an error said on a stderr that is the same
//! closed pipe (`2>&1 | head`), where a panic could not even be seen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

/// Where the reader stops.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// Gone before `toolrail` starts.
    Gone,
    /// Reads the first line, then leaves (`head -1`).
    FirstLine,
}

/// Whether stderr goes to the same pipe as stdout (`2>&1`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stderr {
    Kept,
    IntoThePipe,
}

/// Runs `toolrail ARGS` in `dir` with its stdout to a pipe whose reader behaves as
/// `reader`; returns its status and what it said on a separate stderr.
fn run(dir: &Path, args: &[&str], reader: Reader, stderr: Stderr) -> (ExitStatus, String) {
    let (pipe_reader, pipe_writer) = std::io::pipe().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolrail"));
    command
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("XDG_STATE_HOME", dir.join("state"))
        .args(args)
        .stdin(Stdio::null());
    match stderr {
        Stderr::Kept => command.stderr(Stdio::piped()),
        Stderr::IntoThePipe => command.stderr(pipe_writer.try_clone().unwrap()),
    };
    command.stdout(pipe_writer);
    let pipe_reader = match reader {
        Reader::Gone => {
            drop(pipe_reader);
            None
        }
        Reader::FirstLine => Some(pipe_reader),
    };
    let child = command.spawn().unwrap();
    // The parent's ends of the pipe go with the command, so the reader sees the end.
    drop(command);
    if let Some(pipe_reader) = pipe_reader {
        let mut line = String::new();
        let _ = BufReader::new(pipe_reader).read_line(&mut line);
        // Dropped here: the reader leaves after one line.
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn check(dir: &Path, args: &[&str]) {
    for reader in [Reader::Gone, Reader::FirstLine] {
        let (status, said) = run(dir, args, reader, Stderr::Kept);
        assert!(
            !said.contains("panicked"),
            "toolrail {args:?} with a reader {reader:?}: {said}"
        );
        assert!(
            matches!(status.code(), Some(0 | 141)),
            "toolrail {args:?} with a reader {reader:?}: {status}: {said}"
        );
    }
    // Both streams into a pipe nobody reads: no panic either, though none could be seen —
    // a panic's status is 101.
    let (status, _) = run(dir, args, Reader::Gone, Stderr::IntoThePipe);
    assert!(
        matches!(status.code(), Some(0 | 141)),
        "toolrail {args:?} 2>&1 into a closed pipe: {status}"
    );
}

#[test]
fn a_reader_that_leaves_early_ends_every_command_s_output_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/approvals.json");
    let scenario = scenario.to_str().unwrap();
    // A session to list and replay.
    let made = support::toolrail(
        dir.path(),
        &[
            "run",
            "--scenario",
            scenario,
            "--session-dir",
            sessions.to_str().unwrap(),
        ],
    );
    assert!(made.status.success(), "{}", support::text(&made));
    let store = format!("jsonl:{}", sessions.display());
    for args in [
        vec!["tools"],
        vec!["--help"],
        vec!["sandbox"],
        vec!["sessions", "--store", &store],
        vec!["replay", "scenario", "--store", &store],
        vec!["replay", "scenario", "--store", &store, "--json"],
        vec!["recover", "scenario", "--store", &store, "--dry-run"],
        // A live run, each in a new folder under the state folder.
        vec!["run", "--scenario", scenario],
    ] {
        check(dir.path(), &args);
    }
    // An error said on a stderr that is the closed pipe: status 141, not a panic's 101.
    let (status, _) = run(
        dir.path(),
        &["replay", "no-such-session", "--store", &store],
        Reader::Gone,
        Stderr::IntoThePipe,
    );
    assert_eq!(status.code(), Some(141), "{status}");

    if let Some(server) = toolrail_test_support::pg::PgServer::start() {
        let url = server.fresh_database();
        let queued = support::toolrail(
            dir.path(),
            &["run", "--scenario", scenario, "--store", &url, "--enqueue"],
        );
        assert!(queued.status.success(), "{}", support::text(&queued));
        check(dir.path(), &["sessions", "--store", &url]);
        // (Each run queues a session of its own, under an id made for it.)
        check(dir.path(), &["enqueue", "--store", &url, scenario]);
    }
}
