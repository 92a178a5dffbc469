//! toolrail against two peers no one here wrote, in one run: pi's agent core
//! (`@mariozechner/pi-agent-core` 0.73.1 from npm, on the machine's Node) and the OpenAI
//! Agents SDK for Python (`openai-agents` 0.24.0 from PyPI, on the machine's `python3`). All
//! three drive one agent turn in which a scripted model asks for N no-op tool calls in one
//! assistant message and then ends the turn. pi runs its tools in its parallel mode; the
//! OpenAI SDK starts every function call of the turn at once, each its own asyncio task (its
//! default, `max_function_tool_concurrency` None, named in its harness), with tracing off and
//! an `async` tool (a plain `def` tool would run on a worker thread); toolrail runs them
//! through its scheduler, pipeline (argument parsing and schema validation) and a session log
//! that records every call. The OpenAI SDK's tool takes one small integer argument (`{"x":
//! 1}`, validated by pydantic) where pi's and toolrail's take none. Each row names its log:
//! in memory (nothing encoded, no I/O), a JSONL file in mode `none` (encoded and written,
//! never synced), and a JSONL file in mode `strict` (with its fsyncs per turn counted). Each
//! peer is warmed over every N before any N is measured, so pi's JIT is at its top tier and
//! CPython's specializing interpreter and caches are warm throughout. Per-call nanoseconds
//! for N = 1, 10, 100, 1,000 and 10,000, and how a turn's time grows with N; lower is
//! better. Prints `BENCH_ROW {json}` for `cargo xtask bench`.
//!
//! The peers are installed into `target/bench-peers/` on first use (the registries are
//! reachable here): pi with npm, the OpenAI SDK with pip into a virtualenv. A peer that
//! cannot be installed or run is not measured, and the bench says why; under CI (`CI` set)
//! that fails the bench instead, since `.ci/run` installs node, npm and python3-venv.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{
    AgentLoop, LoopConfig, ModelClient, ModelError, ModelRequest, ModelResponse, Scheduler,
    SchedulerConfig,
};
use toolrail_session_log::{
    BoxFuture, CallId, MemorySink, SessionId, SessionLog, ToolSource,
    event::{AssistantBlock, AssistantMessage, FORMAT_VERSION, SessionStart, StopReason},
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_test_support::bench::{
    BenchRow, allocations_per_iteration, growth_exponent, instructions_per_iteration, median,
};
use toolrail_tool_probe::NoopTool;
use toolrail_tools_core::{Pipeline, RegistryBuilder, ToolSpec};

const PI: &str = "@mariozechner/pi-agent-core@0.73.1";
const PI_HARNESS: &str = include_str!("peer/pi_harness.mjs");
const PI_TURN: &str = "pi-agent-core 0.73.1 (Node, parallel mode, warmed), same turn";
const OPENAI_AGENTS: &str = "openai-agents==0.24.0";
const OPENAI_AGENTS_HARNESS: &str = include_str!("peer/openai_agents_harness.py");
const OPENAI_AGENTS_TURN: &str =
    "openai-agents 0.24.0 (CPython, every call its own asyncio task, warmed), same turn";

/// The model of every side: N calls in the first answer, then text ending the turn. Like
/// the peers' scripted models, it keeps no record of the requests.
struct Script(Mutex<Vec<AssistantMessage>>);

impl ModelClient for Script {
    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let message = self.0.lock().pop().unwrap();
            Ok(ModelResponse {
                message,
                usage: None,
                response_id: None,
                response_model: None,
            })
        })
    }
}

fn script(n: usize) -> Script {
    let calls = AssistantMessage {
        blocks: (0..n)
            .map(|i| AssistantBlock::ToolCall {
                call_id: CallId::from(format!("c{i}")),
                name: "noop".to_owned(),
                arguments_raw: "{}".to_owned(),
            })
            .collect(),
        stop_reason: StopReason::ToolCalls,
    };
    let done = AssistantMessage {
        blocks: vec![AssistantBlock::Text {
            text: "done".to_owned(),
        }],
        stop_reason: StopReason::EndTurn,
    };
    // Popped from the end.
    Script(Mutex::new(vec![done, calls]))
}

/// The session log a turn writes.
#[derive(Clone, Copy)]
enum Log<'a> {
    /// `MemorySink`: events kept as values, nothing encoded.
    Memory,
    /// A fresh session of this JSONL store for every turn.
    Jsonl(&'a JsonlStore),
}

/// One measured turn: nanoseconds per call, and the fsyncs its log made.
struct Turn {
    per_call_ns: f64,
    syncs: u64,
}

