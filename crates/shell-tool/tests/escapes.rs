//! The red team's escape table, as real processes in both sandbox tiers: io_uring to a
//! loopback listener, a top-level `x -> /` symlink, metadata changes (chmod, utimes,
//! setxattr) outside and on `.git`, nested `.git`, descriptors the runtime inherited,
//! abstract unix sockets, the credentials of the user's home, a deny rule's files, the
//! session folder — each refused, with the world checked from outside; and what must keep
//! working (`touch NEW`, `rm OLD` and `target/` at the root in workspace-write). Also: the
//! command has no capabilities, `NoNewPrivs` and seccomp; it cannot see the runtime's
//! processes; its limits hold and are named when hit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolrail_shell_tool::{BashTool, ResourceLimits, SandboxMode, SandboxTier, ShellConfig};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, ProtectedPaths, RegistryBuilder, Typed, WorkspaceRoots,
    pipeline::BatchControl,
};

/// A workspace with a repository (and one nested), a folder outside, a home with
/// credentials, and a session folder.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let world = Self { dir };
        for folder in [
            "work/.git/hooks",
            "work/sub/.git/hooks",
            "work/src",
            "outside",
            "home/.ssh",
            "home/.aws",
            "session/outputs",
        ] {
            std::fs::create_dir_all(world.path(folder)).unwrap();
        }
        for (file, text) in [
            ("work/.git/config", "[core]\n"),
            ("work/sub/.git/config", "[core]\n"),
            ("work/OLD", "old"),
            ("work/.env", "API_KEY=workspace-secret"),
            ("outside/file.txt", "outside"),
            ("home/.ssh/id_ed25519", "PRIVATE KEY"),
            ("home/.aws/credentials", "aws_secret_access_key=AKIA"),
            ("session/s1.jsonl", "{\"conversation\":\"secret\"}"),
        ] {
            std::fs::write(world.path(file), text).unwrap();
        }
        world
    }

    fn path(&self, relative: &str) -> PathBuf {
        std::fs::canonicalize(self.dir.path())
            .unwrap()
            .join(relative)
    }

    fn show(&self, relative: &str) -> String {
        self.path(relative).display().to_string()
    }

    /// The protections a runtime would configure: the home's credentials, the session
    /// folder (its outputs shown read-only), a deny rule's `**/.env`.
    fn protected(&self) -> ProtectedPaths {
        ProtectedPaths::for_home(self.path("home"))
            .hide(self.path("session"))
            .show_read_only(self.path("session/outputs"))
            .hide_matching("**/.env")
            .unwrap()
    }

    fn shell(&self, mode: SandboxMode, tier: &SandboxTier) -> Shell {
        self.shell_with(mode, tier, |_| {})
    }

    fn shell_with(
        &self,
        mode: SandboxMode,
        tier: &SandboxTier,
        configure: impl FnOnce(&mut ShellConfig),
    ) -> Shell {
        let mut config = ShellConfig::new(
            WorkspaceRoots::new([self.path("work")]).unwrap(),
            self.path("session/outputs"),
        );
        config.mode = mode;
        config.tier = tier.clone();
        config.protected = self.protected();
        config.grace = Duration::from_millis(300);
        config.env_extra = vec![("HOME".into(), self.show("home"))];
        configure(&mut config);
        let (registry, _) = RegistryBuilder::new()
            .builtin(Typed::new(BashTool::new(config)))
            .build()
            .unwrap();
        Shell {
            registry,
            pipeline: Pipeline::builder(Arc::new(MemorySink::new())).build(),
            label: format!("{} ({})", mode.as_str(), tier.as_str()),
        }
    }
}

struct Shell {
    registry: toolrail_tools_core::Registry,
    pipeline: Pipeline,
    label: String,
}

