//! Background shells with real processes: a dev-server-like program read as it prints
//! (cursor, filter, wait), killed with everything it started (`setsid`, double fork,
//! `nohup`); `python3 -i` on a terminal driven with `shell_write`; a prompt that reads
//! `/dev/tty` answered through it; a foreground command moved to the background; the
//! per-session limit; the lifetime; the read-only sandbox refusing a background write as it
//! refuses a foreground one; the log's `shell/started` and `shell/exited`; nothing left
//! running once the table is dropped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolrail_shell_tool::{BashTool, SandboxMode, ShellConfig, Shells};
use toolrail_tools_core::log::{EventData, MemorySink};
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, Registry, RegistryBuilder, ToolSet, Typed,
    WorkspaceRoots, pipeline::BatchControl,
};

struct Session {
    dir: tempfile::TempDir,
    tools: ToolSet,
    pipeline: Pipeline,
    sink: Arc<MemorySink>,
    shells: Shells,
    registry: Option<Registry>,
    calls: AtomicU64,
}

fn session(configure: impl FnOnce(&mut ShellConfig)) -> Session {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    let mut config = ShellConfig::new(
        WorkspaceRoots::new([dir.path().join("work")]).unwrap(),
        dir.path().join("session"),
    );
    config.mode = SandboxMode::FullAccess;
    config.grace = Duration::from_millis(500);
    config.background.yield_window = Duration::from_millis(300);
    configure(&mut config);
    let shells = Shells::new(config.background.clone());
    let builder = shells.tools().into_iter().fold(
        RegistryBuilder::new().builtin(Typed::new(BashTool::with_shells(config, shells.clone()))),
        |builder, tool| builder.builtin(tool),
    );
    let (registry, _) = builder.build().unwrap();
    let sink = Arc::new(MemorySink::new());
    Session {
        dir,
        tools: registry.snapshot(),
        pipeline: Pipeline::builder(Arc::clone(&sink) as _).build(),
        sink,
        shells,
        registry: Some(registry),
        calls: AtomicU64::new(0),
    }
}

