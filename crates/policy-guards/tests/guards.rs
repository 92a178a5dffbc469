//! The three guards on real files: path escapes by `..`, absolute paths and symlinks; plan
//! mode; deny lists. And one run through the pipeline: a guard's refusal is `GUARD_DENIED`
//! and the body never runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolrail_tools_core::CallArgs;

use serde_json::{Value, json};
use toolrail_policy_guards::{
    CallPattern, DenyEntry, DenyListGuard, PlanModeGuard, WorkspacePathGuard, WorkspaceRoots,
};
use toolrail_tools_core::log::{BoxFuture, ErrorCode, MemorySink, ToolSource};
use toolrail_tools_core::{
    CallRequest, CallView, Guard, GuardVerdict, Pipeline, PlanModeSwitch, RegistryBuilder, Tool,
    ToolContext, ToolOutput, ToolResult, ToolSpec, context::CallIdentity, pipeline::BatchControl,
    spec::SubjectKind,
};

fn spec(name: &str, subject: SubjectKind) -> ToolSpec {
    let field = match subject {
        SubjectKind::Path => "path",
        SubjectKind::Command => "command",
        SubjectKind::Url => "url",
        SubjectKind::Text => "text",
    };
    ToolSpec::builder(name, "test tool", json!({"type": "object"}))
        .subject(field, subject)
        .build()
}

fn verdict(guard: &dyn Guard, spec: &ToolSpec, arguments: Value) -> GuardVerdict {
    let identity = CallIdentity {
        call_id: "c1".into(),
        index: 0,
        name: spec.name().to_owned(),
        turn: None,
        step: None,
        source: Some(ToolSource::Builtin),
        version: None,
    };
    let view = CallView {
        identity: &identity,
        spec,
        source: &ToolSource::Builtin,
        arguments: &arguments,
    };
    guard.check(&view)
}

fn denied(verdict: &GuardVerdict) -> &str {
    match verdict {
        GuardVerdict::Deny { reason } => reason,
        GuardVerdict::Abstain => panic!("expected a deny"),
    }
}

