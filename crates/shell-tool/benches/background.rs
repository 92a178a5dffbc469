//! Background shells (issue 26), in one run, each sample of every configuration taken in
//! turn so they share the machine's noise: how long `bash` with `background` takes to show
//! a command's first output, beside the same command as a foreground call (and the bare
//! spawn, for reference); and what a `shell_output` that finds nothing new costs on a live
//! shell, beside a no-op tool through the same pipeline. Prints `BENCH_ROW` lines; `--quick`
//! takes fewer samples; `--profile N output|noop` makes N calls of one kind, for callgrind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolrail_shell_tool::{BashTool, SandboxMode, SandboxTier, ShellConfig, Shells};
use toolrail_test_support::bench::{BenchRow, instructions_per_iteration, median};
use toolrail_tools_core::log::MemorySink;
use toolrail_tools_core::{
    CallRequest, CommittedResult, Concurrency, Pipeline, RegistryBuilder, ToolContext, ToolOutput,
    ToolResult, ToolSet, ToolSpec, Typed, TypedTool, WorkspaceRoots, pipeline::BatchControl,
};

/// The arguments `shell_output` is called with, so the no-op pays the same decoding.
#[derive(Deserialize, JsonSchema)]
struct NoopArgs {
    #[allow(dead_code)]
    id: String,
    #[allow(dead_code)]
    #[serde(default)]
    since: Option<u64>,
}

/// Does nothing: the pipeline's own cost per call. (Defined here: the shared no-op is in
/// `tool-probe`, which this crate does not depend on.)
struct NoopTool;

impl TypedTool for NoopTool {
    type Args = NoopArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<NoopArgs>("noop", "does nothing")
            .read_only()
            .build()
    }

    fn concurrency(&self, _args: &NoopArgs) -> Concurrency {
        Concurrency::shared()
    }

    async fn run(&self, _ctx: &ToolContext, _args: NoopArgs) -> ToolResult {
        Ok(ToolOutput::text("ok"))
    }
}

/// A session's bash, shell tools and the no-op, in one sandbox mode and yield window.
struct Session {
    tools: ToolSet,
    shells: Shells,
    calls: AtomicU64,
}

fn session(
    dir: &std::path::Path,
    mode: SandboxMode,
    tier: SandboxTier,
    yield_window: Duration,
) -> Session {
    let mut config = ShellConfig::new(WorkspaceRoots::new([dir]).unwrap(), dir.join("session"));
    config.mode = mode;
    config.tier = tier;
    config.background.yield_window = yield_window;
    let shells = Shells::new(config.background.clone());
    let builder = shells.tools().into_iter().fold(
        RegistryBuilder::new()
            .builtin(Typed::new(BashTool::with_shells(config, shells.clone())))
            .builtin(Typed::new(NoopTool)),
        |builder, tool| builder.builtin(tool),
    );
    let (registry, _) = builder.build().unwrap();
    Session {
        tools: registry.snapshot(),
        shells,
        calls: AtomicU64::new(0),
    }
}