impl Session {
    async fn call(&self, tool: &str, mut args: Value) -> CommittedResult {
        if tool == "bash" && args.get("description").is_none() {
            args["description"] = json!("test");
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        self.pipeline
            .execute_one(
                &self.tools,
                CallRequest::new(format!("c{n}"), 0, tool, args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    }

    /// Starts `command` in the background and returns its id.
    async fn start(&self, args: Value) -> (String, CommittedResult) {
        let mut args = args;
        args["background"] = json!(true);
        let started = self.call("bash", args).await;
        assert!(!started.record().is_error(), "{}", started.record().text());
        let id = value(&started)["id"].as_str().unwrap().to_owned();
        (id, started)
    }

    fn kinds(&self) -> Vec<String> {
        self.sink.kinds()
    }
}

/// Reads shell `id` until it ended (bounded), returning everything read and the last
/// result.
async fn until_ended(s: &Session, id: &str) -> (String, CommittedResult) {
    let mut all = String::new();
    for _ in 0..20 {
        let output = s
            .call("shell_output", json!({"id": id, "wait_ms": 3000}))
            .await;
        all.push_str(&text(&output));
        if value(&output)["state"] != "running" {
            return (all, output);
        }
    }
    panic!("shell {id} did not end: {all}");
}

fn text(result: &CommittedResult) -> String {
    result.record().text()
}

fn value(result: &CommittedResult) -> &Value {
    result.record().value.as_ref().unwrap()
}

fn code(result: &CommittedResult) -> Option<String> {
    result
        .record()
        .error_code()
        .map(|code| code.as_str().to_owned())
}

/// Live (not zombie) processes whose command line contains `marker`.
fn alive(marker: &str) -> Vec<String> {
    toolrail_test_support::processes::live_with(&[marker.to_owned()])
}

/// Waits (bounded) until no live process carries `marker`.
async fn gone(marker: &str) -> Vec<String> {
    for _ in 0..200 {
        if alive(marker).is_empty() {
            return Vec::new();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    alive(marker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_server_is_read_as_it_prints_then_killed_with_everything_it_started() {
    let s = session(|_| {});
    // A server that prints a line every 100 ms, says where it listens on the third, and
    // leaves behind a setsid'd sleeper, a double-forked one and a nohup'd one.
    let server = "setsid sleep 41.1 & (sleep 41.2 &) ; nohup sleep 41.3 >/dev/null 2>&1 & \
                  i=0; while true; do i=$((i+1)); echo \"request $i\"; \
                  [ $i = 3 ] && echo 'listening on 127.0.0.1:8080'; sleep 0.1; done";
    let (id, started) = s.start(json!({"command": server})).await;
    assert_eq!(id, "sh1");
    assert!(
        text(&started).contains("started in the background as sh1"),
        "{}",
        text(&started)
    );
    assert_eq!(value(&started)["state"], "running");
    // Each sleeper is exec'd by a wrapper (`setsid`, `nohup`): look a while for all three.
    let sleepers = || {
        alive("41.")
            .into_iter()
            .filter(|line| {
                line.split(": ")
                    .nth(1)
                    .is_some_and(|cmd| cmd.starts_with("sleep"))
            })
            .count()
    };
    for _ in 0..200 {
        if sleepers() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(sleepers(), 3, "the three sleepers run");

    let ready = s
        .call(
            "shell_output",
            json!({"id": id, "filter": "listening", "wait_ms": 5000}),
        )
        .await;
    assert_eq!(
        text(&ready).lines().next(),
        Some("listening on 127.0.0.1:8080"),
        "{}",
        text(&ready)
    );
    assert_eq!(value(&ready)["matched_lines"], 1);
    let first = value(&ready)["cursor"].as_u64().unwrap();
    assert!(first > 0);

    let later = s
        .call(
            "shell_output",
            json!({"id": id, "since": first, "wait_ms": 2000}),
        )
        .await;
    let second = value(&later)["cursor"].as_u64().unwrap();
    assert!(second > first, "the cursor advances");
    assert!(text(&later).starts_with("request "), "{}", text(&later));
    assert!(
        !text(&later).contains("listening"),
        "only what came after the cursor"
    );

    let killed = s.call("shell_kill", json!({"id": id})).await;
    assert!(!killed.record().is_error(), "{}", text(&killed));
    assert_eq!(value(&killed)["state"], "killed");
    assert_eq!(
        gone("41.").await,
        Vec::<String>::new(),
        "nothing it started survives"
    );

    let written = s.call("shell_write", json!({"id": id, "input": "x"})).await;
    assert_eq!(code(&written).as_deref(), Some("SHELL_ENDED"));
    assert!(text(&written).contains("killed"), "{}", text(&written));

    let kinds = s.kinds();
    assert_eq!(
        kinds.iter().filter(|kind| *kind == "shell/started").count(),
        1
    );
    assert_eq!(
        kinds.iter().filter(|kind| *kind == "shell/exited").count(),
        1
    );
    let started = s
        .sink
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::ShellStarted(started) => Some(started),
            _ => None,
        })
        .unwrap();
    assert_eq!(started.id, "sh1");
    assert!(
        started
            .pid_namespace
            .as_deref()
            .is_some_and(|ns| ns.starts_with("pid:["))
    );
    assert!(std::path::Path::new(&started.output).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_runs_on_a_terminal_driven_by_writes() {
    let s = session(|_| {});
    let (id, _) = s
        .start(json!({"command": "python3 -i -q", "tty": true}))
        .await;
    let answer = s
        .call(
            "shell_write",
            json!({"id": id, "input": "6 * 7", "keys": ["enter"], "wait_ms": 2000}),
        )
        .await;
    assert!(!answer.record().is_error(), "{}", text(&answer));
    assert!(
        !text(&answer).contains('\u{1b}'),
        "escapes are cleaned for the model"
    );
    // Read again from before the write, so the value is found however the reads were cut.
    let since = value(&answer)["since"].as_u64().unwrap();
    let found = s
        .call(
            "shell_output",
            json!({"id": id, "since": since, "filter": "^42$", "wait_ms": 10000}),
        )
        .await;
    assert_eq!(value(&found)["matched_lines"], 1, "{}", text(&found));

    let ended = s
        .call(
            "shell_write",
            json!({"id": id, "keys": ["ctrl-d"], "wait_ms": 500}),
        )
        .await;
    assert!(!ended.record().is_error(), "{}", text(&ended));
    let (_, output) = until_ended(&s, &id).await;
    assert_eq!(value(&output)["state"], "exited", "{}", text(&output));
    assert_eq!(value(&output)["exit_code"], 0);

    let refused = s
        .call("shell_write", json!({"id": id, "input": "1\n"}))
        .await;
    assert_eq!(code(&refused).as_deref(), Some("SHELL_ENDED"));
    assert!(text(&refused).contains("exit code 0"), "{}", text(&refused));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_reads_the_terminal_is_answered_through_writes_in_every_tier() {
    for tier in support::tiers() {
        let s = session(|config| {
            config.mode = SandboxMode::ReadOnly;
            config.tier = tier.clone();
        });
        // What `npm create` does: ask on the terminal, read the answer from it.
        let prompt =
            "printf 'Project name? ' > /dev/tty; read -r name < /dev/tty; echo \"created $name\"";
        let (id, started) = s.start(json!({"command": prompt, "tty": true})).await;
        let asked = s
            .call(
                "shell_output",
                json!({"id": id, "since": 0, "wait_ms": 10000}),
            )
            .await;
        let question = format!("{}{}", text(&started), text(&asked));
        assert!(question.contains("Project name?"), "{tier:?}: {question}");
        let answered = s
            .call(
                "shell_write",
                json!({"id": id, "input": "demo-app", "keys": ["enter"], "wait_ms": 2000}),
            )
            .await;
        let (rest, output) = until_ended(&s, &id).await;
        let all = format!("{}{rest}", text(&answered));
        assert!(all.contains("created demo-app"), "{tier:?}: {all}");
        assert_eq!(value(&output)["exit_code"], 0, "{tier:?}: {all}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_shell_takes_lines_and_refuses_control_keys() {
    let s = session(|_| {});
    let (id, _) = s.start(json!({"command": "cat"})).await;
    let echoed = s
        .call(
            "shell_write",
            json!({"id": id, "input": "hello\n", "wait_ms": 5000}),
        )
        .await;
    assert!(text(&echoed).starts_with("hello\n"), "{}", text(&echoed));
    let refused = s
        .call("shell_write", json!({"id": id, "keys": ["ctrl-c"]}))
        .await;
    assert_eq!(code(&refused).as_deref(), Some("SHELL_INPUT_CLOSED"));
    assert!(text(&refused).contains("no terminal"), "{}", text(&refused));
    let closed = s
        .call(
            "shell_write",
            json!({"id": id, "close": true, "wait_ms": 500}),
        )
        .await;
    assert!(!closed.record().is_error(), "{}", text(&closed));
    let (_, output) = until_ended(&s, &id).await;
    assert_eq!(value(&output)["state"], "exited");
    assert_eq!(value(&output)["exit_code"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_command_past_its_budget_moves_to_the_background() {
    let s = session(|config| {
        config.background.auto_background_after = Some(Duration::from_millis(400));
    });
    let moved = s
        .call(
            "bash",
            json!({"command": "echo begin; sleep 1.5; echo end"}),
        )
        .await;
    assert!(!moved.record().is_error(), "{}", text(&moved));
    assert_eq!(value(&moved)["moved_to_background"], true);
    assert!(
        text(&moved).contains("moved to the background as sh1"),
        "{}",
        text(&moved)
    );
    assert!(text(&moved).starts_with("begin\n"), "{}", text(&moved));
    let rest = s
        .call(
            "shell_output",
            json!({"id": "sh1", "filter": "^end$", "wait_ms": 5000}),
        )
        .await;
    assert_eq!(text(&rest).lines().next(), Some("end"), "{}", text(&rest));
    // A short command finishes in the foreground as ever.
    let quick = s.call("bash", json!({"command": "echo quick"})).await;
    assert_eq!(text(&quick), "quick\n[exit code 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seventeenth_shell_is_refused_by_the_limit_of_sixteen() {
    let s = session(|config| {
        config.background.yield_window = Duration::from_millis(10);
    });
    for n in 1..=16 {
        let (id, _) = s.start(json!({"command": "exec sleep 42.7"})).await;
        assert_eq!(id, format!("sh{n}"));
    }
    let refused = s
        .call("bash", json!({"command": "sleep 42.7", "background": true}))
        .await;
    assert_eq!(
        code(&refused).as_deref(),
        Some("SHELL_LIMIT"),
        "{}",
        text(&refused)
    );
    assert!(
        text(&refused).contains("16 background shells are running"),
        "{}",
        text(&refused)
    );
    // A shell's `bash` becomes `sleep` when it execs: look a while for all sixteen.
    let sleeping = || {
        alive("42.7")
            .into_iter()
            .filter(|line| {
                line.split(": ")
                    .nth(1)
                    .is_some_and(|cmd| cmd.starts_with("sleep"))
            })
            .count()
    };
    for _ in 0..200 {
        if sleeping() >= 16 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(sleeping(), 16, "the refused one never started");
    let killed = s
        .call("shell_kill", json!({"id": "sh3", "signal": "KILL"}))
        .await;
    assert_eq!(value(&killed)["state"], "killed");
    let (id, _) = s.start(json!({"command": "exec sleep 42.7"})).await;
    assert_eq!(
        id, "sh17",
        "room again once one ended; ids are never reused"
    );
    let listed = s.call("shell_list", json!({})).await;
    assert_eq!(value(&listed)["shells"].as_array().unwrap().len(), 17);
    // Dropping the session's tools and table ends every shell.
    let Session {
        tools,
        registry,
        shells,
        pipeline,
        ..
    } = s;
    drop((tools, registry, shells, pipeline));
    assert_eq!(gone("42.7").await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_past_its_lifetime_is_stopped_and_says_so() {
    let s = session(|config| config.background.lifetime = Duration::from_millis(500));
    let (id, _) = s.start(json!({"command": "exec sleep 43.1"})).await;
    let output = s
        .call("shell_output", json!({"id": id, "wait_ms": 5000}))
        .await;
    assert_eq!(
        value(&output)["state"],
        "lifetime_ended",
        "{}",
        text(&output)
    );
    assert_eq!(gone("43.1").await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_background_shell_is_refused_a_write_as_a_foreground_call_is() {
    for tier in support::tiers() {
        let s = session(|config| {
            config.mode = SandboxMode::ReadOnly;
            config.tier = tier.clone();
        });
        let foreground = s.call("bash", json!({"command": "touch made-fg"})).await;
        let (id, started) = s
            .start(json!({"command": "touch made-bg; echo status=$?"}))
            .await;
        let (read, background) = until_ended(&s, &id).await;
        let all = format!("{}{}{read}", text(&foreground), text(&started));
        assert!(!s.dir.path().join("work/made-fg").exists(), "{tier:?}");
        assert!(
            !s.dir.path().join("work/made-bg").exists(),
            "{tier:?}: {all}"
        );
        assert!(
            text(&foreground).contains("Read-only file system"),
            "{tier:?}: {all}"
        );
        assert!(
            all.contains("made-bg': Read-only file system"),
            "{tier:?}: {all}"
        );
        assert!(all.contains("status=1"), "{tier:?}: {all}");
        assert_eq!(value(&background)["exit_code"], 0, "{tier:?}: {all}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_shells_and_bad_filters_are_clear_errors() {
    let s = session(|_| {});
    let missing = s.call("shell_output", json!({"id": "sh9"})).await;
    assert_eq!(code(&missing).as_deref(), Some("SHELL_NOT_FOUND"));
    assert!(
        text(&missing).contains("has started no background shell"),
        "{}",
        text(&missing)
    );
    let bad = s
        .call("shell_output", json!({"id": "sh1", "filter": "("}))
        .await;
    assert_eq!(
        code(&bad).as_deref(),
        Some("INVALID_ARGS"),
        "{}",
        text(&bad)
    );
    let nothing = s.call("shell_write", json!({"id": "sh1"})).await;
    assert_eq!(code(&nothing).as_deref(), Some("INVALID_ARGS"));
    let started = Instant::now();
    let (id, _) = s.start(json!({"command": "echo hi"})).await;
    let (_, output) = until_ended(&s, &id).await;
    assert_eq!(value(&output)["state"], "exited");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a wait ends with the shell"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_command_on_a_terminal_sees_one_and_keeps_its_deadline() {
    let s = session(|config| config.mode = SandboxMode::ReadOnly);
    let on_tty = s
        .call("bash", json!({"command": "test -t 0 && test -t 1 && tty >/dev/null && echo on a terminal", "tty": true}))
        .await;
    assert_eq!(
        text(&on_tty),
        "on a terminal\n[exit code 0]",
        "{:?}",
        value(&on_tty)
    );
    let without = s
        .call("bash", json!({"command": "test -t 0 || echo no terminal"}))
        .await;
    assert_eq!(text(&without), "no terminal\n[exit code 0]");
    let slow = s
        .call(
            "bash",
            json!({"command": "echo waiting; exec sleep 45.3", "tty": true, "timeout_ms": 400}),
        )
        .await;
    assert_eq!(value(&slow)["timed_out"], true, "{}", text(&slow));
    assert!(
        text(&slow).starts_with("waiting\n[timed out after 400 ms"),
        "{}",
        text(&slow)
    );
    assert_eq!(gone("45.3").await, Vec::<String>::new());
    assert!(
        s.shells.list().is_empty(),
        "a foreground command is no background shell"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_terminal_shell_never_signals_the_runtime_s_own_group() {
    // A terminal with no foreground group answers 0, which `killpg` reads as the caller's
    // own group: this test process would get the SIGTERM.
    let s = session(|_| {});
    let at_once = session(|config| config.background.lifetime = Duration::ZERO);
    for _ in 0..10 {
        let stopped = s
            .call(
                "bash",
                json!({"command": "exec sleep 46.1", "tty": true, "timeout_ms": 1}),
            )
            .await;
        assert_eq!(value(&stopped)["timed_out"], true, "{}", text(&stopped));
        let (id, _) = at_once
            .start(json!({"command": "exec sleep 46.2", "tty": true}))
            .await;
        let (_, ended) = until_ended(&at_once, &id).await;
        assert_eq!(value(&ended)["state"], "lifetime_ended");
    }
    // A command that lets go of its terminal leaves it with no foreground group at all.
    let detached = "exec python3 -c 'import fcntl, signal, termios, time; signal.signal(signal.SIGHUP, signal.SIG_IGN); fcntl.ioctl(0, termios.TIOCNOTTY); print(\"detached\", flush=True); time.sleep(46.3)'";
    let (id, _) = s.start(json!({"command": detached, "tty": true})).await;
    let found = s
        .call(
            "shell_output",
            json!({"id": id, "since": 0, "filter": "detached", "wait_ms": 10000}),
        )
        .await;
    assert_eq!(value(&found)["matched_lines"], 1, "{}", text(&found));
    let killed = s.call("shell_kill", json!({"id": id})).await;
    assert_eq!(value(&killed)["state"], "killed", "{}", text(&killed));
    assert_eq!(gone("46.").await, Vec::<String>::new());
}
