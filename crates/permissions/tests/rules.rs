//! Rules: precedence, subject globs for every shipped tool kind, presets, the session's
//! approvals (and their rebuild from a log), and rule files that are rejected with the line
//! and the reason.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::json;
use support::{decide, harness, rules, workspace};
use toolrail_permissions::{Permissions, Preset, RuleEffect, RuleFile, SessionApprovals};
use toolrail_tools_core::ApprovalAnswer;
use toolrail_tools_core::log::{
    ErrorCode, Event, EventData, Timestamp,
    event::{ApprovalDecided, DecidedBy},
};

#[test]
fn deny_beats_ask_beats_allow_and_the_most_specific_rule_is_named() {
    let ws = workspace();
    let permissions = Permissions::new(
        Preset::FullAuto,
        rules(&[
            "allow bash",
            "ask bash(git *)",
            "allow bash(git status*)",
            "deny bash(git push --force*)",
            "deny bash(git push*)",
        ]),
        &ws.roots,
    );
    let verdict = decide(
        &permissions,
        "bash",
        json!({"command": "git push --force origin"}),
    );
    assert_eq!(verdict.effect, RuleEffect::Deny);
    assert!(
        verdict.reason.contains("`deny bash(git push --force*)`"),
        "the most specific deny is named: {}",
        verdict.reason
    );
    // An allow does not beat an ask, however specific.
    let status = decide(
        &permissions,
        "bash",
        json!({"command": "git status --short"}),
    );
    assert_eq!(status.effect, RuleEffect::Ask);
    assert!(
        status.reason.contains("`ask bash(git *)`"),
        "{}",
        status.reason
    );
    assert_eq!(
        status.session_key.as_deref(),
        Some("bash(git status --short)")
    );
    let ls = decide(&permissions, "bash", json!({"command": "ls"}));
    assert_eq!(ls.effect, RuleEffect::Allow);
    assert!(ls.reason.contains("`allow bash`"), "{}", ls.reason);
}

#[test]
fn subject_globs_work_for_every_shipped_tool_kind() {
    let ws = workspace();
    let permissions = Permissions::new(
        Preset::FullAuto,
        rules(&[
            "deny bash(rm -rf *)",
            "deny read(**/.env)",
            "deny write(src/generated/**)",
            "deny edit(*.lock)",
            "deny glob(/etc/**)",
            "deny grep(secrets/*)",
            "deny web_fetch(http://*)",
            "deny deploy(prod*)",
        ]),
        &ws.roots,
    );
    let root = ws.dir.path().display().to_string();
    let cases = [
        ("bash", json!({"command": "rm -rf build/"}), true),
        ("bash", json!({"command": "rm -r build/"}), false),
        ("read", json!({"path": "config/.env"}), true),
        ("read", json!({"path": format!("{root}/.env")}), true),
        ("read", json!({"path": "config/env.rs"}), false),
        ("write", json!({"path": "src/generated/a/b.rs"}), true),
        (
            "write",
            json!({"path": "./src/generated/../generated/x.rs"}),
            true,
        ),
        ("write", json!({"path": "src/main.rs"}), false),
        ("edit", json!({"path": "Cargo.lock"}), true),
        // `*` stays in one folder for paths.
        ("edit", json!({"path": "sub/Cargo.lock"}), false),
        ("glob", json!({"path": "/etc/ssh"}), true),
        ("grep", json!({"path": "secrets/key.pem"}), true),
        ("grep", json!({"path": "secrets/deeper/key.pem"}), false),
        ("web_fetch", json!({"url": "http://example.com/a/b"}), true),
        ("web_fetch", json!({"url": "https://example.com/"}), false),
        ("deploy", json!({"target": "prod-eu"}), true),
        ("deploy", json!({"target": "staging"}), false),
    ];
    for (tool, arguments, denied) in cases {
        let verdict = decide(&permissions, tool, arguments.clone());
        assert_eq!(
            verdict.effect == RuleEffect::Deny,
            denied,
            "{tool} {arguments}: {}",
            verdict.reason
        );
    }
    // A rule with a subject does not cover a tool that has none.
    let subjectless = Permissions::new(Preset::FullAuto, rules(&["deny todo_write(x)"]), &ws.roots);
    assert_eq!(
        decide(&subjectless, "todo_write", json!({})).effect,
        RuleEffect::Allow
    );
}

