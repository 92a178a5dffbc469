//! `toolrail run` runs a scenario file and writes its log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;

#[test]
fn a_scenario_file_runs_and_leaves_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.json");
    std::fs::write(
        &scenario,
        r#"{"toolset": ["probe"], "turns": [{"user": "go", "model": [
            {"tool_calls": [{"id": "c1", "name": "probe", "arguments": "{\"marker\": true}"}], "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}]}]}"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--dir",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("turn 1: Completed"), "{text}");
    assert!(out.join("scenario.jsonl").exists());
    assert!(out.join("markers/c1").exists());
}

#[test]
fn a_bad_scenario_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bad.json");
    std::fs::write(&scenario, r#"{"toolset": [], "turns": [], "speed": 9}"#).unwrap();
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .args(["run", scenario.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("speed") && stderr.contains("bad.json"),
        "{stderr}"
    );
}
