//! The sandbox escape suite, in each mode and each tier, with real processes: writes outside the
//! workspace, into `.git`, through a symlink and through `/proc/self/root`, an inet socket,
//! a connection to a listener this test starts on 127.0.0.1, `mount` and `ptrace` must be
//! refused where the mode says so — and the same actions allowed where it says so, since a
//! sandbox that refuses everything is broken too. Escalation widens a sandbox only with an
//! approval.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolrail_shell_tool::{BashTool, ModeRule, SandboxMode, SandboxTier, ShellConfig};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    ApprovalAnswer, CallRequest, CommittedResult, Pipeline, RegistryBuilder, ToolSet, Typed,
    WorkspaceRoots, pipeline::BatchControl,
};

struct Sandboxed {
    dir: tempfile::TempDir,
    tools: ToolSet,
    pipeline: Pipeline,
}

/// An approver that gives its answers in order and keeps every request it was asked.
struct ScriptedApprovals {
    answers: std::sync::Mutex<std::collections::VecDeque<ApprovalAnswer>>,
    asked: std::sync::Mutex<Vec<toolrail_tools_core::ApprovalRequest>>,
}

impl ScriptedApprovals {
    fn new(answers: impl IntoIterator<Item = ApprovalAnswer>) -> Self {
        Self {
            answers: std::sync::Mutex::new(answers.into_iter().collect()),
            asked: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn asked(&self) -> Vec<toolrail_tools_core::ApprovalRequest> {
        self.asked.lock().unwrap().clone()
    }
}

impl toolrail_tools_core::ApprovalService for ScriptedApprovals {
    fn request<'a>(
        &'a self,
        request: &'a toolrail_tools_core::ApprovalRequest,
        _cancel: &'a toolrail_tools_core::CancellationToken,
    ) -> toolrail_tools_core::log::BoxFuture<'a, ApprovalAnswer> {
        self.asked.lock().unwrap().push(request.clone());
        let answer = self.answers.lock().unwrap().pop_front();
        Box::pin(std::future::ready(
            answer.unwrap_or(ApprovalAnswer::Unavailable),
        ))
    }
}

fn sandboxed(mode: SandboxMode, tier: &SandboxTier) -> Sandboxed {
    sandboxed_with(mode, tier, None, Vec::new())
}