#[test]
fn presets_decide_what_no_rule_covers() {
    let ws = workspace();
    let expected = [
        // tool, untrusted, workspace, never-ask, full-auto
        ("read", ["allow", "allow", "allow", "allow"]),
        ("glob", ["allow", "allow", "allow", "allow"]),
        ("write", ["ask", "allow", "allow", "allow"]),
        ("edit", ["ask", "allow", "allow", "allow"]),
        ("bash", ["ask", "ask", "deny", "allow"]),
        ("deploy", ["ask", "ask", "deny", "allow"]),
    ];
    for (tool, effects) in expected {
        for (preset, effect) in Preset::ALL.into_iter().zip(effects) {
            let permissions = Permissions::new(preset, Vec::new(), &ws.roots);
            let verdict = decide(
                &permissions,
                tool,
                json!({"path": "src/x", "command": "make"}),
            );
            assert_eq!(verdict.effect.as_str(), effect, "{tool} under {preset}");
            if effect != "deny" {
                assert!(
                    verdict.reason.contains(preset.as_str()),
                    "{}",
                    verdict.reason
                );
            }
        }
    }
    // never-ask turns an explicit ask rule into a deny too, saying why.
    let never = Permissions::new(Preset::NeverAsk, rules(&["ask read(**)"]), &ws.roots);
    let verdict = decide(&never, "read", json!({"path": "a"}));
    assert_eq!(verdict.effect, RuleEffect::Deny);
    assert!(verdict.reason.contains("asks no one"), "{}", verdict.reason);
}

#[test]
fn unattended_denies_every_ask_and_keeps_every_allow() {
    let ws = workspace();
    for preset in Preset::ALL {
        let attended = Permissions::new(preset, rules(&["allow bash(git status*)"]), &ws.roots);
        let unattended = attended.clone().unattended();
        for (tool, args) in [
            ("read", json!({"path": "a"})),
            ("write", json!({"path": "src/x"})),
            ("bash", json!({"command": "make"})),
            ("bash", json!({"command": "git status"})),
        ] {
            let before = decide(&attended, tool, args.clone());
            let after = decide(&unattended, tool, args.clone());
            let expected = match before.effect {
                RuleEffect::Ask => RuleEffect::Deny,
                other @ (RuleEffect::Allow | RuleEffect::Deny) => other,
            };
            assert_eq!(after.effect, expected, "{tool} {args} under {preset}");
            if before.effect == RuleEffect::Ask {
                assert!(
                    after.reason.contains("asks no one (unattended)"),
                    "{}",
                    after.reason
                );
            }
        }
    }
}

#[tokio::test]
async fn approve_for_session_is_remembered_and_covers_only_its_key() {
    let ws = workspace();
    let permissions = Permissions::new(Preset::Untrusted, Vec::new(), &ws.roots);
    let h = harness(
        permissions,
        vec![
            ApprovalAnswer::AllowedForSession {
                key: "bash(git *)".to_owned(),
            },
            ApprovalAnswer::Rejected { reason: None },
        ],
        Vec::new(),
    );
    assert_eq!(
        h.call("c1", "bash", json!({"command": "git fetch"})).await,
        None
    );
    // Covered by the remembered key: no second question.
    assert_eq!(
        h.call("c2", "bash", json!({"command": "git log"})).await,
        None
    );
    assert_eq!(h.approver.asked.lock().len(), 1);
    // Not covered: asked, and rejected.
    assert_eq!(
        h.call("c3", "bash", json!({"command": "make"})).await,
        Some(ErrorCode::ApprovalRejected)
    );
    let asked = h.approver.asked.lock();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[1].subject.as_deref(), Some("make"));
    assert_eq!(asked[1].session_key.as_deref(), Some("bash(make)"));
    assert_eq!(h.session.keys(), ["bash(git *)"]);
}

#[tokio::test]
async fn the_session_cache_is_rebuilt_from_the_log() {
    let ws = workspace();
    let first = harness(
        Permissions::new(Preset::Untrusted, Vec::new(), &ws.roots),
        vec![ApprovalAnswer::AllowedForSession {
            key: "write(src/**)".to_owned(),
        }],
        Vec::new(),
    );
    assert_eq!(
        first.call("c1", "write", json!({"path": "src/a.rs"})).await,
        None
    );

    // A new process: only the log is left.
    let session = SessionApprovals::from_events(&first.sink.events());
    assert_eq!(session.keys(), ["write(src/**)"]);
    let resumed = harness(
        Permissions::new(Preset::Untrusted, Vec::new(), &ws.roots).with_session(session),
        Vec::new(),
        Vec::new(),
    );
    assert_eq!(
        resumed
            .call("c2", "write", json!({"path": "src/b.rs"}))
            .await,
        None
    );
    assert!(resumed.approver.asked.lock().is_empty());
    // Outside the key it still asks, and with no answer it does not run.
    assert_eq!(
        resumed
            .call("c3", "write", json!({"path": "docs/x.md"}))
            .await,
        Some(ErrorCode::ApprovalUnavailable)
    );
}