/// One turn of `n` calls: loop, scheduler, pipeline, and `log`.
fn toolrail_turn(runtime: &tokio::runtime::Runtime, n: usize, log: Log<'_>) -> Turn {
    let tool = NoopTool(
        ToolSpec::builder(
            "noop",
            "does nothing",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        )
        .build(),
    );
    let (registry, _) = RegistryBuilder::new()
        .external(ToolSource::Extension("bench".into()), Arc::new(tool))
        .build()
        .unwrap();
    let (session, jsonl): (Arc<dyn SessionLog>, _) = match log {
        Log::Memory => (Arc::new(MemorySink::new()), None),
        Log::Jsonl(store) => {
            static TURNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let number = TURNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let log = Arc::new(
                store
                    .create(SessionStart {
                        format_version: FORMAT_VERSION,
                        session_id: SessionId::new(format!("turn-{number}")),
                        tools: vec![],
                        meta: None,
                    })
                    .unwrap(),
            );
            (log.clone() as Arc<dyn SessionLog>, Some(log))
        }
    };
    let scheduler = Scheduler::new(
        Arc::new(Pipeline::builder(session.clone()).build()),
        SchedulerConfig {
            max_parallel: std::num::NonZeroUsize::new(n).unwrap_or(std::num::NonZeroUsize::MIN),
            ..SchedulerConfig::default()
        },
    );
    let mut agent = AgentLoop::new(
        registry,
        scheduler,
        session,
        Arc::new(script(n)),
        LoopConfig::default(),
    );
    let elapsed = common::complete_turn(runtime, &mut agent);
    Turn {
        per_call_ns: elapsed.as_nanos() as f64 / n as f64,
        // A fresh session: every sync it made was this turn's.
        syncs: jsonl.as_ref().map_or(0, |log| log.syncs()),
    }
}

/// The median per-call time of `reps` turns after three to warm up, and the fsyncs of the
/// last turn.
fn measure(runtime: &tokio::runtime::Runtime, n: usize, log: Log<'_>, reps: usize) -> Turn {
    for _ in 0..3 {
        toolrail_turn(runtime, n, log);
    }
    let turns: Vec<Turn> = (0..reps).map(|_| toolrail_turn(runtime, n, log)).collect();
    Turn {
        per_call_ns: median(turns.iter().map(|turn| turn.per_call_ns).collect()),
        syncs: turns.last().map_or(0, |turn| turn.syncs),
    }
}

/// Where the peers are installed: `target/bench-peers/`.
fn peers_folder() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("bench-peers")
}

/// A peer that could not be installed or run: the bench says why and does not measure its
/// rows. Under CI it fails instead, as the tests that need an outside program do: `.ci/run`
/// installs what the peers need, so a peer missing there is a broken setup, and a run
/// without its rows must not pass as a measured one.
fn not_measured<T>(peer: &str, why: impl std::fmt::Display) -> Option<T> {
    let message = format!("peer bench: {why}; {peer} rows not measured");
    assert!(std::env::var_os("CI").is_none(), "{message}");
    println!("{message}");
    None
}

/// Installs pi into `target/bench-peers/` once; `None` (with the reason printed) when node
/// or npm is missing or the install fails.
fn pi_folder() -> Option<PathBuf> {
    let folder = peers_folder().join("pi-agent-core-0.73.1");
    let installed = folder.join("node_modules/@mariozechner/pi-agent-core/package.json");
    if !installed.exists() {
        std::fs::create_dir_all(&folder).unwrap();
        println!(
            "peer bench: installing {PI} with npm into {}",
            folder.display()
        );
        let status = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--prefix",
            ])
            .arg(&folder)
            .arg(PI)
            .status();
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => return not_measured("pi", format!("npm install failed ({status})")),
            Err(error) => return not_measured("pi", format!("npm is not available ({error})")),
        }
    }
    std::fs::write(folder.join("pi_harness.mjs"), PI_HARNESS).unwrap();
    Some(folder)
}

/// Installs the OpenAI Agents SDK into a virtualenv in `target/bench-peers/` once; `None`
/// (with the reason printed) when python3 or its venv module is missing or pip fails.
fn openai_agents_folder() -> Option<PathBuf> {
    let folder = peers_folder().join(OPENAI_AGENTS.replace("==", "-"));
    // Written once pip has succeeded, so a virtualenv left half installed is installed again.
    let installed = folder.join("installed");
    if !installed.exists() {
        println!(
            "peer bench: installing {OPENAI_AGENTS} with pip into a virtualenv at {}",
            folder.display()
        );
        let peer = "openai-agents";
        match Command::new("python3")
            .args(["-m", "venv"])
            .arg(&folder)
            .status()
        {
            Ok(status) if status.success() => {}
            Ok(status) => {
                return not_measured(
                    peer,
                    format!("python3 -m venv failed ({status}; on Debian it needs python3-venv)"),
                );
            }
            Err(error) => return not_measured(peer, format!("python3 is not available ({error})")),
        }
        // Wheels only, as pi is installed with `--ignore-scripts`: no package's build code runs.
        let status = Command::new(folder.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                OPENAI_AGENTS,
            ])
            .status();
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => return not_measured(peer, format!("pip install failed ({status})")),
            Err(error) => {
                return not_measured(
                    peer,
                    format!("the virtualenv's python did not start ({error})"),
                );
            }
        }
        std::fs::write(&installed, OPENAI_AGENTS).unwrap();
    }
    std::fs::write(
        folder.join("openai_agents_harness.py"),
        OPENAI_AGENTS_HARNESS,
    )
    .unwrap();
    Some(folder)
}