impl Session {
    async fn call(&self, pipeline: &Pipeline, tool: &str, args: &Value) -> CommittedResult {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let result = pipeline
            .execute_one(
                &self.tools,
                CallRequest::new(format!("c{n}"), 0, tool, args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap();
        assert!(
            !result.record().is_error(),
            "{tool}: {}",
            result.record().text()
        );
        result
    }

    /// Starts `command` in the background: its id and the call's result.
    async fn start(&self, pipeline: &Pipeline, command: &str) -> (String, CommittedResult) {
        let args = json!({"command": command, "description": "bench", "background": true});
        let started = self.call(pipeline, "bash", &args).await;
        let id = value(&started)["id"].as_str().unwrap().to_owned();
        (id, started)
    }

    async fn kill(&self, pipeline: &Pipeline, id: &str) {
        self.call(pipeline, "shell_kill", &json!({"id": id, "signal": "KILL"}))
            .await;
    }
}

fn value(result: &CommittedResult) -> &Value {
    result.record().value.as_ref().unwrap()
}

fn pipeline() -> Pipeline {
    Pipeline::builder(Arc::new(MemorySink::new())).build()
}

/// How a spawn variant reaches the output `ready`.
#[derive(Clone, Copy)]
enum Reach {
    /// A foreground `bash` call on `echo ready`.
    Foreground,
    /// `bash` with `background` on `echo ready`: the shell ends, so the call returns at once.
    BackgroundEnding,
    /// `bash` with `background` on a shell that stays: the call returns once the output came
    /// and went quiet (50 ms), then the shell is killed (not timed).
    BackgroundLive,
    /// As above with a yield window of 0, then `shell_output` with `wait_ms` until the
    /// output is there: the first output without the quiet period.
    BackgroundLiveRead,
}

const LIVE: &str = "echo ready; exec sleep 600";

/// How long `reach` took to give a result holding `ready`, and the id of a shell it left
/// running (killed by the caller, untimed, once the sample's other variants ran).
async fn reach_ready(
    session: &Session,
    pipeline: &Pipeline,
    reach: Reach,
) -> (Duration, Option<String>) {
    let started = Instant::now();
    let (text, live) = match reach {
        Reach::Foreground => {
            let args = json!({"command": "echo ready", "description": "bench"});
            (
                session.call(pipeline, "bash", &args).await.record().text(),
                None,
            )
        }
        Reach::BackgroundEnding => {
            let (_, result) = session.start(pipeline, "echo ready").await;
            (result.record().text(), None)
        }
        Reach::BackgroundLive => {
            let (id, result) = session.start(pipeline, LIVE).await;
            (result.record().text(), Some(id))
        }
        Reach::BackgroundLiveRead => {
            let (id, result) = session.start(pipeline, LIVE).await;
            let mut text = result.record().text();
            while !text.contains("ready") {
                let args = json!({"id": id, "wait_ms": 5_000});
                text = session
                    .call(pipeline, "shell_output", &args)
                    .await
                    .record()
                    .text();
            }
            (text, Some(id))
        }
    };
    let took = started.elapsed();
    assert!(text.contains("ready\n"), "{text}");
    (took, live)
}

struct Variant {
    session: Arc<Session>,
    reach: Reach,
    times: Vec<f64>,
}

/// Row 1: start to first output, background against foreground and the bare spawn.
fn spawn_rows(runtime: &tokio::runtime::Runtime, dir: &std::path::Path, samples: usize) {
    let window = Duration::from_secs(1);
    let full = Arc::new(session(
        dir,
        SandboxMode::FullAccess,
        SandboxTier::Namespaces,
        window,
    ));
    let full_zero = Arc::new(session(
        dir,
        SandboxMode::FullAccess,
        SandboxTier::Namespaces,
        Duration::ZERO,
    ));
    let read_only = Arc::new(session(
        dir,
        SandboxMode::ReadOnly,
        SandboxTier::Namespaces,
        window,
    ));
    let variant = |session: &Arc<Session>, reach| Variant {
        session: Arc::clone(session),
        reach,
        times: Vec::new(),
    };
    let mut variants = [
        variant(&full, Reach::Foreground),
        variant(&full, Reach::BackgroundEnding),
        variant(&full, Reach::BackgroundLive),
        variant(&full_zero, Reach::BackgroundLiveRead),
        variant(&read_only, Reach::Foreground),
        variant(&read_only, Reach::BackgroundEnding),
    ];
    let mut bare = Vec::new();
    for _ in 0..samples {
        // A fresh log per sample keeps memory flat; building it is not timed.
        let pipeline = pipeline();
        let mut live = Vec::new();
        for variant in &mut variants {
            let (took, shell) =
                runtime.block_on(reach_ready(&variant.session, &pipeline, variant.reach));
            variant.times.push(took.as_nanos() as f64);
            live.extend(shell.map(|id| (Arc::clone(&variant.session), id)));
        }
        let started = Instant::now();
        let output = Command::new("bash")
            .args(["-c", "echo ready"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        bare.push(started.elapsed().as_nanos() as f64);
        assert_eq!(output.stdout, b"ready\n");
        // The live shells end after the sample, and their namespaces' teardown settles
        // before the next one, so it lands on no variant's time.
        runtime.block_on(async {
            for (session, id) in live {
                session.kill(&pipeline, &id).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        });
    }
    for session in [&full, &full_zero, &read_only] {
        let running = session
            .shells
            .list()
            .into_iter()
            .filter(|shell| shell.state.as_str() == "running")
            .count();
        assert_eq!(running, 0, "every live shell was killed with shell_kill");
    }
    let [
        fg_full,
        bg_full,
        bg_live,
        bg_live_read,
        fg_read_only,
        bg_read_only,
    ] = variants.map(|variant| median(variant.times));
    let bare = median(bare);
    let foreground = "the same command as a foreground bash call, same mode";
    let reported = "reported (no goal set)";
    for (row, ours, baseline_name, baseline) in [
        (
            "background shell, start to first output: `bash` background on `echo ready` (the shell ends, the call returns at its end), full-access",
            bg_full,
            foreground,
            fg_full,
        ),
        (
            "background shell, start to first output: `bash` background on `echo ready`, read-only (namespaces tier)",
            bg_read_only,
            foreground,
            fg_read_only,
        ),
        (
            "background shell, start to first output on a live shell (`echo ready; exec sleep 600`): returns once output is 50 ms quiet, yield window 1 s, full-access",
            bg_live,
            "`echo ready` as a foreground bash call",
            fg_full,
        ),
        (
            "background shell, start to first output on a live shell: yield window 0, then shell_output with wait_ms until `ready` (no quiet period), full-access",
            bg_live_read,
            "`echo ready` as a foreground bash call",
            fg_full,
        ),
        (
            "bash tool, foreground, on `echo ready`, full-access (reference for the rows above)",
            fg_full,
            "bash -c 'echo ready', spawned, output read, waited",
            bare,
        ),
    ] {
        BenchRow {
            row,
            ours_ns: ours,
            baseline_name,
            baseline_ns: baseline,
            goal: reported,
            goal_max_ns: None,
            goal_max_ratio: None,
        }
        .print();
    }
}

/// Nanoseconds per call over `iters` sequential calls of `tool` with `args`, a fresh
/// in-memory log per sample.
fn sample_calls(
    runtime: &tokio::runtime::Runtime,
    session: &Session,
    tool: &str,
    args: &str,
    iters: u32,
) -> f64 {
    let pipeline = pipeline();
    let control = BatchControl::default();
    runtime.block_on(async {
        let started = Instant::now();
        for i in 0..iters {
            let request = CallRequest::new("c1", i, tool, args);
            black_box(
                pipeline
                    .execute_one(&session.tools, request, &control)
                    .await
                    .unwrap(),
            );
        }
        started.elapsed().as_nanos() as f64 / f64::from(iters)
    })
}

/// A live shell that prints nothing, and the arguments of a `shell_output` that reads
/// nothing from it (`since` its cursor, no wait).
fn quiet_shell(runtime: &tokio::runtime::Runtime, session: &Session) -> (String, String) {
    runtime.block_on(async {
        let (id, started) = session.start(&pipeline(), "exec sleep 600").await;
        assert_eq!(value(&started)["state"], "running");
        let cursor = value(&started)["cursor"].as_u64().unwrap();
        (id.clone(), json!({"id": id, "since": cursor}).to_string())
    })
}

/// One thread, as the pipeline bench runs its no-op: no cross-thread wake-ups in either.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Row 2: `shell_output` with nothing new against the no-op, interleaved.
fn round_trip_rows(dir: &std::path::Path, samples: usize, iters: u32, quick: bool) {
    let runtime = current_thread();
    let tier = SandboxTier::Namespaces;
    let session = session(dir, SandboxMode::FullAccess, tier, Duration::from_secs(1));
    let (id, args) = quiet_shell(&runtime, &session);
    let check = runtime.block_on(session.call(
        &pipeline(),
        "shell_output",
        &serde_json::from_str(&args).unwrap(),
    ));
    assert!(
        check.record().text().contains("[no new output]"),
        "{}",
        check.record().text()
    );
    // Warm up caches, the allocator and the runtime.
    sample_calls(&runtime, &session, "shell_output", &args, iters);
    sample_calls(&runtime, &session, "noop", &args, iters);
    let (mut output, mut noop) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        output.push(sample_calls(
            &runtime,
            &session,
            "shell_output",
            &args,
            iters,
        ));
        noop.push(sample_calls(&runtime, &session, "noop", &args, iters));
    }
    runtime.block_on(session.kill(&pipeline(), &id));
    let noop = median(noop);
    BenchRow {
        row: "shell_output on a live shell with no new output (`since` its cursor, no wait), in-memory log",
        ours_ns: median(output),
        baseline_name: "a no-op tool with the same arguments through the same pipeline",
        baseline_ns: noop,
        goal: "≤ 100 µs over the no-op",
        goal_max_ns: Some(noop + 100_000.0),
        goal_max_ratio: None,
    }
    .print();
    if !quick {
        instruction_row();
    }
}

/// Instructions per call, counted by callgrind: N calls minus M calls, over N - M.
fn instruction_row() {
    let per_call = |what: &str| instructions_per_iteration(&["--profile"], 3_000, 500, &[what]);
    let (Some(output), Some(noop)) = (per_call("output"), per_call("noop")) else {
        println!("background bench: valgrind not available or failed; no instruction-count row");
        return;
    };
    BenchRow {
        row: "shell_output with no new output: instructions per call (callgrind)",
        ours_ns: output,
        baseline_name: "the no-op tool, same arguments, same pipeline",
        baseline_ns: noop,
        goal: "informational: stable where time is not",
        goal_max_ns: None,
        goal_max_ratio: None,
    }
    .print_in("instructions");
}

/// `--profile N output|noop`: a live shell, then N calls of one kind (for callgrind).
fn profile(dir: &std::path::Path, calls: u32, what: &str) {
    let runtime = current_thread();
    // Under valgrind the namespaces tier cannot be made (it has no `open_tree`), so the
    // shell is started in bubblewrap, which runs outside valgrind; what is counted, the
    // calls after the start, does not depend on the tier.
    let tier = SandboxTier::bubblewrap();
    let session = session(dir, SandboxMode::FullAccess, tier, Duration::from_secs(1));
    let (id, args) = quiet_shell(&runtime, &session);
    let tool = if what == "noop" {
        "noop"
    } else {
        "shell_output"
    };
    let ns = sample_calls(&runtime, &session, tool, &args, calls);
    runtime.block_on(session.kill(&pipeline(), &id));
    println!("profiled {calls} {tool} calls: {ns:.0} ns each");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = tempfile::tempdir().unwrap();
    if let Some(at) = args.iter().position(|arg| arg == "--profile") {
        let calls = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000);
        let what = args.get(at + 2).map_or("output", String::as_str);
        profile(dir.path(), calls, what);
        return;
    }
    let quick = args.iter().any(|arg| arg == "--quick");
    let (spawn_samples, samples, iters) = if quick {
        (15, 15, 500)
    } else {
        (61, 61, 2_000)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    spawn_rows(&runtime, dir.path(), spawn_samples);
    drop(runtime);
    round_trip_rows(dir.path(), samples, iters, quick);
}
