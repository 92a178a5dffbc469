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

#[test]
fn the_shipped_plan_mode_scenario_meets_its_expectations_and_a_wrong_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testkit/scenarios/plan_mode.json"
    );
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .args([
            "run",
            shipped,
            "--dir",
            dir.path().join("a").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("meets the scenario's expectations"));

    let wrong = std::fs::read_to_string(shipped)
        .unwrap()
        .replace(r#""c1": "GUARD_DENIED""#, r#""c1": "ok""#);
    let file = dir.path().join("wrong.json");
    std::fs::write(&file, wrong).unwrap();
    let output = Command::cargo_bin("toolrail")
        .unwrap()
        .args([
            "run",
            file.to_str().unwrap(),
            "--dir",
            dir.path().join("b").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("call `c1`: expected ok, found GUARD_DENIED"),
        "{stderr}"
    );
}
