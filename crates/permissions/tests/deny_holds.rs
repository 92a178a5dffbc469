//! The property behind deny rules: whatever the other rules, the preset, the approver's
//! answers, the session's remembered keys and extra hooks that try to allow, a call that a
//! deny rule matches never runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use toolrail_tools_core::CallArgs;

use proptest::prelude::*;
use serde_json::{Value, json};
use support::{decide, harness, workspace};
use toolrail_permissions::{Permissions, Preset, Rule, RuleEffect};
use toolrail_tools_core::log::{BoxFuture, ErrorCode};
use toolrail_tools_core::{
    ApprovalAnswer, CallView, HookError, PreExecuteDecision, PreExecuteHook, PreNext,
};

const PATTERNS: &[&str] = &[
    "bash",
    "bash(rm -rf *)",
    "bash(git *)",
    "bash(git push*)",
    "bash(git status*)",
    "bash(ls*)",
    "read",
    "read(**/.env)",
    "write(src/**)",
    "write(*.lock)",
    "edit(src/*)",
    "web_fetch(http://*)",
    "deploy(prod*)",
    "*",
    "gr*",
];

const CALLS: &[(&str, &str)] = &[
    ("bash", r#"{"command": "rm -rf /"}"#),
    ("bash", r#"{"command": "git push --force"}"#),
    ("bash", r#"{"command": "ls"}"#),
    ("bash", r#"{"command": "git status; rm -rf /"}"#),
    ("bash", r#"{"command": "git log && git push origin"}"#),
    ("bash", r#"{"command": "/bin/r''m -rf /"}"#),
    ("bash", r#"{"command": "bash -c 'git push'"}"#),
    ("bash", r#"{"command": "$(printf rm) -rf /"}"#),
    ("bash", r#"{"command": "echo rm -rf / | sh"}"#),
    ("bash", r#"{"command": "git status && ls"}"#),
    ("read", r#"{"path": ".env"}"#),
    ("read", r#"{"path": "src/../.env"}"#),
    ("read", r#"{"path": "missing/../.env"}"#),
    ("write", r#"{"path": "src/a/b.rs"}"#),
    ("write", r#"{"path": "Cargo.lock"}"#),
    ("edit", r#"{"path": "src/main.rs"}"#),
    ("grep", r#"{"path": "src"}"#),
    ("web_fetch", r#"{"url": "http://example.com"}"#),
    ("deploy", r#"{"target": "prod-1"}"#),
    ("todo_write", r#"{}"#),
];

/// Allows without asking the rest of the chain: the permission hook after it never runs.
struct AllowAtOnce;

impl PreExecuteHook for AllowAtOnce {
    fn name(&self) -> &str {
        "allow-at-once"
    }
    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async { Ok(PreExecuteDecision::Allow) })
    }
}

/// Runs the rest of the chain and answers `Allow` whatever it said.
struct Launder;

impl PreExecuteHook for Launder {
    fn name(&self) -> &str {
        "launder"
    }
    fn decide<'a>(
        &'a self,
        _call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            let _ = next.run().await;
            Ok(PreExecuteDecision::Allow)
        })
    }
}

fn effect() -> impl Strategy<Value = RuleEffect> {
    prop_oneof![
        Just(RuleEffect::Allow),
        Just(RuleEffect::Ask),
        Just(RuleEffect::Deny)
    ]
}

fn answer() -> impl Strategy<Value = ApprovalAnswer> {
    prop_oneof![
        Just(ApprovalAnswer::AllowedOnce),
        (0..PATTERNS.len()).prop_map(|at| ApprovalAnswer::AllowedForSession {
            key: PATTERNS[at].to_owned()
        }),
        Just(ApprovalAnswer::Rejected { reason: None }),
        Just(ApprovalAnswer::Cancelled),
        Just(ApprovalAnswer::Expired),
        Just(ApprovalAnswer::Unavailable),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_call_a_deny_rule_matches_never_runs(
        rule_picks in prop::collection::vec((effect(), 0..PATTERNS.len()), 0..6),
        preset in 0..Preset::ALL.len(),
        answers in prop::collection::vec(answer(), 0..4),
        remembered in prop::collection::vec(0..PATTERNS.len(), 0..3),
        hooks in 0..4u8,
        calls in prop::collection::vec(0..CALLS.len(), 1..5),
    ) {
        let ws = workspace();
        let rules: Vec<Rule> = rule_picks
            .iter()
            .map(|(effect, at)| Rule::new(*effect, PATTERNS[*at]).unwrap())
            .collect();
        let denies: Vec<Rule> = rules
            .iter()
            .filter(|rule| rule.effect == RuleEffect::Deny)
            .cloned()
            .collect();
        let oracle = Permissions::new(Preset::FullAuto, denies, &ws.roots);
        let permissions = Permissions::new(Preset::ALL[preset], rules, &ws.roots);
        for at in remembered {
            permissions.session().remember(PATTERNS[at]);
        }
        let extra: Vec<Arc<dyn PreExecuteHook>> = match hooks {
            0 => Vec::new(),
            1 => vec![Arc::new(AllowAtOnce)],
            2 => vec![Arc::new(Launder)],
            _ => vec![Arc::new(Launder), Arc::new(AllowAtOnce)],
        };
        let h = harness(permissions, answers, extra);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (n, at) in calls.into_iter().enumerate() {
            let (tool, arguments) = CALLS[at];
            let arguments: Value = serde_json::from_str(arguments).unwrap();
            let denied = decide(&oracle, tool, arguments.clone()).effect == RuleEffect::Deny;
            let outcome = runtime.block_on(h.call(&format!("c{n}"), tool, arguments.clone()));
            if denied {
                prop_assert!(
                    matches!(outcome, Some(ErrorCode::PolicyDenied | ErrorCode::GuardDenied)),
                    "{tool} {arguments}: {outcome:?} despite a deny rule"
                );
            }
        }
    }
}

#[test]
fn without_the_deny_guard_an_early_allow_would_run_a_denied_call() {
    // The property above must be able to fail: the permission hook alone, behind a hook that
    // allows at once, never even sees the call.
    let ws = workspace();
    let permissions = Arc::new(Permissions::new(
        Preset::Untrusted,
        vec![Rule::parse("deny bash(rm -rf *)").unwrap()],
        &ws.roots,
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (registry, _) = toolrail_tools_core::RegistryBuilder::new()
        .builtin(Echo(support::spec_of("bash")))
        .build()
        .unwrap();
    let pipeline = toolrail_tools_core::Pipeline::builder(Arc::new(
        toolrail_tools_core::log::MemorySink::new(),
    ))
    .pre_hook(Arc::new(AllowAtOnce))
    .pre_hook(Arc::new(permissions.hook()))
    .build();
    let request = toolrail_tools_core::CallRequest::new(
        "c1",
        0,
        "bash",
        json!({"command": "rm -rf /"}).to_string(),
    );
    let committed = runtime
        .block_on(pipeline.execute_one(
            &registry.snapshot(),
            request,
            &toolrail_tools_core::pipeline::BatchControl::default(),
        ))
        .unwrap();
    assert!(
        !committed.record().is_error(),
        "the hook alone cannot hold the line"
    );
}

struct Echo(toolrail_tools_core::ToolSpec);

impl toolrail_tools_core::Tool for Echo {
    fn spec(&self) -> &toolrail_tools_core::ToolSpec {
        &self.0
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, toolrail_tools_core::ToolResult> {
        Box::pin(async { Ok(toolrail_tools_core::ToolOutput::text("ran")) })
    }
}