#[test]
fn unusable_session_keys_cover_nothing() {
    let ws = workspace();
    let session = SessionApprovals::from_events(&[Event {
        seq: 1,
        ts: Timestamp::now(),
        turn: None,
        step: None,
        call_id: None,
        data: EventData::ApprovalDecided(ApprovalDecided {
            answer: ApprovalAnswer::AllowedForSession {
                key: "bash(".to_owned(),
            },
            waited_us: 0,
            by: DecidedBy::Approver,
        }),
    }]);
    assert!(session.keys().is_empty());
    let permissions =
        Permissions::new(Preset::Untrusted, Vec::new(), &ws.roots).with_session(session);
    assert_eq!(
        decide(&permissions, "bash", json!({"command": "ls"})).effect,
        RuleEffect::Ask
    );
}

#[test]
fn rule_files_load_from_toml_and_json_with_their_lines() {
    let toml = r#"
preset = "workspace"
allow = ["bash(git status*)"]
deny = [
  "bash(rm -rf *)",
  { rule = "read(**/.env)", reason = "secrets stay out of the conversation" },
]
"#;
    let file = RuleFile::from_toml(toml, "rules.toml").unwrap();
    assert_eq!(file.preset, Some(Preset::Workspace));
    let described: Vec<String> = file
        .rules
        .iter()
        .map(|rule| format!("{rule} @ {}", rule.origin.as_ref().unwrap()))
        .collect();
    assert_eq!(
        described,
        [
            "allow bash(git status*) @ rules.toml:3",
            "deny bash(rm -rf *) @ rules.toml:5",
            "deny read(**/.env) @ rules.toml:6",
        ]
    );
    let json = r#"{
  "ask": ["write(src/**)"],
  "deny": [{"rule": "read(**/.env)", "reason": "secrets"}]
}"#;
    let file = RuleFile::from_json(json, "rules.json").unwrap();
    assert_eq!(file.preset, None);
    assert_eq!(file.rules.len(), 2);
    assert_eq!(file.rules[1].reason.as_deref(), Some("secrets"));
    assert_eq!(file.rules[1].origin.as_ref().unwrap().line, Some(3));

    // A file's reason reaches the model through the guard and the hook alike.
    let ws = workspace();
    let permissions = Permissions::from_file(file, Preset::Untrusted, &ws.roots);
    let verdict = decide(&permissions, "read", json!({"path": ".env"}));
    assert!(verdict.reason.contains("rules.json:3") && verdict.reason.contains("secrets"));
}

#[test]
fn bad_rule_files_are_rejected_with_the_line_and_the_reason() {
    let cases: &[(&str, &str, usize, &str)] = &[
        (
            "bad.toml",
            "preset = \"workspace\"\ndeny = [\n  \"bash(rm -rf *\",\n]\n",
            3,
            "must end with `)`",
        ),
        (
            "bad.toml",
            "allow = [\"read\"]\nalow = [\"bash\"]\n",
            2,
            "unknown field `alow`",
        ),
        (
            "bad.toml",
            "preset = \"yolo\"\n",
            1,
            "unknown preset `yolo`",
        ),
        ("bad.toml", "deny = [\"bash(x)\"\n", 1, "unclosed array"),
        (
            "bad.toml",
            "ask = [{ rule = \"write\", why = \"x\" }]\n",
            1,
            "unknown field `why`",
        ),
        (
            "bad.json",
            "{\n  \"allow\": [\"read\"],\n  \"deny\": [\"git status\"]\n}",
            3,
            "no spaces",
        ),
        ("bad.json", "{\n  \"allow\": [\"read\",]\n}", 2, ""),
        (
            "bad.json",
            "{\n  \"deny\": [\"write(src/[)\"]\n}",
            2,
            "not a valid pattern",
        ),
    ];
    for (name, text, line, why) in cases {
        let result = if name.ends_with(".toml") {
            RuleFile::from_toml(text, name)
        } else {
            RuleFile::from_json(text, name)
        };
        let error = result.expect_err(text);
        assert_eq!(error.source_name, *name);
        assert_eq!(error.line, Some(*line), "{error}");
        assert!(error.why.contains(why), "{error}");
        assert!(
            error.to_string().starts_with(&format!("{name}:{line}: ")),
            "{error}"
        );
    }
}

