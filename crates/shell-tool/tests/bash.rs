//! The bash tool with real processes: exit codes, the stderr section, capped and spilled
//! output, binary output, stdin closed, a scrubbed environment, timeouts (also ignoring
//! SIGTERM), cancel, and no process left alive — `setsid` and double-forked ones included,
//! checked through `/proc`, in each sandbox tier.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolrail_shell_tool::{BashTool, SandboxMode, ShellConfig};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    CallRequest, CancellationToken, CommittedResult, Pipeline, RegistryBuilder, ToolSet, Typed,
    WorkspaceRoots, pipeline::BatchControl,
};

struct Shell {
    dir: tempfile::TempDir,
    tools: ToolSet,
    pipeline: Pipeline,
}

fn shell(configure: impl FnOnce(&mut ShellConfig)) -> Shell {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work/sub")).unwrap();
    let mut config = ShellConfig::new(
        WorkspaceRoots::new([dir.path().join("work")]).unwrap(),
        dir.path().join("session"),
    );
    config.mode = SandboxMode::FullAccess;
    config.grace = Duration::from_millis(500);
    configure(&mut config);
    let (registry, _) = RegistryBuilder::new()
        .builtin(Typed::new(BashTool::new(config)))
        .build()
        .unwrap();
    Shell {
        dir,
        tools: registry.snapshot(),
        pipeline: Pipeline::builder(Arc::new(MemorySink::new())).build(),
    }
}

impl Shell {
    async fn run(&self, args: Value) -> CommittedResult {
        self.run_with(args, &BatchControl::default()).await
    }

    async fn run_with(&self, mut args: Value, control: &BatchControl) -> CommittedResult {
        if args.get("description").is_none() {
            args["description"] = json!("test");
        }
        self.pipeline
            .execute_one(
                &self.tools,
                CallRequest::new("c1", 0, "bash", args.to_string()),
                control,
            )
            .await
            .unwrap()
    }
}

fn text(result: &CommittedResult) -> String {
    result.record().text()
}

fn value(result: &CommittedResult) -> &Value {
    result.record().value.as_ref().unwrap()
}

