//! `run_code` with the Python runtime, end to end: a real `python3 -I` in the shell tool's
//! sandbox, speaking JSON lines. Binding calls re-enter the pipeline with the same ids,
//! logs and scheduling as from JavaScript; limits end programs with their kind; the program
//! cannot write outside its temp folder, open a socket, or leave a process behind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolrail_code_mode::{CodeMode, Limits, PythonRuntime};
use toolrail_tools_core::pipeline::BatchControl;

mod support;

use support::code;

/// A session running Python, and the folders it runs in.
struct Harness {
    session: support::Harness,
    workspace: tempfile::TempDir,
    _scratch: tempfile::TempDir,
}

impl std::ops::Deref for Harness {
    type Target = support::Harness;

    fn deref(&self) -> &support::Harness {
        &self.session
    }
}

fn harness(limits: Limits) -> Harness {
    let workspace = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let python = PythonRuntime::new(
        vec![workspace.path().canonicalize().unwrap()],
        scratch.path(),
    );
    Harness {
        session: support::session(&CodeMode::new(limits).with_python(python), None, "python"),
        workspace,
        _scratch: scratch,
    }
}

fn limits() -> Limits {
    Limits {
        wall: Duration::from_secs(20),
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_program_combines_binding_values_and_its_last_expression_comes_back() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
a = await probe(value={"n": 2})
b = await probe(value={"n": 3})
print("sum is", a["n"] + b["n"])
{"sum": a["n"] + b["n"]}
"#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(result.record().value, Some(json!({"sum": 5})));
    assert_eq!(result.record().text(), "sum is 5\n[returned] {\"sum\":5}");
    let details = serde_json::to_value(result.record().details.as_ref().unwrap()).unwrap();
    assert_eq!(details["language"], "python");
    assert_eq!(details["sub_calls"][1]["call_id"], "c1:code:2");
    let trail = h.trail();
    for id in ["c1:code:1", "c1:code:2"] {
        let kinds: Vec<&str> = trail
            .iter()
            .filter(|(_, call)| call == id)
            .map(|(kind, _)| kind.as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "tool/code-dispatch-start",
                "tool/call",
                "tool/start",
                "tool/result",
                "tool/code-dispatch"
            ],
            "{id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathered_bindings_overlap_and_an_exclusive_one_runs_alone() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
import asyncio
await asyncio.gather(probe(sleep_ms=150), probe(sleep_ms=150), probe(sleep_ms=150))
await asyncio.gather(probe(sleep_ms=50, concurrency="exclusive"), probe(sleep_ms=50))
"done"
"#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    let trail: Vec<(String, String)> = h
        .trail()
        .into_iter()
        .filter(|(kind, id)| {
            (kind == "tool/start" || kind == "tool/result") && id.starts_with("c1:code:")
        })
        .collect();
    let position = |kind: &str, id: &str| {
        trail
            .iter()
            .position(|(k, i)| k == kind && i == id)
            .unwrap()
    };
    let ids = ["c1:code:1", "c1:code:2", "c1:code:3"];
    let last_start = ids.map(|id| position("tool/start", id)).into_iter().max();
    let first_result = ids.map(|id| position("tool/result", id)).into_iter().min();
    assert!(last_start < first_result, "{trail:?}");
    assert!(
        position("tool/result", "c1:code:4") < position("tool/start", "c1:code:5"),
        "{trail:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_binding_raises_a_catchable_tool_error_and_an_oversized_reply_fails_alone() {
    let h = harness(Limits {
        binding_bytes: 1_000,
        ..limits()
    });
    let result = h
        .run(
            r#"
seen = []
try:
    await probe(fail="boom")
except ToolError as error:
    seen.append(f"{error.code}: {error.message}")
try:
    await probe(output_bytes=5000)
except ToolError as error:
    seen.append(error.code)
try:
    await teleport()
except NameError as error:
    seen.append("NameError")
seen.append(await probe(value="still here"))
seen
"#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(
        result.record().value,
        Some(json!([
            "TOOL_FAILED: boom",
            "CODE_BINDING_TOO_LARGE",
            "NameError",
            "still here"
        ]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_end_python_programs_with_their_kind() {
    let short = harness(Limits {
        wall: Duration::from_millis(1_500),
        ..Limits::default()
    });
    short
        .run_fails_with("while True:\n    pass", "CODE_RUN_FAILED (timeout)")
        .await;
    // The other programs end on their own; a wall far off keeps a loaded machine (the
    // tests run in parallel) from reaching it first.
    let h = harness(Limits {
        wall: Duration::from_secs(30),
        ..Limits::default()
    });
    for (program, kind) in [
        (
            "hog = []\nwhile True:\n    hog.append(bytearray(50_000_000))",
            "CODE_RUN_FAILED (memory)",
        ),
        ("def f(:\n    pass", "CODE_RUN_FAILED (syntax)"),
        ("raise ValueError('nope')", "CODE_RUN_FAILED (exception)"),
        (
            "def f(n):\n    return f(n + 1)\nf(0)",
            "CODE_RUN_FAILED (memory)",
        ),
    ] {
        h.run_fails_with(program, kind).await;
    }
    let result = h.run("raise ValueError('nope')").await;
    assert!(
        result.record().text().contains("ValueError: nope")
            && result.record().text().contains("<program>"),
        "the traceback names the program's line: {}",
        result.record().text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_program_waiting_past_its_wall_time_ends_and_its_binding_still_commits() {
    let h = harness(Limits {
        wall: Duration::from_millis(1_500),
        ..Limits::default()
    });
    let result = h.run("await probe(sleep_ms=30000)\n1").await;
    assert_eq!(code(&result).as_deref(), Some("CODE_RUN_FAILED"));
    assert!(
        result.record().text().contains("(timeout)"),
        "{}",
        result.record().text()
    );
    assert_eq!(h.results_of("c1:code:1"), 1, "{:?}", h.trail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_python_program_lists_the_binding_calls_that_had_effects() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
await probe(effects=["wrote a"])
await probe(value=1)
raise RuntimeError("changed my mind")
"#,
        )
        .await;
    let text = result.record().text();
    assert_eq!(code(&result).as_deref(), Some("CODE_RUN_FAILED"));
    assert!(
        text.contains("binding calls that had effects, not rolled back: c1:code:1 (probe)"),
        "{text}"
    );
    assert!(!text.contains("c1:code:2"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_python_run_stops_it_and_settles_its_binding_calls() {
    let h = harness(limits());
    let control = BatchControl::default();
    let cancel = control.cancel.clone();
    let log = h.log.clone();
    let canceller = tokio::spawn(async move {
        for _ in 0..1_000 {
            let started = log
                .events()
                .iter()
                .filter(|event| event.data.kind() == "tool/start")
                .count();
            // run_code's own start, then both binding calls.
            if started >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    });
    let result = h
        .run_with(
            "import asyncio\nawait asyncio.gather(probe(sleep_ms=30000), probe(sleep_ms=30000))",
            &control,
        )
        .await;
    canceller.await.unwrap();
    assert_eq!(
        code(&result).as_deref(),
        Some("ABORTED"),
        "{}",
        result.record().text()
    );
    assert_eq!(h.results_of("c1:code:1"), 1, "{:?}", h.trail());
    assert_eq!(h.results_of("c1:code:2"), 1, "{:?}", h.trail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_cannot_write_outside_its_temp_folder_or_open_a_socket() {
    let h = harness(limits());
    let outside = tempfile::tempdir().unwrap();
    let in_workspace = h.workspace.path().join("planted.txt");
    let beside = outside.path().join("planted.txt");
    let program = format!(
        r#"
import errno, os, socket, tempfile
seen = {{}}
for name, path in [("workspace", {in_workspace:?}), ("outside", {beside:?})]:
    try:
        with open(path, "w") as f:
            f.write("x")
        seen[name] = "written"
    except OSError as error:
        seen[name] = errno.errorcode[error.errno]
with open(os.path.join(tempfile.gettempdir(), "scratch.txt"), "w") as f:
    f.write("fine")
seen["temp"] = "written"
for family in ("AF_INET", "AF_INET6", "AF_UNIX"):
    try:
        socket.socket(getattr(socket, family), socket.SOCK_STREAM)
        seen[family] = "opened"
    except OSError as error:
        seen[family] = type(error).__name__
seen
"#
    );
    let result = h.run(&program).await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(
        result.record().value,
        Some(json!({
            "workspace": "EROFS",
            "outside": "EROFS",
            "temp": "written",
            "AF_INET": "PermissionError",
            "AF_INET6": "PermissionError",
            "AF_UNIX": "PermissionError",
        }))
    );
    assert!(!in_workspace.exists() && !beside.exists());
}

/// Live processes (not zombies) whose command line holds `needle`.
fn live_with(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            let dir = entry.path();
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_a_python_program_starts_outlives_its_run() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
import subprocess
subprocess.Popen(["sleep", "317.25"], start_new_session=True)
"left one behind"
"#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    // The namespace's init ends with the run, and every process in it with the init.
    let mut alive = live_with("317.25");
    for _ in 0..50 {
        if alive == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        alive = live_with("317.25");
    }
    assert_eq!(alive, 0);
    assert!(Path::new("/proc/self").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_is_refused_when_the_session_did_not_enable_it() {
    let h = support::session(&CodeMode::new(limits()), None, "python");
    let result = h.run("1").await;
    assert_eq!(code(&result).as_deref(), Some("INVALID_ARGS"));
    assert!(result.record().text().contains("Python is not available"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_breaks_the_protocol_is_stopped_with_a_runtime_failure() {
    let h = harness(limits());
    let started = std::time::Instant::now();
    let result = h
        .run(
            r#"
import asyncio, sys
runner = sys.modules["__main__"]
runner._OUT.write("not json\n")
runner._OUT.flush()
await asyncio.sleep(60)
"#,
        )
        .await;
    assert!(
        result
            .record()
            .text()
            .contains("CODE_RUN_FAILED (runtime): the Python process broke the protocol"),
        "{}",
        result.record().text()
    );
    // Stopped at once, not at the end of its 20 s wall time.
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_session_running_python_shows_both_sdks_in_code_mode() {
    use toolrail_code_mode::PresentationMode;
    let scratch = tempfile::tempdir().unwrap();
    let mode = CodeMode::new(limits()).with_python(PythonRuntime::new(Vec::new(), scratch.path()));
    let registry = support::session(&mode, None, "python").registry.clone();
    let presented = (mode.presentation(PresentationMode::Code))(&registry.snapshot());
    let system = presented.system.unwrap();
    assert!(system.contains("async function probe(args)"), "{system}");
    assert!(system.contains("async def probe(*,"), "{system}");
    assert!(system.contains("\"language\": \"python\""), "{system}");
    let javascript_only =
        (CodeMode::new(limits()).presentation(PresentationMode::Code))(&registry.snapshot());
    assert!(!javascript_only.system.unwrap().contains("async def"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_without_asyncio_may_await_its_own_coroutines_but_nothing_foreign() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
async def twice(n):
    first = await probe(value=n)
    return first + await probe(value=n)
await twice(20)
"#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(result.record().value, Some(json!(40)));
    // Awaiting something else needs an event loop: the program is told to use asyncio.
    let result = h
        .run("import types\n@types.coroutine\ndef tick():\n    yield 'tick'\nawait tick()")
        .await;
    assert!(
        result
            .record()
            .text()
            .contains("import asyncio to await anything else"),
        "{}",
        result.record().text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_values_are_the_program_s_to_handle_not_a_broken_protocol() {
    let h = harness(Limits {
        argument_bytes: 10_000,
        ..limits()
    });
    let result = h
        .run(
            r#"
seen = []
try:
    await probe(value="x" * 20_000)
except ToolError as error:
    seen.append(error.code)
try:
    await probe(value=float("nan"))
except ValueError:
    seen.append("ValueError")
print("not utf-8: \udcff")
print("y" * 200_000, end="")
print()
seen.append(await probe(value="after"))
seen
"#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(
        result.record().value,
        Some(json!(["CODE_BINDING_TOO_LARGE", "ValueError", "after"]))
    );
    assert!(
        result.record().text().contains("not utf-8: ?"),
        "{}",
        result.record().text()
    );
    // Only the one call that was sent became a call.
    assert_eq!(h.results_of("c1:code:1"), 1);
    assert_eq!(h.results_of("c1:code:2"), 0);
    // What a program writes to stderr cannot make it look out of memory.
    let result = h
        .run("import os, sys\nos.write(2, b'MemoryError\\n')\nos._exit(3)")
        .await;
    assert!(
        result.record().text().contains("CODE_RUN_FAILED (runtime)")
            && result.record().text().contains("exit code 3"),
        "{}",
        result.record().text()
    );
}