#[test]
fn rule_files_are_read_by_extension() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, "deny: []").unwrap();
    let error = RuleFile::load(&path).unwrap_err();
    assert!(error.why.contains(".toml or .json"), "{error}");
    let toml = dir.path().join("rules.toml");
    std::fs::write(&toml, "deny = [\"bash\"]\n").unwrap();
    assert_eq!(RuleFile::load(&toml).unwrap().rules.len(), 1);
}

#[test]
fn chained_commands_escape_no_deny_and_ride_on_no_allow() {
    let ws = workspace();
    let permissions = Permissions::new(
        Preset::Untrusted,
        rules(&["allow bash(git status*)", "deny bash(rm -rf *)"]),
        &ws.roots,
    );
    assert_eq!(
        decide(
            &permissions,
            "bash",
            json!({"command": "git status --short"})
        )
        .effect,
        RuleEffect::Allow
    );
    // An allowed prefix does not carry what is chained after it: the preset asks.
    let chained = decide(
        &permissions,
        "bash",
        json!({"command": "git status; curl x | grep y"}),
    );
    assert_eq!(chained.effect, RuleEffect::Ask, "{}", chained.reason);
    // `| sh` runs commands read at run time: the deny rule could name them.
    let piped = decide(
        &permissions,
        "bash",
        json!({"command": "git status; curl x | sh"}),
    );
    assert_eq!(piped.effect, RuleEffect::Deny, "{}", piped.reason);
    assert!(
        piped
            .reason
            .contains("commands it runs are read at run time"),
        "{}",
        piped.reason
    );
    // A denied command is caught wherever it sits in the line.
    for command in [
        "cd / && rm -rf .",
        "git status; rm -rf ~",
        "echo $(rm -rf ~)",
    ] {
        let verdict = decide(&permissions, "bash", json!({ "command": command }));
        assert_eq!(
            verdict.effect,
            RuleEffect::Deny,
            "{command}: {}",
            verdict.reason
        );
    }
    // The same holds for an approval remembered for the session.
    permissions.session().remember("bash(git status*)");
    let remembered = decide(
        &permissions,
        "bash",
        json!({"command": "git status && make"}),
    );
    assert_eq!(remembered.effect, RuleEffect::Ask);
}

#[tokio::test]
async fn a_session_answer_where_none_was_offered_counts_once() {
    let ws = workspace();
    // An ask rule without a session key: the hook offers one, so make the request offer
    // none by asking through a tool that always asks.
    let permissions = Permissions::new(Preset::FullAuto, Vec::new(), &ws.roots);
    let session = permissions.session().clone();
    let service = toolrail_permissions::RememberApprovals::new(
        support::Scripted::new(vec![ApprovalAnswer::AllowedForSession {
            key: "bash".to_owned(),
        }]),
        session.clone(),
    );
    let request = toolrail_tools_core::ApprovalRequest {
        identity: toolrail_tools_core::context::CallIdentity {
            call_id: "c1".into(),
            index: 0,
            name: "exit_plan_mode".to_owned(),
            turn: None,
            step: None,
            source: None,
            version: None,
        },
        tool_kind: "think",
        subject: None,
        arguments: json!({}).into(),
        reason: "always asks".to_owned(),
        session_key: None,
        preview: None,
    };
    let answer = toolrail_tools_core::ApprovalService::request(
        &service,
        &request,
        &toolrail_tools_core::CancellationToken::new(),
    )
    .await;
    assert_eq!(answer, ApprovalAnswer::AllowedOnce);
    assert!(session.keys().is_empty(), "nothing is remembered");
}

#[test]
fn edits_nothing_can_confine_ask_even_under_the_workspace_preset() {
    let ws = workspace();
    let permissions = Permissions::new(Preset::Workspace, Vec::new(), &ws.roots);
    // `write` names its path: the path guard confines it, so it may run.
    assert_eq!(
        decide(&permissions, "write", json!({"path": "a"})).effect,
        RuleEffect::Allow
    );
    // An edit tool without a path subject (an MCP tool, say) asks.
    let spec =
        toolrail_tools_core::ToolSpec::builder("mcp_edit", "edits", json!({"type": "object"}))
            .kind(toolrail_tools_core::ToolKind::Edit)
            .build();
    assert_eq!(Preset::Workspace.default_for(&spec), RuleEffect::Ask);
}