/// A peer's per-call nanoseconds for each count, from the JSON lines of its harness, which
/// `command` starts and which is given the counts and the repetitions.
fn peer_turns(peer: &str, mut command: Command, counts: &[usize], reps: usize) -> Option<Vec<f64>> {
    let list: Vec<String> = counts.iter().map(ToString::to_string).collect();
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.arg(list.join(",")).arg(reps.to_string()).output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            return not_measured(
                peer,
                format!(
                    "the {peer} harness failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                ),
            );
        }
        Err(error) => return not_measured(peer, format!("{program} is not available ({error})")),
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), counts.len(), "{text}");
    Some(
        lines
            .iter()
            .map(|line| line["per_call_ns"].as_f64().unwrap())
            .collect(),
    )
}

/// pi's harness on the machine's Node.
fn pi_turns(counts: &[usize], reps: usize) -> Option<Vec<f64>> {
    let folder = pi_folder()?;
    let mut node = Command::new("node");
    node.current_dir(&folder).arg("pi_harness.mjs");
    peer_turns("pi", node, counts, reps)
}

/// The OpenAI Agents SDK's harness on its virtualenv's python.
fn openai_agents_turns(counts: &[usize], reps: usize) -> Option<Vec<f64>> {
    let folder = openai_agents_folder()?;
    let mut python = Command::new(folder.join("bin/python"));
    python.current_dir(&folder).arg("openai_agents_harness.py");
    peer_turns("openai-agents", python, counts, reps)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `--toolrail-only N [REPS]`: toolrail's side alone, for profilers.
    if let Some(at) = args.iter().position(|arg| arg == "--toolrail-only") {
        let n = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000);
        let reps = args.get(at + 2).and_then(|n| n.parse().ok()).unwrap_or(50);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let folder = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(folder.path(), Durability::None).unwrap();
        let log = if args.iter().any(|arg| arg == "--memory") {
            Log::Memory
        } else {
            Log::Jsonl(&store)
        };
        let per_call = median(
            (0..reps)
                .map(|_| toolrail_turn(&runtime, n, log).per_call_ns)
                .collect(),
        );
        println!("{per_call:.0} ns per call in a turn of {n}");
        return;
    }
    let quick = args.iter().any(|arg| arg == "--quick");
    let counts = [1, 10, 100, 1_000, 10_000];
    let reps = if quick { 5 } else { 21 };
    // One after the other, then toolrail: nothing else runs while one side measures.
    let pi = pi_turns(&counts, reps);
    let openai_agents = openai_agents_turns(&counts, reps);
    if pi.is_none() && openai_agents.is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let folder = tempfile::tempdir().unwrap();
    let none = JsonlStore::new(folder.path().join("none"), Durability::None).unwrap();
    let strict = JsonlStore::new(folder.path().join("strict"), Durability::Strict).unwrap();
    let (mut ours_points, mut pi_points, mut openai_agents_points) =
        (Vec::new(), Vec::new(), Vec::new());
    for (at, n) in counts.iter().enumerate() {
        let pi = pi.as_ref().map(|turns| turns[at]);
        let openai_agents = openai_agents.as_ref().map(|turns| turns[at]);
        let memory = measure(&runtime, *n, Log::Memory, reps);
        let written = measure(&runtime, *n, Log::Jsonl(&none), reps);
        // Strict turns sync for real: fewer of them at the large counts.
        let strict_reps = if *n >= 1_000 { reps.min(5) } else { reps };
        let synced = measure(&runtime, *n, Log::Jsonl(&strict), strict_reps);
        if *n >= 100 {
            let turn = |per_call_ns: f64| (*n as f64, per_call_ns * *n as f64);
            ours_points.push(turn(written.per_call_ns));
            pi_points.extend(pi.map(turn));
            openai_agents_points.extend(openai_agents.map(turn));
        }
        let per_call = |log: &str| format!("{n} no-op call(s) in one message: per call, {log}");
        let written_row =
            per_call("JSONL log in mode none (every call encoded and written, no fsync)");
        if let Some(pi) = pi {
            BenchRow {
                row: &format!("agent turn, {written_row}"),
                ours_ns: written.per_call_ns,
                baseline_name: PI_TURN,
                baseline_ns: pi,
                goal: "faster per call than pi",
                goal_max_ns: None,
                goal_max_ratio: Some(1.0),
            }
            .print();
        }
        if let Some(openai_agents) = openai_agents {
            BenchRow {
                row: &format!("agent turn vs openai-agents, {written_row}"),
                ours_ns: written.per_call_ns,
                baseline_name: OPENAI_AGENTS_TURN,
                baseline_ns: openai_agents,
                goal: "faster per call than openai-agents",
                goal_max_ns: None,
                goal_max_ratio: Some(1.0),
            }
            .print();
        }
        if let Some(pi) = pi {
            BenchRow {
                row: &format!(
                    "agent turn, {}",
                    per_call("log in memory (nothing encoded, no I/O)")
                ),
                ours_ns: memory.per_call_ns,
                baseline_name: PI_TURN,
                baseline_ns: pi,
                goal: "informational (the JSONL row above is the comparison)",
                goal_max_ns: None,
                goal_max_ratio: None,
            }
            .print();
        }
        BenchRow {
            row: &format!(
                "agent turn, {}",
                per_call(&format!(
                    "JSONL log in mode strict ({} fsyncs per turn)",
                    synced.syncs
                ))
            ),
            ours_ns: synced.per_call_ns,
            baseline_name: "the same turn with a JSONL log in mode none",
            baseline_ns: written.per_call_ns,
            goal: "informational (what durability costs)",
            goal_max_ns: None,
            goal_max_ratio: None,
        }
        .print();
    }
    if !quick {
        // Instructions, where time is noisy: one turn of 1,000 calls, both logs (the JSONL
        // log's writer thread included), per call.
        let per_call = |tail: &[&str]| {
            instructions_per_iteration(&["--toolrail-only", "1000"], 6, 1, tail)
                .map(|per_turn| per_turn / 1_000.0)
        };
        match (per_call(&[]), per_call(&["--memory"])) {
            (Some(written), Some(memory)) => BenchRow {
                row: "agent turn, 1000 no-op calls, JSONL log in mode none: instructions per call (callgrind)",
                ours_ns: written,
                baseline_name: "the same turn with the log in memory",
                baseline_ns: memory,
                goal: "informational: what encoding and writing the log costs, stable where time is not",
                goal_max_ns: None,
                goal_max_ratio: None,
            }
            .print_in("instructions"),
            _ => println!("peer bench: valgrind not available; no instruction-count row"),
        }
        let allocations = |tail: &[&str]| {
            allocations_per_iteration(&["--toolrail-only", "1000"], 6, 1, tail)
                .map(|(blocks, bytes)| (blocks / 1_000.0, bytes / 1_000.0))
        };
        match (allocations(&[]), allocations(&["--memory"])) {
            (Some((written, bytes)), Some((memory, memory_bytes))) => BenchRow {
                row: &format!(
                    "agent turn, 1000 no-op calls, JSONL log in mode none: allocations per call, {bytes:.0} bytes (dhat, every thread)"
                ),
                ours_ns: written,
                baseline_name: &format!(
                    "the same turn with the log in memory ({memory_bytes:.0} bytes)"
                ),
                baseline_ns: memory,
                goal: "informational",
                goal_max_ns: None,
                goal_max_ratio: None,
            }
            .print_in("allocations"),
            _ => println!("peer bench: valgrind not available; no allocation row"),
        }
    }
    // With a cap as large as the batch every call is in flight at once: a scheduler that
    // looked at the whole window on every wake-up was quadratic here.
    let scaling = "growth of an agent turn's time with its calls, all in flight, JSONL log in mode none, 100 → 10,000 (fitted exponent; 1 = linear)";
    if pi.is_some() {
        BenchRow {
            row: &format!("scaling: {scaling}"),
            ours_ns: growth_exponent(&ours_points),
            baseline_name: "pi-agent-core 0.73.1, same turns",
            baseline_ns: growth_exponent(&pi_points),
            goal: "linear or better (≤ 1.1)",
            goal_max_ns: Some(1.1),
            goal_max_ratio: None,
        }
        .print_in("exponent");
    }
    if openai_agents.is_some() {
        BenchRow {
            row: &format!("scaling vs openai-agents: {scaling}"),
            ours_ns: growth_exponent(&ours_points),
            baseline_name: "openai-agents 0.24.0, same turns",
            baseline_ns: growth_exponent(&openai_agents_points),
            goal: "linear or better (≤ 1.1)",
            goal_max_ns: Some(1.1),
            goal_max_ratio: None,
        }
        .print_in("exponent");
    }
}
