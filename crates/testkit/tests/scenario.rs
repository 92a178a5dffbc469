//! Scenario files run whole sessions against the real runtime.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::path::Path;

use toolrail_session_log::{ErrorCode, EventData, SessionId, event::TurnEndKind};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_testkit::{Scenario, ScenarioError};

fn results(dir: &Path) -> Vec<(String, Option<ErrorCode>)> {
    let store = JsonlStore::new(dir, Durability::Strict).unwrap();
    let opened = store.open(&SessionId::new("scenario")).unwrap();
    opened
        .events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolResult(record) => Some((
                event.call_id.as_ref().unwrap().to_string(),
                record.error_code().cloned(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_scenario_runs_with_markers_and_approvals() {
    let text = r#"{
      "config": {
        "tools": {"enabled": ["probe"]},
        "limits": {
          "max_parallel": 8,
          "cancel_grace_ms": 5000,
          "call_timeout_ms": 120000,
          "stop_batch_on_reject": true
        },
        "permissions": {"ask": ["*"]},
        "store": {"durability": "strict"}
      },
      "workspace": {"files": {"notes.txt": "hello\n"}},
      "approvals": ["allowed_once", "rejected"],
      "turns": [
        {
          "user": "start",
          "cancel_after_ms": null,
          "model": [
            {
              "tool_calls": [
                {
                  "id": "c1",
                  "name": "probe",
                  "arguments": "{\"sleep_ms\": 20, \"marker\": true}"
                },
                {"id": "c2", "name": "probe", "arguments": "{\"marker\": true}"},
                {"id": "c3", "name": "probe", "arguments": "{\"marker\": true}"}
              ],
              "stop_reason": "tool_use"
            },
            {"text": "done", "stop_reason": "end_turn"}
          ]
        }
      ]
    }"#;
    let dir = tempfile::tempdir().unwrap();
    let report = Scenario::from_json(text)
        .unwrap()
        .run(dir.path())
        .await
        .unwrap();
    assert_eq!(report.turn_ends, [TurnEndKind::Completed]);
    assert_eq!(
        results(dir.path()),
        [
            ("c1".to_owned(), None),
            ("c2".to_owned(), Some(ErrorCode::ApprovalRejected)),
            ("c3".to_owned(), Some(ErrorCode::NotExecuted)),
        ]
    );
    assert!(report.marker_dir.join("c1").exists());
    assert!(
        !report.marker_dir.join("c2").exists() && !report.marker_dir.join("c3").exists(),
        "refused calls left no marker"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("workspace/notes.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_batch_aborts_the_turn_with_honest_results() {
    let text = r#"{
      "config": {
        "tools": {"enabled": ["probe"]},
        "limits": {"cancel_grace_ms": 200},
        "permissions": {"preset": "full-auto"}
      },
      "turns": [
        {
          "user": "go",
          "cancel_after_ms": 50,
          "model": [
            {
              "tool_calls": [
                {"id": "c1", "name": "probe", "arguments": "{\"sleep_ms\": 60000}"},
                {
                  "id": "c2",
                  "name": "probe",
                  "arguments": "{\"sleep_ms\": 60000, \"ignore_cancel\": true}"
                }
              ],
              "stop_reason": "tool_use"
            }
          ]
        }
      ]
    }"#;
    let dir = tempfile::tempdir().unwrap();
    let report = Scenario::from_json(text)
        .unwrap()
        .run(dir.path())
        .await
        .unwrap();
    assert_eq!(report.turn_ends, [TurnEndKind::Aborted]);
    assert_eq!(
        results(dir.path()),
        [
            ("c1".to_owned(), Some(ErrorCode::Aborted)),
            ("c2".to_owned(), Some(ErrorCode::ToolOutcomeUnknown))
        ]
    );
}

#[test]
fn unknown_fields_are_errors_that_name_the_field() {
    let error = Scenario::from_json(
        r#"{
          "config": {"tools": {"enabled": []}, "permissions": {"preset": "full-auto"}},
          "turns": [],
          "colour": "blue"
        }"#,
    )
    .unwrap_err();
    assert!(matches!(error, ScenarioError::Invalid(_)));
    assert!(error.to_string().contains("colour"), "{error}");
    let nested = Scenario::from_json(
        r#"{
      "config": {"tools": {"enabled": []}, "permissions": {"preset": "full-auto"}},
      "turns": [{"user": "x", "model": [{"stop_reason": "end_turn", "temperature": 1}]}]
    }"#,
    )
    .unwrap_err();
    assert!(nested.to_string().contains("temperature"), "{nested}");
}

#[test]
fn a_value_of_the_wrong_type_is_an_error_that_names_where_it_is() {
    let cases = [
        (
            r#"{
              "config": {"tools": {"enabled": "probe"}, "permissions": {"preset": "full-auto"}},
              "turns": []
            }"#,
            "config.tools.enabled: invalid type: string",
        ),
        (
            r#"{
              "config": {"tools": {"enabled": []}, "permissions": {"preset": "full-auto"}},
              "turns": [
                {
                  "user": "x",
                  "model": [
                    {"stop_reason": "end_turn"},
                    {"tool_calls": {"id": "c1"}, "stop_reason": "tool_use"}
                  ]
                }
              ]
            }"#,
            "turns[0].model[1].tool_calls: invalid type: map",
        ),
        (
            r#"{
              "config": {"tools": {"enabled": []}, "permissions": {"preset": "full-auto"}},
              "turns": [
                {
                  "user": "x",
                  "model": [{"tool_calls": [{"id": 7, "name": "probe"}], "stop_reason": "tool_use"}]
                }
              ]
            }"#,
            "turns[0].model[0].tool_calls[0].id: invalid type: integer `7`",
        ),
    ];
    for (text, expected) in cases {
        let error = Scenario::from_json(text).unwrap_err();
        assert!(matches!(error, ScenarioError::Invalid(_)));
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    // A syntax error has no field to name; it keeps its line and column, and text after
    // the scenario is refused.
    let error = Scenario::from_json(r#"{"turns": [,]}"#).unwrap_err();
    assert!(error.to_string().contains("line 1 column 12"), "{error}");
    let error = Scenario::from_json(r#"{"turns": []} {}"#).unwrap_err();
    assert!(error.to_string().contains("trailing characters"), "{error}");
}

#[tokio::test]
async fn unknown_tools_and_values_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let error = Scenario::from_json(
        r#"{
      "config": {"tools": {"enabled": ["hammer"]}, "permissions": {"preset": "full-auto"}},
      "turns": []
    }"#,
    )
    .unwrap()
    .run(dir.path())
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`hammer` is neither a shipped tool nor one given to the builder"),
        "{error}"
    );
    assert!(
        !dir.path().join("scenario.jsonl").exists(),
        "nothing was logged"
    );
    let error =
        Scenario::from_json(r#"{"config": {"store": {"durability": "sometimes"}}, "turns": []}"#)
            .unwrap_err();
    assert!(
        error.to_string().contains(
            "config.store.durability: unknown variant `sometimes`, expected one of `strict`, `batched`, `none`"
        ),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_scenario_file_meets_its_expectations() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        let scenario = Scenario::from_json(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let expect = scenario
            .expect
            .as_ref()
            .unwrap_or_else(|| panic!("{} must say what it expects", file.display()));
        assert!(expect.event_kinds.is_some() && !expect.results.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let report = scenario.run(dir.path()).await.unwrap();
        assert!(
            report.mismatches.is_empty(),
            "{}:\n{}",
            file.display(),
            report.mismatches.join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_differs_from_its_expectations_reports_each_difference() {
    let text = r#"{
      "config": {
        "tools": {"enabled": ["probe"]},
        "permissions": {"preset": "full-auto"},
        "store": {"durability": "none"}
      },
      "turns": [
        {
          "user": "go",
          "model": [
            {
              "tool_calls": [{"id": "c1", "name": "probe", "arguments": "{\"fail\": \"boom\"}"}],
              "stop_reason": "tool_use"
            },
            {"text": "done", "stop_reason": "end_turn"}
          ]
        }
      ],
      "expect": {"event_kinds": ["session/start"], "results": {"c1": "ok", "c9": "ok"}}
    }"#;
    let dir = tempfile::tempdir().unwrap();
    let report = Scenario::from_json(text)
        .unwrap()
        .run(dir.path())
        .await
        .unwrap();
    assert_eq!(report.mismatches.len(), 3, "{:#?}", report.mismatches);
    assert!(report.mismatches[0].starts_with("event kinds differ"));
    assert_eq!(
        report.mismatches[1],
        "call `c1`: expected ok, found TOOL_FAILED"
    );
    assert_eq!(
        report.mismatches[2],
        "call `c9`: expected ok, but it has no result"
    );
}

#[tokio::test]
async fn a_call_id_used_in_two_model_answers_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let call = r#"{"tool_calls": [{"id": "c1", "name": "probe", "arguments": "{}"}], "stop_reason": "tool_use"}"#;
    let text = format!(
        r#"{{"config": {{"tools": {{"enabled": ["probe"]}}}}, "turns": [{{"user": "x", "model": [{call}, {call}, {{"stop_reason": "end_turn"}}]}}]}}"#
    );
    let error = Scenario::from_json(&text)
        .unwrap()
        .run(dir.path())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("call id `c1` is used in two model answers"),
        "{error}"
    );
    assert!(
        !dir.path().join("scenario.jsonl").exists(),
        "nothing was logged"
    );
}

#[tokio::test]
async fn a_bad_sandbox_rule_is_named_before_anything_runs() {
    // A mode that is not one is refused as the file is read.
    let error = Scenario::from_json(
        r#"{"config": {"tools": {"enabled": ["bash"]},
            "sandbox": {"rules": [{"command": "cargo test*", "mode": "sometimes"}]}}, "turns": []}"#,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains(
            "config.sandbox.rules[0].mode: unknown variant `sometimes`, expected one of `read-only`"
        ),
        "{error}"
    );
    // A glob that does not compile is refused before the session is made.
    let dir = tempfile::tempdir().unwrap();
    let error = Scenario::from_json(
        r#"{"config": {"tools": {"enabled": ["bash"]}, "sandbox": {"rules": [
            {"command": "ls", "mode": "read-only"}, {"command": "cargo [test", "mode": "full-access"}]}},
            "turns": []}"#,
    )
    .unwrap()
    .run(dir.path())
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`sandbox.rules[1].command`: sandbox rule `cargo [test`"),
        "{error}"
    );
    assert!(
        !dir.path().join("scenario.jsonl").exists(),
        "nothing was logged"
    );
}