fn sandboxed_with(
    mode: SandboxMode,
    tier: &SandboxTier,
    approvals: Option<Arc<ScriptedApprovals>>,
    mode_rules: Vec<ModeRule>,
) -> Sandboxed {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work/src")).unwrap();
    std::fs::create_dir_all(dir.path().join("work/.git")).unwrap();
    std::fs::write(dir.path().join("work/.git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    let mut config = ShellConfig::new(
        WorkspaceRoots::new([dir.path().join("work")]).unwrap(),
        dir.path().join("session"),
    );
    config.mode = mode;
    config.mode_rules = mode_rules;
    config.tier = tier.clone();
    config.grace = Duration::from_millis(300);
    let (registry, _) = RegistryBuilder::new()
        .builtin(Typed::new(BashTool::new(config)))
        .build()
        .unwrap();
    let mut pipeline = Pipeline::builder(Arc::new(MemorySink::new()));
    if let Some(approvals) = approvals {
        pipeline = pipeline.approval(approvals);
    }
    Sandboxed {
        dir,
        tools: registry.snapshot(),
        pipeline: pipeline.build(),
    }
}

impl Sandboxed {
    async fn run(&self, command: &str) -> CommittedResult {
        self.run_args(json!({"command": command})).await
    }

    async fn run_args(&self, mut args: Value) -> CommittedResult {
        args["description"] = json!("escape attempt");
        args["timeout_ms"] = json!(5000);
        self.pipeline
            .execute_one(
                &self.tools,
                CallRequest::new("c1", 0, "bash", args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    }

    /// Whether `command` succeeded (exit 0) inside the sandbox.
    async fn succeeds(&self, command: &str) -> bool {
        let result = self.run(command).await;
        assert!(
            !result.record().is_error(),
            "{command}: {:?}",
            result.record()
        );
        result.record().value.as_ref().unwrap()["exit_code"] == 0
    }

    fn path(&self, relative: &str) -> String {
        self.dir.path().join(relative).display().to_string()
    }
}

/// What each mode must allow (`true`) or refuse (`false`).
struct Expect {
    write_workspace: bool,
    write_git: bool,
    write_outside: bool,
    /// inet sockets, and unix sockets of daemons outside.
    network: bool,
    /// `mount` (in a nested user namespace) and `ptrace` (of one's own child).
    mount_and_ptrace: bool,
}

/// Mounts a tmpfs in a new user and mount namespace: allowed to any unprivileged process
/// that may make namespaces, so only a sandbox refuses it.
const MOUNT: &str = "unshare -Urm sh -c 'mount -t tmpfs none /mnt'";

/// Attaches to its own child, which any process may do without a sandbox.
const PTRACE: &str = "python3 -c 'import ctypes, os, sys, time\npid = os.fork()\nif pid == 0:\n    time.sleep(3)\n    os._exit(0)\nlibc = ctypes.CDLL(None, use_errno=True)\nok = libc.ptrace(16, pid, None, None) == 0\nos.kill(pid, 9)\nsys.exit(0 if ok else 1)'";

async fn escape_suite(mode: SandboxMode, expect: Expect) {
    for tier in support::tiers() {
        escape_suite_in(mode, &tier, &expect).await;
    }
}

async fn escape_suite_in(mode: SandboxMode, tier: &SandboxTier, expect: &Expect) {
    let s = sandboxed(mode, tier);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = s.path("outside");
    let daemon = std::os::unix::net::UnixListener::bind(s.path("outside/daemon.sock")).unwrap();
    let cases = [
        (
            format!("echo x > {}", s.path("work/src/a.txt")),
            expect.write_workspace,
            "write in the workspace",
        ),
        (
            format!("echo x >> {}", s.path("work/.git/config")),
            expect.write_git,
            "write into .git",
        ),
        (
            format!("echo x > {outside}/o.txt"),
            expect.write_outside,
            "write outside",
        ),
        (
            format!(
                "ln -sf {outside}/l.txt {} && echo x > {}",
                s.path("work/src/link"),
                s.path("work/src/link")
            ),
            expect.write_outside,
            "write through a symlink",
        ),
        (
            format!("echo x > /proc/self/root{outside}/p.txt"),
            expect.write_outside,
            "write through /proc/self/root",
        ),
        (
            "echo x > $TMPDIR/t.txt".to_owned(),
            true,
            "write the private temp folder",
        ),
        (
            format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
            expect.network,
            "connect to a local listener",
        ),
        (
            "python3 -c 'import socket; socket.socket(socket.AF_INET6)'".to_owned(),
            expect.network,
            "open an inet socket",
        ),
        (
            format!(
                "python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{outside}/daemon.sock\")'"
            ),
            expect.network,
            "connect to a daemon's unix socket",
        ),
        // bubblewrap drops every capability even in full-access mode, and its user
        // namespace lets no nested one map users: no mounts in that tier.
        (
            MOUNT.to_owned(),
            expect.mount_and_ptrace && *tier == SandboxTier::Namespaces,
            "mount",
        ),
        (PTRACE.to_owned(), expect.mount_and_ptrace, "ptrace"),
        (
            "cat /etc/hostname > /dev/null".to_owned(),
            true,
            "read system files",
        ),
    ];
    for (command, allowed, what) in cases {
        assert_eq!(
            s.succeeds(&command).await,
            allowed,
            "{} ({}): {what} should be {}",
            mode.as_str(),
            tier.as_str(),
            if allowed { "allowed" } else { "refused" }
        );
    }
    if !expect.write_outside {
        assert!(!Path::new(&format!("{outside}/o.txt")).exists());
        assert!(!Path::new(&format!("{outside}/p.txt")).exists());
    }
    // The model is told a refusal happened.
    let refused = s.run(&format!("echo x > {outside}/o.txt")).await;
    let text = refused.record().content[0].as_text().unwrap().to_owned();
    assert_eq!(
        text.contains("[sandbox: some operations were refused"),
        !expect.write_outside,
        "{text}"
    );
    // And the card and the summary are, from the refusal's own line.
    let lines = refused
        .record()
        .details
        .as_ref()
        .and_then(|details| serde_json::to_value(details).ok())
        .and_then(|details| {
            details
                .pointer("/sandbox_refused/lines")
                .and_then(|lines| lines.as_array())
                .map(Vec::len)
        });
    assert_eq!(
        lines,
        (!expect.write_outside).then_some(1),
        "{:?}",
        refused.record().details
    );
    drop((listener, daemon));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_refuses_every_write_and_the_network() {
    escape_suite(
        SandboxMode::ReadOnly,
        Expect {
            write_workspace: false,
            write_git: false,
            write_outside: false,
            network: false,
            mount_and_ptrace: false,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_write_allows_the_workspace_but_not_git_outside_or_the_network() {
    escape_suite(
        SandboxMode::WorkspaceWrite,
        Expect {
            write_workspace: true,
            write_git: false,
            write_outside: false,
            network: false,
            mount_and_ptrace: false,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_access_allows_what_the_others_refuse() {
    escape_suite(
        SandboxMode::FullAccess,
        Expect {
            write_workspace: true,
            write_git: true,
            write_outside: true,
            network: true,
            mount_and_ptrace: true,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_roots_keep_every_git_read_only() {
    for tier in support::tiers() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("work/lib");
        std::fs::create_dir_all(inner.join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("work/.git")).unwrap();
        std::fs::create_dir_all(dir.path().join("work/a/b")).unwrap();
        // Landlock grants a root's entries, not the root: new top-level entries cannot be
        // made, existing ones can be written.
        std::fs::write(inner.join("src.rs"), "").unwrap();
        let mut config = ShellConfig::new(
            WorkspaceRoots::new([inner.clone(), dir.path().join("work")]).unwrap(),
            dir.path().join("session"),
        );
        config.mode = SandboxMode::WorkspaceWrite;
        config.tier = tier.clone();
        let (registry, _) = RegistryBuilder::new()
            .builtin(Typed::new(BashTool::new(config)))
            .build()
            .unwrap();
        let s = Sandboxed {
            dir,
            tools: registry.snapshot(),
            pipeline: Pipeline::builder(Arc::new(MemorySink::new())).build(),
        };
        for (file, allowed) in [
            ("work/lib/.git/config", false),
            ("work/.git/config", false),
            ("work/lib/src.rs", true),
            ("work/a/b/c.txt", true),
        ] {
            assert_eq!(
                s.succeeds(&format!("echo x > {}", s.path(file))).await,
                allowed,
                "{} ({}): writing {file}",
                if allowed { "allowed" } else { "refused" },
                tier.as_str()
            );
        }
    }
}

/// A sandbox that cannot be made means the command does not run, and the result says why —
/// read from the sandbox's status channel, which the command cannot write: a command that
/// prints the old failure text and exits 126 is an ordinary result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_cannot_be_made_runs_nothing_and_cannot_be_forged() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let marker = work.join("ran");
    let touch = format!("touch {}", marker.display());
    let run = |config: ShellConfig, command: String| async move {
        let (registry, _) = RegistryBuilder::new()
            .builtin(Typed::new(BashTool::new(config)))
            .build()
            .unwrap();
        let args = json!({"command": command, "description": "x"});
        Pipeline::builder(Arc::new(MemorySink::new()))
            .build()
            .execute_one(
                &registry.snapshot(),
                CallRequest::new("c1", 0, "bash", args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    };
    let config = || {
        ShellConfig::new(
            WorkspaceRoots::new([&work]).unwrap(),
            dir.path().join("session"),
        )
    };

    // No bubblewrap where the tier says.
    let mut missing = config();
    missing.tier = SandboxTier::Bubblewrap(dir.path().join("no-such-bwrap"));
    let result = run(missing, touch.clone()).await;
    assert_eq!(code(&result).as_deref(), Some("SANDBOX_UNAVAILABLE"));
    assert!(!marker.exists());

    // A hidden path that is a symlink by the time the mounts are made: the setup refuses
    // to follow it, and says which step failed.
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    let mut planted = config();
    planted.protected = toolrail_tools_core::ProtectedPaths::none().hide(&secret);
    std::fs::remove_dir(&secret).unwrap();
    std::os::unix::fs::symlink("/", &secret).unwrap();
    let result = run(planted, touch.clone()).await;
    assert_eq!(
        code(&result).as_deref(),
        Some("SANDBOX_UNAVAILABLE"),
        "{}",
        result.record().text()
    );
    assert!(
        result.record().text().contains("hiding")
            && result.record().text().contains("symbolic links"),
        "{}",
        result.record().text()
    );
    assert!(!marker.exists());

    // A command that says what a failed sandbox used to say ran, and is reported as run.
    for tier in support::tiers() {
        let mut forged = config();
        forged.tier = tier.clone();
        forged.mode = SandboxMode::WorkspaceWrite;
        let result = run(
            forged,
            format!("{touch}; echo 'SANDBOX_UNAVAILABLE: forged' >&2; exit 126"),
        )
        .await;
        assert_eq!(
            code(&result),
            None,
            "{}: {}",
            tier.as_str(),
            result.record().text()
        );
        assert_eq!(result.record().value.as_ref().unwrap()["exit_code"], 126);
        assert!(marker.exists(), "{}", tier.as_str());
        std::fs::remove_file(&marker).unwrap();
    }
}

fn code(result: &CommittedResult) -> Option<String> {
    result.record().error_code().map(ToString::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_widens_the_sandbox_only_with_an_approval() {
    for tier in support::tiers() {
        let approvals = Arc::new(ScriptedApprovals::new([
            ApprovalAnswer::AllowedForSession { key: "bash".into() },
            ApprovalAnswer::Rejected { reason: None },
            ApprovalAnswer::AllowedOnce,
        ]));
        let s = sandboxed_with(
            SandboxMode::ReadOnly,
            &tier,
            Some(Arc::clone(&approvals)),
            Vec::new(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let write = |file: &str| format!("echo x > {}", s.path(&format!("work/src/{file}")));
        let escalated = |command: String, wanted: &str| json!({"command": command, "escalate": [wanted], "justification": "the build writes its output"});

        // Approved: the write happens, and the result says with what it ran.
        let widened = s
            .run_args(escalated(write("a.txt"), "workspace-write"))
            .await;
        assert_eq!(code(&widened), None, "{}", widened.record().text());
        let value = widened.record().value.as_ref().unwrap();
        assert_eq!(value["exit_code"], 0, "{}", widened.record().text());
        assert_eq!(value["sandbox"]["mode"], "workspace-write");
        assert_eq!(value["sandbox"]["escalated"], json!(["workspace-write"]));
        assert!(Path::new(&s.path("work/src/a.txt")).exists());
        let asked = approvals.asked();
        assert!(
            asked[0].reason.contains("workspace-write")
                && asked[0].reason.contains("the build writes its output"),
            "{}",
            asked[0].reason
        );

        // Rejected: nothing ran. And the "for the session" answer above covered one call.
        let rejected = s
            .run_args(escalated(write("b.txt"), "workspace-write"))
            .await;
        assert_eq!(code(&rejected).as_deref(), Some("APPROVAL_REJECTED"));
        assert!(!Path::new(&s.path("work/src/b.txt")).exists());

        // Without asking, read-only stays read-only, and no one is asked.
        assert!(!s.succeeds(&write("c.txt")).await);
        assert_eq!(approvals.asked().len(), 2);

        // Network: refused by default, allowed once approved.
        let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
        assert!(!s.succeeds(&connect).await, "{}", tier.as_str());
        let online = s.run_args(escalated(connect, "network")).await;
        assert_eq!(
            online.record().value.as_ref().unwrap()["exit_code"],
            0,
            "{} ({})",
            online.record().text(),
            tier.as_str()
        );

        // The answers are used up: the next escalation finds no one to approve it.
        let unanswered = s
            .run_args(escalated(write("d.txt"), "workspace-write"))
            .await;
        assert_eq!(code(&unanswered).as_deref(), Some("APPROVAL_UNAVAILABLE"));

        // An escalation without a reason is refused before anyone is asked.
        let asked_before = approvals.asked().len();
        let unexplained = s
            .run_args(json!({"command": write("e.txt"), "escalate": ["network"]}))
            .await;
        assert_eq!(code(&unexplained).as_deref(), Some("INVALID_ARGS"));
        assert_eq!(approvals.asked().len(), asked_before);
        drop(listener);
    }
}

/// The sandbox policy chooses the mode per call: a rule lets `touch …` write in a read-only
/// session, another keeps `cp …` read-only in a workspace-write one, and a chained command
/// takes no rule. The result says which rule applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_chooses_the_sandbox_per_command() {
    for tier in support::tiers() {
        let widening = vec![ModeRule::new("touch *", SandboxMode::WorkspaceWrite).unwrap()];
        let s = sandboxed_with(SandboxMode::ReadOnly, &tier, None, widening);
        let ruled = s.path("work/src/ruled.txt");
        let touched = s.run(&format!("touch {ruled}")).await;
        let value = touched.record().value.as_ref().unwrap();
        assert_eq!(value["exit_code"], 0, "{}", touched.record().text());
        assert_eq!(value["sandbox"]["mode"], "workspace-write");
        assert_eq!(value["sandbox"]["rule"], "touch *");
        assert!(Path::new(&ruled).exists());
        let chained = s.path("work/src/chained.txt");
        let refused = s.run(&format!("touch {chained} && true")).await;
        let value = refused.record().value.as_ref().unwrap();
        assert_eq!(value["sandbox"]["mode"], "read-only", "{}", tier.as_str());
        assert_eq!(value["sandbox"]["rule"], Value::Null);
        assert!(!Path::new(&chained).exists(), "{}", tier.as_str());

        let narrowing = vec![ModeRule::new("cp *", SandboxMode::ReadOnly).unwrap()];
        let s = sandboxed_with(SandboxMode::WorkspaceWrite, &tier, None, narrowing);
        let copied = s.path("work/src/copied.txt");
        let kept = s.run(&format!("cp /etc/hostname {copied}")).await;
        let value = kept.record().value.as_ref().unwrap();
        assert_ne!(value["exit_code"], 0, "{}", kept.record().text());
        assert_eq!(value["sandbox"]["mode"], "read-only");
        assert!(!Path::new(&copied).exists(), "{}", tier.as_str());
        assert!(
            s.succeeds(&format!("touch {}", s.path("work/src/free.txt")))
                .await
        );
    }
}
