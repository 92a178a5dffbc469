//! The README's first command works on a fresh machine and shows the pipeline's outcomes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;

#[test]
fn demo_runs_every_outcome_and_cleans_up() {
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .arg("demo")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let codes: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with('c'))
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    assert_eq!(
        codes,
        [
            "ok",
            "SYNTAX_ERROR",
            "GUARD_DENIED",
            "APPROVAL_UNAVAILABLE",
            "TOOL_OUTCOME_UNKNOWN",
            "UNKNOWN_TOOL"
        ]
    );
    assert!(text.contains("2 calls reached their body"), "{text}");
}

#[test]
fn demo_jsonl_prints_a_parseable_log_in_seq_order() {
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .args(["demo", "--jsonl"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let events: Vec<toolrail_session_log::Event> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=16).collect::<Vec<_>>());
    assert_eq!(events[0].data.kind(), "tool/call");
}

#[test]
fn unknown_commands_fail_with_usage() {
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .arg("frobnicate")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown command `frobnicate`"));
}