/// Live (not zombie) processes whose command line contains `marker`.
fn alive(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if cmdline.contains(marker) && !zombie {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

#[tokio::test]
async fn exit_codes_and_stderr_are_facts_in_a_successful_result() {
    let s = shell(|_| {});
    let ok = s.run(json!({"command": "echo out; echo err >&2"})).await;
    assert!(!ok.record().is_error());
    assert_eq!(text(&ok), "out\n[stderr]\nerr\n[exit code 0]");
    let failed = s.run(json!({"command": "echo nope; exit 3"})).await;
    assert!(
        !failed.record().is_error(),
        "a non-zero exit is a fact, not an error"
    );
    assert_eq!(text(&failed), "nope\n[exit code 3]");
    assert_eq!(value(&failed)["exit_code"], 3);
    assert_eq!(
        serde_json::to_value(failed.record().details.as_ref().unwrap()).unwrap()["type"],
        "terminal"
    );
}

#[tokio::test]
async fn stdin_is_closed_the_environment_scrubbed_and_the_workdir_confined() {
    let s = shell(|config| {
        config
            .env_extra
            .push(("TOOLRAIL_GIVEN".into(), "yes".into()))
    });
    // SAFETY of the test: only this test's process sees the variable.
    let stdin = s.run(json!({"command": "cat; echo read=$?"})).await;
    assert_eq!(
        text(&stdin),
        "read=0\n[exit code 0]",
        "stdin is at end at once"
    );
    let env = s
        .run(json!({"command": "env | cut -d= -f1 | sort | tr '\\n' ' '"}))
        .await;
    let names = text(&env);
    assert!(
        names.contains("TOOLRAIL_GIVEN") && names.contains("PATH"),
        "{names}"
    );
    for leaked in ["CARGO", "RUST_", "SSH_", "NEXTEST"] {
        assert!(!names.contains(leaked), "{leaked} leaked: {names}");
    }
    let pwd = s.run(json!({"command": "pwd", "workdir": "sub"})).await;
    assert!(text(&pwd).starts_with(&format!(
        "{}\n",
        std::fs::canonicalize(s.dir.path().join("work/sub")).unwrap().display()
    )));
    let outside = s
        .run(json!({"command": "pwd", "workdir": "../session"}))
        .await;
    assert_eq!(
        outside
            .record()
            .error_code()
            .map(ToString::to_string)
            .as_deref(),
        Some("FS_OUTSIDE_WORKSPACE")
    );
}

#[tokio::test]
async fn huge_output_is_capped_head_and_tail_and_spilled_whole() {
    let s = shell(|config| config.output_cap = 1024);
    let result = s
        .run(
            json!({"command": "echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END"}),
        )
        .await;
    let shown = text(&result);
    assert!(shown.starts_with("START\nxxx"), "{}", &shown[..40]);
    assert!(shown.contains("bytes left out …]"), "{shown}");
    assert!(
        shown.contains("END\n[exit code 0]"),
        "{}",
        &shown[shown.len() - 80..]
    );
    assert_eq!(value(&result)["truncated"], true);
    let spilled = value(&result)["full_output"]["stdout"].as_str().unwrap();
    assert!(shown.contains(spilled));
    assert_eq!(
        std::fs::metadata(spilled).unwrap().len(),
        6 + 200_000 + 1 + 4
    );
    // A stream that fits is not spilled: stderr here, and a small output.
    assert_eq!(value(&result)["full_output"]["stderr"], Value::Null);
    assert!(!s.dir.path().join("session/c1.stderr").exists());
    std::fs::remove_file(spilled).unwrap();
    let small = s.run(json!({"command": "echo small"})).await;
    assert_eq!(value(&small)["full_output"], Value::Null);
    assert!(!Path::new(spilled).exists());
}

#[tokio::test]
async fn binary_output_is_shown_lossily() {
    let s = shell(|_| {});
    let result = s
        .run(json!({"command": "printf 'a\\377\\376\\000b'"}))
        .await;
    assert!(!result.record().is_error());
    assert_eq!(value(&result)["stdout_bytes"], 5);
    assert!(
        text(&result).starts_with("a\u{fffd}\u{fffd}\u{0}b"),
        "{:?}",
        text(&result)
    );
}

#[tokio::test]
async fn a_timeout_stops_even_a_command_that_ignores_sigterm() {
    for tier in support::tiers() {
        let s = shell(|config| config.tier = tier.clone());
        let started = Instant::now();
        let result = s
            .run(json!({"command": "trap '' TERM; sleep 31.5; echo never", "timeout_ms": 300}))
            .await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(!text(&result).contains("never"));
        assert!(
            text(&result).contains("[timed out after 300 ms"),
            "{}",
            text(&result)
        );
        assert_eq!(value(&result)["timed_out"], true);
        assert!(alive("sleep 31.5").is_empty(), "{:?}", alive("sleep 31.5"));
    }
}

#[tokio::test]
async fn a_command_that_handles_sigterm_gets_its_grace() {
    for tier in support::tiers() {
        let s = shell(|config| config.tier = tier.clone());
        let result = s
            .run(json!({"command": "trap 'echo cleaning up; exit 7' TERM; sleep 32.5 & wait", "timeout_ms": 300}))
            .await;
        let shown = text(&result);
        assert!(shown.contains("cleaning up"), "{shown}");
        assert!(shown.ends_with("[exit code 7]"), "{shown}");
        assert!(alive("sleep 32.5").is_empty());
    }
}

#[tokio::test]
async fn cancel_mid_run_stops_the_command() {
    for tier in support::tiers() {
        let s = shell(|config| config.tier = tier.clone());
        let control = BatchControl::default();
        let cancel: CancellationToken = control.cancel.clone();
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let result = s.run_with(json!({"command": "sleep 33.5"}), &control).await;
        canceller.await.unwrap();
        assert!(result.record().is_error(), "{:?}", result.record());
        assert!(alive("sleep 33.5").is_empty());
    }
}

#[tokio::test]
async fn setsid_and_double_forked_children_do_not_outlive_the_call() {
    for tier in support::tiers() {
        let s = shell(|config| config.tier = tier.clone());
        let result = s
            .run(json!({"command": "setsid sleep 34.5 & (sleep 35.5 &) ; nohup sleep 36.5 >/dev/null 2>&1 & echo started"}))
            .await;
        assert_eq!(text(&result), "started\n[exit code 0]");
        for marker in ["sleep 34.5", "sleep 35.5", "sleep 36.5"] {
            assert!(alive(marker).is_empty(), "{marker}: {:?}", alive(marker));
        }
    }
}

#[test]
fn only_commands_declared_read_only_may_share_the_batch() {
    use toolrail_tools_core::{Concurrency, TypedTool};
    let dir = tempfile::tempdir().unwrap();
    let mut config = ShellConfig::new(WorkspaceRoots::new([dir.path()]).unwrap(), dir.path());
    config.read_only_commands = vec!["git status*".into(), "ls*".into()];
    let tool = BashTool::new(config);
    let of = |command: &str| {
        tool.concurrency(&toolrail_shell_tool::BashArgs {
            background: false,
            tty: false,
            command: command.to_owned(),
            description: String::new(),
            timeout_ms: None,
            workdir: None,
            escalate: Vec::new(),
            justification: None,
        })
    };
    assert_eq!(of("git status --short"), Concurrency::shared());
    assert_eq!(of("ls -la"), Concurrency::shared());
    assert_eq!(of("git status; rm -rf x"), Concurrency::Exclusive);
    assert_eq!(of("ls > out.txt"), Concurrency::Exclusive);
    assert_eq!(of("make"), Concurrency::Exclusive);
}

#[tokio::test]
async fn sigterm_stops_the_script_itself_not_only_its_current_command() {
    // bash must not be its namespace's PID 1, which the kernel shields from signals it
    // has no handler for: the script would go on to its next command during the grace.
    for tier in support::tiers() {
        let s = shell(|config| {
            config.tier = tier.clone();
            config.grace = Duration::from_secs(3);
        });
        let marker = s.dir.path().join("work/went-on");
        let result = s
            .run(json!({"command": format!("sleep 37.5; touch {}", marker.display()), "timeout_ms": 300}))
            .await;
        assert_eq!(value(&result)["timed_out"], true);
        assert!(
            !marker.exists(),
            "{}: the script went on after SIGTERM: {}",
            tier.as_str(),
            text(&result)
        );
        assert!(alive("sleep 37.5").is_empty());
    }
}
