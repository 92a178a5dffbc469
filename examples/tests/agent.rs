//! `examples/agent.rs` run as a stranger runs it: against a local fake OpenAI-compatible
//! server that streams its words in small deltas (the deltas must reach the terminal while
//! the turn still runs: the server holds back the rest of its answer until the test has read
//! the first words from the example's output), resumed in a second run that continues the
//! conversation, and against llm-katan, a model server toolrail did not write.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};

/// The example's binary, which `cargo test` builds beside the tests.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let binary = profile.join("examples").join("agent");
    assert!(
        binary.is_file(),
        "{} is missing: `cargo test -p toolrail-examples` builds it",
        binary.display()
    );
    binary
}

#[test]
fn the_example_streams_words_as_they_arrive_runs_its_tool_and_resumes() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("README.md"), "a small project\n").unwrap();
    let (open_gate, gate) = mpsc::channel();
    let (url, requests) = scripted_server(
        vec![
            Answer::gated_after(
                vec![
                    text_chunk("Counting "),
                    text_chunk("the "),
                    text_chunk("words. "),
                    call_chunk(0, "c1", "word_count", r#"{"text": "#),
                    call_chunk(0, "", "", r#""one two three"}"#),
                    finish_chunk("tool_calls"),
                ],
                0,
            ),
            Answer::new(vec![
                text_chunk("There "),
                text_chunk("are "),
                text_chunk("three."),
                finish_chunk("stop"),
            ]),
            Answer::new(vec![text_chunk("Still three."), finish_chunk("stop")]),
        ],
        gate,
    );
    let mut child = Command::new(example())
        .args([workspace.path().to_str().unwrap(), "How many words?"])
        .env("TOOLRAIL_BASE_URL", &url)
        .env("TOOLRAIL_MODEL", "fake")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut shown = String::new();
    let mut buffer = [0u8; 256];
    // Read what the example prints as it prints it: its first words come while the server
    // still holds back the rest of the answer.
    while !shown.contains("Counting ") {
        let read = stdout.read(&mut buffer).unwrap();
        assert!(
            read > 0,
            "the example ended before its first words: {shown}"
        );
        shown.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
    assert!(
        !shown.contains("(turn"),
        "the turn had ended before its first words were shown: {shown}"
    );
    open_gate.send(()).unwrap();
    stdout.read_to_string(&mut shown).unwrap();
    let status = child.wait().unwrap();
    let mut errors = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    assert!(status.success(), "{shown}\n{errors}");
    assert!(shown.contains("Counting the words. "), "{shown}");
    assert!(shown.contains("[word_count: 3]"), "{shown}");
    assert!(shown.contains("There are three."), "{shown}");
    assert!(shown.contains("(turn Completed)"), "{shown}");
    let first = requests.recv().unwrap();
    assert!(first.contains("\"name\":\"word_count\""), "{first}");
    assert!(
        first.contains("\"name\":\"bash\""),
        "the shipped tools are offered: {first}"
    );
    let second: serde_json::Value = serde_json::from_str(&requests.recv().unwrap()).unwrap();
    assert_eq!(
        second["messages"][2],
        serde_json::json!({"role": "tool", "tool_call_id": "c1", "content": "3"}),
        "the result went back: {second}"
    );

    // The same session again: nothing to repair, and the conversation goes on.
    let session = shown
        .lines()
        .find_map(|line| line.strip_prefix("session "))
        .unwrap()
        .to_owned();
    let output = Command::new(example())
        .args([workspace.path().to_str().unwrap(), "And now?"])
        .env("TOOLRAIL_BASE_URL", &url)
        .env("TOOLRAIL_RESUME", &session)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let again = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{again}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(again.contains("recovered: nothing to repair"), "{again}");
    assert!(again.contains(&format!("session {session}")), "{again}");
    assert!(again.contains("Still three."), "{again}");
    let third = requests.recv().unwrap();
    assert!(
        third.contains("How many words?")
            && third.contains("There are three.")
            && third.contains("And now?"),
        "the resumed session carries the whole conversation: {third}"
    );
}

/// Where `.ci/run` puts llm-katan, relative to the workspace root.
const KATAN: &str = "target/ci-venv/llm-katan/bin/llm-katan";

#[test]
fn the_example_runs_against_llm_katan() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let katan = std::env::var_os("LLM_KATAN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(KATAN));
    if !katan.is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "llm-katan is missing: .ci/run installs it into {KATAN}"
        );
        eprintln!("llm-katan not found (set LLM_KATAN or run .ci/run): not run here");
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(katan)
        .args(["-m", "echo-model", "-b", "echo", "-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["--providers", "openai", "--disable-dashboard"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Bounded: a Python web server takes a second or two to listen.
    let listening = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(listening, "llm-katan did not listen within 30 s");
    let workspace = tempfile::tempdir().unwrap();
    let output = Command::new(example())
        .args([
            workspace.path().to_str().unwrap(),
            "Count the words of this.",
        ])
        .env("TOOLRAIL_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("TOOLRAIL_MODEL", "echo-model")
        // llm-katan wants a key, any key.
        .env("OPENAI_API_KEY", "test-key")
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{shown}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Its echo model calls the first tool offered every time (`bash`, which the workspace
    // preset asks about and nobody is there to allow), until the step limit ends the turn.
    assert!(shown.contains("[bash: Error:"), "{shown}");
    assert!(shown.contains("(turn MaxSteps)"), "{shown}");
}
