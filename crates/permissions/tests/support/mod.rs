//! Tools of every shipped kind with their subjects, a scripted approver, and a pipeline with
//! the permission hook and its deny guard installed.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolrail_tools_core::CallArgs;

use parking_lot::Mutex;
use serde_json::{Value, json};
use toolrail_permissions::{Permissions, Preset, RememberApprovals, Rule, SessionApprovals};
use toolrail_policy_guards::WorkspaceRoots;
use toolrail_tools_core::log::{BoxFuture, ErrorCode, MemorySink};
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CallRequest, CallView, CancellationToken,
    Guard, GuardVerdict, Pipeline, PreExecuteHook, RegistryBuilder, Tool, ToolContext, ToolKind,
    ToolOutput, ToolResult, ToolSet, ToolSpec, context::CallIdentity, pipeline::BatchControl,
    spec::SubjectKind,
};

/// A shipped tool: name, kind, subject (field and kind), read-only.
type Shipped = (
    &'static str,
    ToolKind,
    Option<(&'static str, SubjectKind)>,
    bool,
);

/// The tools toolrail ships (and will ship), by name, kind and subject.
pub(crate) const SHIPPED: &[Shipped] = &[
    (
        "bash",
        ToolKind::Execute,
        Some(("command", SubjectKind::Command)),
        false,
    ),
    (
        "read",
        ToolKind::Read,
        Some(("path", SubjectKind::Path)),
        true,
    ),
    (
        "write",
        ToolKind::Edit,
        Some(("path", SubjectKind::Path)),
        false,
    ),
    (
        "edit",
        ToolKind::Edit,
        Some(("path", SubjectKind::Path)),
        false,
    ),
    (
        "glob",
        ToolKind::Search,
        Some(("path", SubjectKind::Path)),
        true,
    ),
    (
        "grep",
        ToolKind::Search,
        Some(("path", SubjectKind::Path)),
        true,
    ),
    (
        "web_fetch",
        ToolKind::Fetch,
        Some(("url", SubjectKind::Url)),
        true,
    ),
    ("todo_write", ToolKind::Think, None, true),
    (
        "deploy",
        ToolKind::Other,
        Some(("target", SubjectKind::Text)),
        false,
    ),
];

pub(crate) fn spec_of(name: &str) -> ToolSpec {
    let (_, kind, subject, read_only) = SHIPPED
        .iter()
        .find(|(known, ..)| *known == name)
        .copied()
        .unwrap_or_else(|| panic!("no shipped tool `{name}`"));
    let mut spec = ToolSpec::builder(name, "test tool", json!({"type": "object"})).kind(kind);
    if let Some((field, kind)) = subject {
        spec = spec.subject(field, kind);
    }
    if read_only {
        spec = spec.read_only();
    }
    spec.build()
}

/// Decides one call outside any pipeline.
pub(crate) fn decide(
    permissions: &Permissions,
    tool: &str,
    arguments: Value,
) -> toolrail_permissions::Verdict {
    with_view(tool, arguments, |view| permissions.decide(view))
}

/// What the permissions' deny guard says of one call, outside any pipeline.
pub(crate) fn guard_check(permissions: &Permissions, tool: &str, arguments: Value) -> GuardVerdict {
    let guard = permissions.deny_guard();
    with_view(tool, arguments, |view| guard.check(view))
}

/// One call of a shipped tool as policy stages see it.
pub(crate) fn with_view<R>(
    tool: &str,
    arguments: Value,
    look: impl FnOnce(&CallView<'_>) -> R,
) -> R {
    let spec = spec_of(tool);
    let identity = CallIdentity {
        call_id: "c1".into(),
        index: 0,
        name: tool.to_owned(),
        turn: None,
        step: None,
        source: None,
        version: None,
    };
    let view = CallView {
        identity: &identity,
        spec: &spec,
        source: &toolrail_tools_core::log::ToolSource::Builtin,
        arguments: &arguments,
    };
    look(&view)
}

pub(crate) fn rules(texts: &[&str]) -> Vec<Rule> {
    texts
        .iter()
        .map(|text| Rule::parse(text).unwrap())
        .collect()
}

pub(crate) struct Workspace {
    pub dir: tempfile::TempDir,
    pub roots: WorkspaceRoots,
}

pub(crate) fn workspace() -> Workspace {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    let roots = WorkspaceRoots::new([dir.path()]).unwrap();
    Workspace { dir, roots }
}

/// Counts the bodies that ran.
pub(crate) struct Counted {
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
        Box::pin(async { Ok(ToolOutput::text("ran")) })
    }
}

/// Answers from a list, in order; `Unavailable` when the list is empty. Records what it saw.
#[derive(Default)]
pub(crate) struct Scripted {
    pub answers: Mutex<Vec<ApprovalAnswer>>,
    pub asked: Mutex<Vec<ApprovalRequest>>,
}

impl Scripted {
    pub(crate) fn new(answers: Vec<ApprovalAnswer>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers),
            asked: Mutex::new(Vec::new()),
        })
    }
}

impl ApprovalService for Scripted {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        self.asked.lock().push(request.clone());
        let mut answers = self.answers.lock();
        let answer = if answers.is_empty() {
            ApprovalAnswer::Unavailable
        } else {
            answers.remove(0)
        };
        Box::pin(async move { answer })
    }
}

pub(crate) struct Harness {
    pub pipeline: Pipeline,
    pub tools: ToolSet,
    pub runs: Arc<AtomicUsize>,
    pub approver: Arc<Scripted>,
    pub session: SessionApprovals,
    pub sink: Arc<MemorySink>,
}

/// A pipeline with `extra` hooks first (they may try to allow), then the permission hook,
/// the deny guard, and a remembering scripted approver.
pub(crate) fn harness(
    permissions: Permissions,
    answers: Vec<ApprovalAnswer>,
    extra: Vec<Arc<dyn PreExecuteHook>>,
) -> Harness {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut builder = RegistryBuilder::new();
    for (name, ..) in SHIPPED {
        builder = builder.builtin(Counted {
            spec: spec_of(name),
            runs: Arc::clone(&runs),
        });
    }
    let (registry, _) = builder.build().unwrap();
    let session = permissions.session().clone();
    let permissions = Arc::new(permissions);
    let approver = Scripted::new(answers);
    let sink = Arc::new(MemorySink::new());
    let mut pipeline = Pipeline::builder(sink.clone());
    for hook in extra {
        pipeline = pipeline.pre_hook(hook);
    }
    let pipeline = pipeline
        .pre_hook(Arc::new(permissions.hook()))
        .guard(Arc::new(permissions.deny_guard()))
        .approval(Arc::new(RememberApprovals::new(
            Arc::clone(&approver),
            session.clone(),
        )))
        .build();
    Harness {
        pipeline,
        tools: registry.snapshot(),
        runs,
        approver,
        session,
        sink,
    }
}

impl Harness {
    /// Runs one call; `None` when it ran, its error code when it did not.
    pub(crate) async fn call(&self, id: &str, tool: &str, arguments: Value) -> Option<ErrorCode> {
        let before = self.runs.load(Ordering::SeqCst);
        let request = CallRequest::new(id, 0, tool, arguments.to_string());
        let committed = self
            .pipeline
            .execute_one(&self.tools, request, &BatchControl::default())
            .await
            .unwrap();
        let ran = self.runs.load(Ordering::SeqCst) > before;
        assert_eq!(
            ran,
            !committed.record().is_error(),
            "{:?}",
            committed.record()
        );
        committed.record().error_code().cloned()
    }
}

pub(crate) fn preset_names() -> Vec<Preset> {
    Preset::ALL.to_vec()
}