impl Shell {
    async fn run(&self, command: &str) -> CommittedResult {
        let args =
            json!({"command": command, "description": "escape attempt", "timeout_ms": 20_000});
        self.pipeline
            .execute_one(
                &self.registry.snapshot(),
                CallRequest::new("c1", 0, "bash", args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    }

    /// Runs `command`, which must run (no error result), and returns its value.
    async fn ran(&self, command: &str) -> Value {
        let result = self.run(command).await;
        assert!(
            !result.record().is_error(),
            "{}: `{command}` did not run: {}",
            self.label,
            result.record().text()
        );
        result.record().value.clone().unwrap()
    }

    async fn succeeds(&self, command: &str) -> bool {
        self.ran(command).await["exit_code"] == 0
    }

    async fn stdout(&self, command: &str) -> String {
        let result = self.run(command).await;
        assert!(!result.record().is_error(), "{}", result.record().text());
        result.record().text()
    }
}

const CONFINED: [SandboxMode; 2] = [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite];

/// The io_uring probe, compiled once per test process.
fn uring_probe(world: &World) -> PathBuf {
    let probe = world.path("outside/uring_connect");
    let status = std::process::Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&probe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/escapes/uring_connect.c"))
        .status()
        .expect("cc must be installed to build the io_uring probe");
    assert!(status.success());
    probe
}

/// Whether anyone connected to `listener` (non-blocking).
fn connected(listener: &std::net::TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    listener.accept().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_uring_cannot_reach_the_network() {
    let world = World::new();
    let probe = uring_probe(&world);
    for tier in support::tiers() {
        // The probe is real: with full access it connects.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = world.shell(SandboxMode::FullAccess, &tier);
        let said = open.stdout(&format!("{} {port}", probe.display())).await;
        assert!(said.contains("connected"), "{}: {said}", open.label);
        assert!(connected(&listener));
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            let said = shell.stdout(&format!("{} {port}", probe.display())).await;
            assert!(
                said.contains("io_uring_setup: Function not implemented"),
                "{}: {said}",
                shell.label
            );
            assert!(!connected(&listener), "{}", shell.label);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_level_symlink_to_root_grants_nothing() {
    let world = World::new();
    std::os::unix::fs::symlink("/", world.path("work/x")).unwrap();
    for tier in support::tiers() {
        let shell = world.shell(SandboxMode::WorkspaceWrite, &tier);
        let through = |relative: &str| format!("{}/x{}", world.show("work"), world.show(relative));
        for target in ["outside/escape.txt", "work/.git/hooks/pre-commit"] {
            assert!(
                !shell
                    .succeeds(&format!("echo pwned > {}", through(target)))
                    .await,
                "{}: wrote {target} through x -> /",
                shell.label
            );
            assert!(!world.path(target).exists(), "{}: {target}", shell.label);
        }
        // The symlink itself still works for reading.
        assert!(
            shell
                .succeeds(&format!("cat {}", through("outside/file.txt")))
                .await
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_outside_and_on_git_does_not_change() {
    let world = World::new();
    let outside = world.path("outside/file.txt");
    let git = world.path("work/.git/config");
    let before: Vec<_> = [&outside, &git]
        .map(|path| std::fs::metadata(path).unwrap())
        .into_iter()
        .map(|meta| (meta.mode(), meta.mtime()))
        .collect();
    for tier in support::tiers() {
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            for path in [&outside, &git] {
                let path = path.display();
                for attempt in [
                    format!("chmod 4755 {path}"),
                    format!("touch -d 2001-01-01 {path}"),
                    format!(
                        "python3 -c 'import os; os.setxattr(\"{path}\", \"user.pwned\", b\"1\")'"
                    ),
                ] {
                    assert!(
                        !shell.succeeds(&attempt).await,
                        "{}: {attempt}",
                        shell.label
                    );
                }
            }
        }
    }
    let after: Vec<_> = [&outside, &git]
        .map(|path| std::fs::metadata(path).unwrap())
        .into_iter()
        .map(|meta| (meta.mode(), meta.mtime()))
        .collect();
    assert_eq!(before, after);
    for path in [&outside, &git] {
        let names = std::process::Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import os; print(os.listxattr({:?}))",
                path.display().to_string()
            ))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&names.stdout).trim(), "[]");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_git_stays_read_only_and_the_root_stays_usable() {
    let world = World::new();
    for tier in support::tiers() {
        let shell = world.shell(SandboxMode::WorkspaceWrite, &tier);
        for target in [
            "work/.git/config",
            "work/.git/hooks/pre-commit",
            "work/sub/.git/config",
            "work/sub/.git/hooks/pre-commit",
        ] {
            assert!(
                !shell
                    .succeeds(&format!("echo x >> {}", world.show(target)))
                    .await,
                "{}: {target}",
                shell.label
            );
        }
        assert_eq!(
            std::fs::read_to_string(world.path("work/sub/.git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!world.path("work/.git/hooks/pre-commit").exists());
        // The root itself is writable: new entries, removals, a build's `target/`.
        let work = world.show("work");
        assert!(
            shell
                .succeeds(&format!(
                    "cd {work} && touch NEW && rm OLD && mkdir -p target/debug && echo built > target/debug/app && mv NEW NEWER"
                ))
                .await,
            "{}",
            shell.label
        );
        assert!(world.path("work/NEWER").exists());
        assert!(!world.path("work/OLD").exists());
        assert!(world.path("work/target/debug/app").exists());
        std::fs::write(world.path("work/OLD"), "old").unwrap();
        std::fs::remove_file(world.path("work/NEWER")).unwrap();
        std::fs::remove_dir_all(world.path("work/target")).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_the_runtime_holds_do_not_reach_the_command() {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    let world = World::new();
    let leaked_file = std::fs::OpenOptions::new()
        .append(true)
        .open(world.path("outside/file.txt"))
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut accepted, _) = listener.accept().unwrap();
    fcntl(&leaked_file, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
    fcntl(&socket, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
    for tier in support::tiers() {
        for mode in [
            SandboxMode::ReadOnly,
            SandboxMode::WorkspaceWrite,
            SandboxMode::FullAccess,
        ] {
            let shell = world.shell(mode, &tier);
            for fd in [leaked_file.as_raw_fd(), socket.as_raw_fd()] {
                assert!(
                    !shell.succeeds(&format!("echo leaked >&{fd}")).await,
                    "{}: fd {fd} reached the command",
                    shell.label
                );
            }
            let open = shell.stdout("ls /proc/self/fd").await;
            let fds: Vec<&str> = open.lines().filter(|line| !line.starts_with('[')).collect();
            assert!(
                fds.iter().all(|fd| ["0", "1", "2", "3"].contains(fd)),
                "{}: open descriptors {fds:?}",
                shell.label
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(world.path("outside/file.txt")).unwrap(),
        "outside"
    );
    accepted.set_nonblocking(true).unwrap();
    let mut got = [0u8; 16];
    assert!(accepted.read(&mut got).is_err(), "the socket carried data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abstract_unix_sockets_outside_are_out_of_reach() {
    let world = World::new();
    let name = format!("toolrail-escape-{}", std::process::id());
    let listener = {
        use std::os::linux::net::SocketAddrExt;
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&address).unwrap()
    };
    let connect = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\")'"
    );
    for tier in support::tiers() {
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            assert!(!shell.succeeds(&connect).await, "{}", shell.label);
        }
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_the_deny_rules_and_the_session_are_hidden_until_unmasked() {
    let world = World::new();
    std::os::unix::fs::symlink(world.path("work/.env"), world.path("work/src/env-link")).unwrap();
    let read_all = format!(
        "cat {home}/.ssh/id_ed25519 {home}/.aws/credentials {work}/.env {work}/src/env-link {session}/s1.jsonl 2>/dev/null; ls -A {home}/.ssh {session}; true",
        home = world.show("home"),
        work = world.show("work"),
        session = world.show("session"),
    );
    for tier in support::tiers() {
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            let seen = shell.stdout(&read_all).await;
            for secret in [
                "PRIVATE KEY",
                "AKIA",
                "workspace-secret",
                "conversation",
                "s1.jsonl",
                "id_ed25519",
            ] {
                assert!(
                    !seen.contains(secret),
                    "{}: saw {secret}: {seen}",
                    shell.label
                );
            }
            // The spill folder inside the hidden session folder is shown, read-only.
            assert!(seen.contains("outputs"), "{}: {seen}", shell.label);
            let spill = world.show("session/outputs/planted");
            assert!(!shell.succeeds(&format!("echo x > {spill}")).await);
        }
        // A deny rule naming one file outside the workspace hides it from commands too.
        std::fs::write(world.path("outside/secret.txt"), "outside-secret").unwrap();
        let shell = world.shell_with(SandboxMode::ReadOnly, &tier, |config| {
            config.protected = world
                .protected()
                .hide_matching(&world.show("outside/secret.txt"))
                .unwrap();
        });
        let seen = shell
            .stdout(&format!("cat {}; true", world.show("outside/secret.txt")))
            .await;
        assert!(!seen.contains("outside-secret"), "{}: {seen}", shell.label);
        // Unmasked by the embedder: the command sees it.
        let shell = world.shell_with(SandboxMode::ReadOnly, &tier, |config| {
            config.protected = world.protected().unhide(world.path("home/.ssh"));
        });
        let seen = shell
            .stdout(&format!("cat {}/.ssh/id_ed25519", world.show("home")))
            .await;
        assert!(seen.contains("PRIVATE KEY"), "{}: {seen}", shell.label);
    }
    assert_eq!(
        std::fs::read_to_string(world.path("home/.ssh/id_ed25519")).unwrap(),
        "PRIVATE KEY"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_has_no_privileges_and_sees_no_runtime_process() {
    let world = World::new();
    for tier in support::tiers() {
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            let status = shell
                .stdout("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status")
                .await;
            for line in [
                "CapEff:\t0000000000000000",
                "CapPrm:\t0000000000000000",
                "CapBnd:\t0000000000000000",
                "NoNewPrivs:\t1",
                "Seccomp:\t2",
            ] {
                assert!(status.contains(line), "{}: {status}", shell.label);
            }
            let runtime = std::process::id();
            assert!(
                shell
                    .succeeds(&format!("test ! -e /proc/{runtime}/environ && test $(ls -d /proc/[0-9]* | wc -l) -lt 10"))
                    .await,
                "{}: the runtime's processes are visible",
                shell.label
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_and_are_named_when_hit() {
    let world = World::new();
    for tier in support::tiers() {
        let shell = world.shell_with(SandboxMode::WorkspaceWrite, &tier, |config| {
            config.limits = ResourceLimits {
                file_bytes: Some(1 << 20),
                processes: Some(64),
                ..ResourceLimits::default()
            };
            config.spill_cap = 256 << 10;
        });
        let big = world.show("work/big");
        let value = shell
            .ran(&format!("head -c 3000000 /dev/zero > {big}"))
            .await;
        assert_eq!(
            value["limits_hit"],
            json!(["file_bytes"]),
            "{}: {value}",
            shell.label
        );
        assert_eq!(std::fs::metadata(&big).unwrap().len(), 1 << 20);
        std::fs::remove_file(&big).unwrap();

        let value = shell.ran("head -c 1000000 /dev/zero | tr '\\0' x").await;
        assert_eq!(
            value["limits_hit"],
            json!(["spill_bytes"]),
            "{}: {value}",
            shell.label
        );
        let spill = value["full_output"]["stdout"].as_str().unwrap();
        assert_eq!(std::fs::metadata(spill).unwrap().len(), 256 << 10);

        if tier == SandboxTier::Namespaces || !is_root() {
            let forks = "python3 -c 'import os, time\nfor n in range(2000):\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\n'";
            let value = shell.ran(forks).await;
            assert_eq!(
                value["limits_hit"],
                json!(["processes"]),
                "{}: {value}",
                shell.label
            );
        }
    }
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The demo's layout: the workspace inside the session folder. The folder is hidden around
/// the workspace (its log reads as empty), the outputs stay readable, the workspace works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_inside_the_hidden_session_folder_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let session = std::fs::canonicalize(dir.path()).unwrap();
    for folder in ["workspace", "outputs"] {
        std::fs::create_dir_all(session.join(folder)).unwrap();
    }
    std::fs::write(session.join("s1.jsonl"), "{\"conversation\":\"secret\"}").unwrap();
    for tier in support::tiers() {
        for mode in CONFINED {
            let mut config = ShellConfig::new(
                WorkspaceRoots::new([session.join("workspace")]).unwrap(),
                session.join("outputs"),
            );
            config.mode = mode;
            config.tier = tier.clone();
            config.protected = ProtectedPaths::none()
                .hide(&session)
                .show_read_only(session.join("outputs"));
            let (registry, _) = RegistryBuilder::new()
                .builtin(Typed::new(BashTool::new(config)))
                .build()
                .unwrap();
            let shell = Shell {
                registry,
                pipeline: Pipeline::builder(Arc::new(MemorySink::new())).build(),
                label: format!("{} ({})", mode.as_str(), tier.as_str()),
            };
            let seen = shell
                .stdout("cat ../s1.jsonl; ls .. ; echo made > $TMPDIR/t && cat $TMPDIR/t")
                .await;
            assert!(!seen.contains("secret"), "{}: {seen}", shell.label);
            assert!(
                seen.contains("outputs") && seen.contains("made"),
                "{}: {seen}",
                shell.label
            );
            let wrote = shell.succeeds("echo x > new.txt").await;
            assert_eq!(
                wrote,
                mode == SandboxMode::WorkspaceWrite,
                "{}",
                shell.label
            );
            let _ = std::fs::remove_file(session.join("workspace/new.txt"));
        }
    }
}

/// Shared memory works (Python's multiprocessing needs POSIX semaphores) and is private:
/// what a command leaves in `/dev/shm` is gone with it, and the host's is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_memory_works_and_stays_private() {
    let world = World::new();
    let marker = format!("toolrail-shm-{}", std::process::id());
    for tier in support::tiers() {
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            let said = shell
                .stdout(&format!(
                    "python3 -c 'import multiprocessing as m; print(sum(m.Pool(2).map(abs, [-1, -2])))' && touch /dev/shm/{marker}"
                ))
                .await;
            assert!(said.starts_with("3\n"), "{}: {said}", shell.label);
            assert!(
                !Path::new("/dev/shm").join(&marker).exists(),
                "{}",
                shell.label
            );
        }
    }
}

/// Offline commands share one empty network namespace made for the runtime (cheaper than
/// one each), never the host's: only a loopback device, and it is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_commands_have_no_network_device_but_a_loopback() {
    let world = World::new();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    for tier in support::tiers() {
        for mode in CONFINED {
            let shell = world.shell(mode, &tier);
            let seen = shell
                .stdout("readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1")
                .await;
            let lines: Vec<&str> = seen.lines().map(str::trim).collect();
            assert_ne!(lines[0], host.to_str().unwrap(), "{}", shell.label);
            assert_eq!(lines[1], "lo", "{}: {seen}", shell.label);
            assert!(lines[2].starts_with('['), "{}: {seen}", shell.label);
        }
    }
}
