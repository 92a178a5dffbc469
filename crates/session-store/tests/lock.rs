//! The session lock with real processes: a writer killed with SIGKILL a moment before the
//! session is opened (the kernel lets go of a killed process's files late in its exit) does
//! not make `open` fail; a live holder, or a process that inherited the locked descriptor,
//! is named. The holders are this test binary re-run in child mode.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;

const CHILD_ENV: &str = "TOOLRAIL_LOCK_CHILD_DIR";
const INHERIT_ENV: &str = "TOOLRAIL_LOCK_INHERIT_DIR";

fn start(id: &str) -> SessionStart {
    SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools: Vec::new(),
        meta: None,
    }
}

/// Child mode: open the session (holding its lock), make the process slow to tear down (a
/// large touched heap), say so, then wait to be killed.
#[test]
fn lock_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = JsonlStore::new(&dir, Durability::Strict).unwrap();
    let opened = store.open(&SessionId::new("held")).unwrap();
    let mut heap = vec![0u8; 256 << 20];
    for page in heap.chunks_mut(4096) {
        page[0] = 1;
    }
    println!("locked {}", heap.iter().step_by(4096).count());
    // Until killed (stdin stays open while the parent lives).
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    drop(opened);
}

/// Child mode: lock the session file, hand the locked descriptor to a `sleep` (as its
/// stdin, so it shares the open file and its lock), print that process's pid and exit.
#[test]
fn lock_inherit_child() {
    let Ok(path) = std::env::var(INHERIT_ENV) else {
        return;
    };
    let file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.try_lock().unwrap();
    // Left running on purpose, past this process's end: it is the inheritor the parent
    // test finds holding the lock, and kills.
    #[allow(clippy::zombie_processes)]
    let sleeper = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::from(file))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    println!("inheritor {}", sleeper.id());
}

fn child(env: &str, value: &Path, test: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// What follows `prefix` on the first line of the child's output that holds it (the test
/// harness may print the test's name on the same line first).
fn line_after(stdout: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert_ne!(
            stdout.read_line(&mut line).unwrap(),
            0,
            "the child ended early"
        );
        if let Some((_, rest)) = line.split_once(prefix) {
            return rest.trim().to_owned();
        }
    }
}

fn session_dir() -> (tempfile::TempDir, JsonlStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    drop(store.create(start("held")).unwrap());
    (dir, store)
}

#[test]
fn a_session_whose_writer_was_just_killed_opens() {
    if std::env::var(CHILD_ENV).is_ok() || std::env::var(INHERIT_ENV).is_ok() {
        return;
    }
    for round in 0..5 {
        let (dir, store) = session_dir();
        let (mut holder, mut stdout) = child(CHILD_ENV, dir.path(), "lock_child");
        line_after(&mut stdout, "locked ");
        // SIGKILL, and nothing waited for: the child is still tearing down 256 MiB, and
        // holds the lock until its files are closed.
        holder.kill().unwrap();
        let opened = store
            .open(&SessionId::new("held"))
            .unwrap_or_else(|error| panic!("round {round}: {error}"));
        assert_eq!(opened.events.len(), 1);
        drop(opened);
        holder.wait().unwrap();
    }
}

#[test]
fn a_live_holder_is_named_at_once() {
    if std::env::var(CHILD_ENV).is_ok() || std::env::var(INHERIT_ENV).is_ok() {
        return;
    }
    let (dir, store) = session_dir();
    // A wait that would never end: only an exiting holder is waited for, so this returns.
    let store = store.with_lock_wait(Duration::from_secs(3600));
    let (mut holder, mut stdout) = child(CHILD_ENV, dir.path(), "lock_child");
    line_after(&mut stdout, "locked ");
    let refused = store.open(&SessionId::new("held")).err().unwrap();
    let pid = holder.id();
    match &refused {
        StoreError::Locked {
            holder: LockHolder::Process { pid: named, .. },
            ..
        } => assert_eq!(*named, pid),
        other => panic!("{other:?}"),
    }
    let text = refused.to_string();
    assert!(
        text.contains(&format!("is locked by another log: process {pid} (")),
        "{text}"
    );
    assert!(text.contains("stop that process"), "{text}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Once it is gone the session opens.
    drop(store.open(&SessionId::new("held")).unwrap());
}

#[test]
fn a_process_that_inherited_the_lock_is_named_after_the_wait() {
    if std::env::var(CHILD_ENV).is_ok() || std::env::var(INHERIT_ENV).is_ok() {
        return;
    }
    let (_dir, store) = session_dir();
    let store = store.with_lock_wait(Duration::from_millis(50));
    let path: PathBuf = store.path_of(&SessionId::new("held")).unwrap();
    let (mut locker, mut stdout) = child(INHERIT_ENV, &path, "lock_inherit_child");
    let inheritor: u32 = line_after(&mut stdout, "inheritor ").parse().unwrap();
    let killer = KillOnDrop(inheritor);
    locker.wait().unwrap();
    let locker = locker.id();

    let refused = store.open(&SessionId::new("held")).err().unwrap();
    match &refused {
        StoreError::Locked {
            holder:
                LockHolder::Inherited {
                    pid,
                    holders,
                    waited,
                },
            ..
        } => {
            assert_eq!(*pid, Some(locker));
            assert_eq!(holders, &[inheritor]);
            assert!(*waited >= Duration::from_millis(50));
        }
        other => panic!("{other:?}"),
    }
    let text = refused.to_string();
    assert!(
        text.contains(&format!(
            "process {locker}, which locked it, has ended, but process {inheritor} (which inherited its descriptor) still held it after"
        )),
        "{text}"
    );
    drop(killer);
    // The inheritor is not our child: its end is seen by polling, with a bound (the store's
    // own wait covers a holder that is gone or exiting).
    let store = store.with_lock_wait(Duration::from_secs(10));
    drop(store.open(&SessionId::new("held")).unwrap());
}

/// Kills a process this test did not spawn itself (a grandchild), also when the test fails.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let killed = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
        assert!(killed.is_ok_and(|status| status.success()) || std::thread::panicking());
    }
}