#[tokio::test]
async fn a_max_parallel_of_zero_is_refused_before_anything_is_written() {
    // Zero slots would start nothing: the session would hang at its first batch.
    let scenario = Scenario::from_json(
        r#"{
          "config": {
            "tools": {"enabled": ["probe"]},
            "limits": {"max_parallel": 0},
            "permissions": {"preset": "full-auto"}
          },
          "turns": [
            {
              "user": "go",
              "model": [
                {
                  "tool_calls": [{"id": "c1", "name": "probe", "arguments": "{}"}],
                  "stop_reason": "tool_use"
                },
                {"text": "done", "stop_reason": "end_turn"}
              ]
            }
          ]
        }"#,
    )
    .unwrap_err();
    assert!(
        matches!(scenario, ScenarioError::Invalid(_)),
        "{scenario:?}"
    );
    assert_eq!(
        scenario.to_string(),
        "the scenario is not valid: config.limits.max_parallel: is 0: no call could ever start; \
         use 1 for strict serial, or more (default 8)"
    );
}

#[tokio::test]
async fn a_relative_session_dir_is_made_absolute_before_the_tools_get_it() {
    // `bash` runs each command (and spills its output) from the workspace: a folder left
    // relative would name another place there.
    let dir = tempfile::tempdir().unwrap();
    let here = std::env::current_dir().unwrap();
    let up = "../".repeat(here.components().count() - 1);
    let relative = Path::new(&up).join(dir.path().strip_prefix("/").unwrap());
    assert!(relative.is_relative());
    let scenario = Scenario::from_json(
        r#"{
          "config": {"tools": {"enabled": ["probe"]}, "permissions": {"preset": "full-auto"}},
          "turns": [
            {
              "user": "go",
              "model": [
                {
                  "tool_calls": [{"id": "c1", "name": "probe", "arguments": "{}"}],
                  "stop_reason": "tool_use"
                },
                {"text": "done", "stop_reason": "end_turn"}
              ]
            }
          ]
        }"#,
    )
    .unwrap();
    let report = scenario.run(&relative).await.unwrap();
    let absolute = std::path::absolute(&relative).unwrap();
    assert_eq!(report.marker_dir, absolute.join("markers"));
    assert_eq!(report.log_path, Some(absolute.join("scenario.jsonl")));
    assert_eq!(results(dir.path()), [("c1".to_owned(), None)]);
}