/// A workspace with `src/main.rs`, beside a folder outside it holding `secret.txt`, and a
/// symlink `src/out` inside the workspace pointing at that outside folder.
struct Layout {
    _dir: tempfile::TempDir,
    workspace: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(workspace.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(workspace.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, workspace.join("src/out")).unwrap();
    Layout {
        _dir: dir,
        workspace,
        outside,
    }
}

fn path_guard(workspace: &Path) -> WorkspacePathGuard {
    WorkspacePathGuard::new(WorkspaceRoots::new([workspace]).unwrap())
}

#[test]
fn paths_inside_the_workspace_pass_including_files_not_yet_written() {
    let layout = layout();
    let guard = path_guard(&layout.workspace);
    let write = spec("write", SubjectKind::Path);
    for path in [
        "src/main.rs",
        "./src/../src/main.rs",
        "src/new/deeper/file.rs",
        &layout.workspace.join("src/main.rs").display().to_string(),
    ] {
        assert_eq!(
            verdict(&guard, &write, json!({ "path": path })),
            GuardVerdict::Abstain,
            "{path}"
        );
    }
}

#[test]
fn dot_dot_absolute_and_symlink_escapes_are_denied() {
    let layout = layout();
    let guard = path_guard(&layout.workspace);
    let read = spec("read", SubjectKind::Path);
    let secret = layout.outside.join("secret.txt").display().to_string();
    for path in [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        secret.as_str(),
        "/etc/passwd",
        "src/out/secret.txt",
        // Up from the link's target, not from `src`: the kernel's reading, not the text's.
        "src/out/../outside/secret.txt",
        // Back up above a folder that does not exist, then through the link.
        "missing/../src/out/secret.txt",
        "src/missing/deeper/../../out/secret.txt",
    ] {
        let verdict = verdict(&guard, &read, json!({ "path": path }));
        let reason = denied(&verdict);
        assert!(reason.contains("outside the workspace"), "{path}: {reason}");
        assert!(reason.contains(path), "the reason names the path: {reason}");
    }
}

#[test]
fn tools_without_a_path_subject_are_not_the_path_guards_business() {
    let layout = layout();
    let guard = path_guard(&layout.workspace);
    let bash = spec("bash", SubjectKind::Command);
    assert_eq!(
        verdict(&guard, &bash, json!({"command": "cat /etc/passwd"})),
        GuardVerdict::Abstain
    );
    let plain = ToolSpec::builder("plain", "no subject", json!({"type": "object"})).build();
    assert_eq!(
        verdict(&guard, &plain, json!({"path": "/etc/passwd"})),
        GuardVerdict::Abstain
    );
}

#[test]
fn a_missing_root_is_an_error_naming_it() {
    let error = WorkspaceRoots::new(["/no/such/root"]).unwrap_err();
    assert!(error.to_string().contains("/no/such/root"), "{error}");
}

#[test]
fn plan_mode_denies_a_write_allows_a_read_and_names_the_way_out() {
    let switch = PlanModeSwitch::new();
    let guard = PlanModeGuard::new(switch.clone());
    let write = spec("write", SubjectKind::Path);
    let read = spec("read", SubjectKind::Path)
        .into_builder()
        .read_only()
        .build();
    let args = json!({"path": "notes.txt"});
    assert_eq!(verdict(&guard, &write, args.clone()), GuardVerdict::Abstain);
    switch.set(true);
    let verdict_write = verdict(&guard, &write, args.clone());
    let reason = denied(&verdict_write);
    assert!(
        reason.contains("exit_plan_mode") && reason.contains("write"),
        "{reason}"
    );
    assert_eq!(verdict(&guard, &read, args.clone()), GuardVerdict::Abstain);
    switch.set(false);
    assert_eq!(verdict(&guard, &write, args), GuardVerdict::Abstain);
}

fn entry(pattern: &str, reason: &str) -> DenyEntry {
    DenyEntry {
        pattern: CallPattern::parse(pattern).unwrap(),
        reason: reason.to_owned(),
    }
}

#[test]
fn deny_lists_match_tool_and_subject_and_give_the_entry_and_reason() {
    let layout = layout();
    let roots = WorkspaceRoots::new([&layout.workspace]).unwrap();
    std::fs::write(layout.workspace.join(".env"), "KEY=1\n").unwrap();
    std::os::unix::fs::symlink(
        layout.workspace.join(".env"),
        layout.workspace.join("innocent.txt"),
    )
    .unwrap();
    let guard = DenyListGuard::new(
        vec![
            entry("bash(rm -rf *)", "no recursive deletes"),
            entry("read(**/.env)", "secrets stay secret"),
            entry("mcp__*", "no MCP tools here"),
        ],
        roots.as_slice().to_vec(),
    );
    let bash = spec("bash", SubjectKind::Command);
    let read = spec("read", SubjectKind::Path);
    let mcp = ToolSpec::builder("mcp__github__push", "push", json!({"type": "object"})).build();

    let rm = verdict(&guard, &bash, json!({"command": "rm -rf /"}));
    assert_eq!(
        denied(&rm),
        "denied by `deny bash(rm -rf *)`: no recursive deletes"
    );
    assert_eq!(
        verdict(&guard, &bash, json!({"command": "git status"})),
        GuardVerdict::Abstain
    );
    for path in [
        ".env",
        "./.env",
        "src/../.env",
        "innocent.txt",
        "missing/../innocent.txt",
    ] {
        let verdict = verdict(&guard, &read, json!({ "path": path }));
        assert!(denied(&verdict).contains("secrets stay secret"), "{path}");
    }
    assert_eq!(
        verdict(&guard, &read, json!({"path": "src/main.rs"})),
        GuardVerdict::Abstain
    );
    assert!(denied(&verdict(&guard, &mcp, json!({}))).contains("deny mcp__*"));
}

/// Counts how often its body ran.
struct Counted {
    spec: ToolSpec,
    runs: Arc<AtomicUsize>,
}

impl Tool for Counted {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(ToolOutput::text("written")) })
    }
}

#[tokio::test]
async fn through_the_pipeline_a_guard_refusal_is_guard_denied_and_nothing_runs() {
    let layout = layout();
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = Counted {
        spec: spec("write", SubjectKind::Path),
        runs: Arc::clone(&runs),
    };
    let (registry, _) = RegistryBuilder::new()
        .builtin(Arc::new(tool))
        .build()
        .unwrap();
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new()))
        .guard(Arc::new(path_guard(&layout.workspace)))
        .build();
    let tools = registry.snapshot();
    let escape = CallRequest::new("c1", 0, "write", r#"{"path": "../outside/x"}"#);
    let committed = pipeline
        .execute_one(&tools, escape, &BatchControl::default())
        .await
        .unwrap();
    assert_eq!(
        committed.record().error_code(),
        Some(&ErrorCode::GuardDenied)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let inside = CallRequest::new("c2", 1, "write", r#"{"path": "src/x.rs"}"#);
    let committed = pipeline
        .execute_one(&tools, inside, &BatchControl::default())
        .await
        .unwrap();
    assert!(!committed.record().is_error(), "{:?}", committed.record());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
