//! The sandbox escape suite, in each mode, with real processes: writes outside the
//! workspace, into `.git`, through a symlink and through `/proc/self/root`, an inet socket,
//! a connection to a listener this test starts on 127.0.0.1, `mount` and `ptrace` must be
//! refused where the mode says so — and the same actions allowed where it says so, since a
//! sandbox that refuses everything is broken too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolrail_shell_tool::{BashTool, SandboxMode, ShellConfig};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    BatchControl, CallRequest, CommittedResult, Pipeline, RegistryBuilder, ToolSet, Typed,
    WorkspaceRoots,
};

struct Sandboxed {
    dir: tempfile::TempDir,
    tools: ToolSet,
    pipeline: Pipeline,
}

fn sandboxed(mode: SandboxMode) -> Sandboxed {
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
    config.grace = Duration::from_millis(300);
    config.sandbox_helper = Some(env!("CARGO_BIN_EXE_toolrail-sandbox").into());
    let (registry, _) = RegistryBuilder::new()
        .builtin(Typed::new(BashTool::new(config)))
        .build()
        .unwrap();
    Sandboxed {
        dir,
        tools: registry.snapshot(),
        pipeline: Pipeline::builder(Arc::new(MemorySink::new())).build(),
    }
}

impl Sandboxed {
    async fn run(&self, command: &str) -> CommittedResult {
        let args = json!({"command": command, "description": "escape attempt", "timeout_ms": 5000});
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
        assert!(!result.record.is_error, "{command}: {:?}", result.record);
        result.record.value.as_ref().unwrap()["exit_code"] == 0
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
    network: bool,
}

async fn escape_suite(mode: SandboxMode, expect: Expect) {
    let s = sandboxed(mode);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = s.path("outside");
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
            "cat /etc/hostname > /dev/null".to_owned(),
            true,
            "read system files",
        ),
    ];
    for (command, allowed, what) in cases {
        assert_eq!(
            s.succeeds(&command).await,
            allowed,
            "{}: {what} should be {}",
            mode.as_str(),
            if allowed { "allowed" } else { "refused" }
        );
    }
    if !expect.write_outside {
        assert!(!Path::new(&format!("{outside}/o.txt")).exists());
        assert!(!Path::new(&format!("{outside}/p.txt")).exists());
    }
    // The model is told a refusal happened.
    let refused = s.run(&format!("echo x > {outside}/o.txt")).await;
    let text = refused.record.content[0].as_text().unwrap().to_owned();
    assert_eq!(
        text.contains("[sandbox: some operations were refused"),
        !expect.write_outside,
        "{text}"
    );
    drop(listener);
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
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_and_ptrace_are_refused_in_the_sandbox() {
    let s = sandboxed(SandboxMode::WorkspaceWrite);
    assert!(
        !s.succeeds("unshare --mount --propagation private true")
            .await,
        "mount"
    );
    // Attach to the parent (the wrapper), which a sandboxed process must not trace.
    let ptrace = "python3 -c 'import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); sys.exit(0 if libc.ptrace(16, os.getppid(), None, None) == 0 else 1)'";
    assert!(!s.succeeds(ptrace).await, "ptrace");
}

#[tokio::test]
async fn without_the_helper_sandboxed_modes_do_not_run() {
    let s = sandboxed(SandboxMode::ReadOnly);
    drop(s);
    let dir = tempfile::tempdir().unwrap();
    let mut config = ShellConfig::new(
        WorkspaceRoots::new([dir.path()]).unwrap(),
        dir.path().join("s"),
    );
    config.sandbox_helper = Some(dir.path().join("no-such-helper"));
    let (registry, _) = RegistryBuilder::new()
        .builtin(Typed::new(BashTool::new(config)))
        .build()
        .unwrap();
    let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
    let marker = dir.path().join("ran");
    let args = json!({"command": format!("touch {}", marker.display()), "description": "x"});
    let result = pipeline
        .execute_one(
            &registry.snapshot(),
            CallRequest::new("c1", 0, "bash", args.to_string()),
            &BatchControl::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        result
            .record
            .error_code()
            .map(ToString::to_string)
            .as_deref(),
        Some("SANDBOX_UNAVAILABLE")
    );
    assert!(!marker.exists());
}