/// A deny rule for reading `**/.env` holds for every tool of a real session: `read` is
/// denied, `grep` over the folder or at the file finds nothing, and a command's `cat` or
/// `grep -r` reads nothing — the file is hidden from them where it is (DESIGN §4, issue 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_for_reading_holds_for_grep_and_commands_too() {
    let call = |id: &str, name: &str, args: serde_json::Value| serde_json::json!({"id": id, "name": name, "arguments": args.to_string()});
    let text = serde_json::json!({
        "config": {"tools": {"enabled": ["read", "grep", "bash"]},
                   "permissions": {"preset": "full-auto", "deny": [{"rule": "read(**/.env)"}]}},
        "workspace": {"files": {".env": "API_KEY=hunter2-secret\n", "app/config.py": "KEY = 'public'\n"}},
        "turns": [{"user": "look for keys", "model": [
            {"tool_calls": [
                call("c1", "read", serde_json::json!({"path": ".env"})),
                call("c2", "grep", serde_json::json!({"pattern": "hunter2", "path": "."})),
                call("c3", "grep", serde_json::json!({"pattern": "hunter2", "path": ".env"})),
                call("c4", "bash", serde_json::json!({"command": "cat .env; grep -r hunter2 . ; echo looked", "description": "look"})),
            ], "stop_reason": "tool_use"},
            {"text": "done", "stop_reason": "end_turn"}]}]
    })
    .to_string();
    let dir = tempfile::tempdir().unwrap();
    Scenario::from_json(&text)
        .unwrap()
        .run(dir.path())
        .await
        .unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let opened = store.open(&SessionId::new("scenario")).unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for event in &opened.events {
        if let EventData::ToolResult(record) = &event.data {
            seen.insert(event.call_id.as_ref().unwrap().to_string(), record.clone());
        }
    }
    assert_eq!(
        seen["c1"].error_code().map(ToString::to_string).as_deref(),
        Some("POLICY_DENIED")
    );
    for id in ["c2", "c3", "c4"] {
        let text = seen[id].text();
        assert!(!seen[id].is_error(), "{id}: {text}");
        assert!(
            !text.contains("hunter2-secret"),
            "{id} saw the secret: {text}"
        );
    }
    assert!(
        seen["c4"].text().contains("looked"),
        "{}",
        seen["c4"].text()
    );
}
