//! The JavaScript runtime: QuickJS (`rquickjs`), one fresh runtime per run, with nothing but
//! the language — no filesystem, network, timers or modules. Limits: memory, stack, and wall
//! time twice over (the interrupt handler stops busy loops; a deadline around the whole run
//! stops a program waiting on a binding). Bindings are async host functions taking and
//! returning JSON text; a prelude turns their error replies into thrown `Error`s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rquickjs::prelude::Async;
use rquickjs::{AsyncContext, AsyncRuntime, CatchResultExt, Function, Promise};
use serde_json::Value;
use toolrail_tools_core::CancellationToken;

use crate::bindings::Bindings;

/// What bounds a run.
#[derive(Clone, Debug)]
pub struct Limits {
    pub memory_bytes: usize,
    pub stack_bytes: usize,
    pub wall: Duration,
    /// Bytes of one binding's reply the program may receive.
    pub binding_bytes: usize,
    /// Bytes of `console.log` output kept.
    pub output_bytes: usize,
    /// Binding calls running at once.
    pub max_parallel: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            stack_bytes: 1 << 20,
            wall: Duration::from_secs(30),
            binding_bytes: 256 << 10,
            output_bytes: 64 << 10,
            max_parallel: 8,
        }
    }
}

/// Why a program failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The program is not valid JavaScript.
    Syntax,
    /// It threw and did not catch.
    Exception,
    /// It ran past its wall time.
    Timeout,
    /// It ran out of memory (or stack).
    Memory,
    /// The call was cancelled.
    Cancelled,
    /// It returned more than the output cap.
    Output,
    /// The runtime could not be set up.
    Runtime,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syntax => "syntax",
            Self::Exception => "exception",
            Self::Timeout => "timeout",
            Self::Memory => "memory",
            Self::Cancelled => "cancelled",
            Self::Output => "output",
            Self::Runtime => "runtime",
        }
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct JsOutcome {
    /// The program's return value (`null` for none).
    pub value: Option<Value>,
    /// What it printed, within the output cap.
    pub output: String,
    pub failure: Option<(FailureKind, String)>,
}

impl JsOutcome {
    fn failed(kind: FailureKind, message: String, output: String) -> Self {
        Self {
            value: None,
            output,
            failure: Some((kind, message)),
        }
    }
}

const PRELUDE: &str = r#"
const console = (() => {
  const show = (x) => typeof x === "string" ? x : (() => { try { return JSON.stringify(x); } catch (_) { return String(x); } })();
  const print = (...items) => __toolrail_print(items.map(show).join(" "));
  return { log: print, info: print, warn: print, error: print, debug: print };
})();
async function __call(name, args) {
  const reply = JSON.parse(await __toolrail_call(name, JSON.stringify(args === undefined ? {} : args)));
  if (reply.error) {
    const error = new Error(reply.error.message);
    error.code = reply.error.code;
    throw error;
  }
  return reply.value;
}
"#;

/// Runs `program` (the body of an async function: it may `await` and `return`) with the
/// `sdk` functions bound to `bindings`, on a thread of its own: the engine is not `Send`,
/// and a busy program must not hold a worker of the caller's runtime.
pub(crate) async fn run(
    program: String,
    sdk: String,
    bindings: Arc<Bindings>,
    limits: Limits,
    cancelled: CancellationToken,
) -> JsOutcome {
    let (done, outcome) = tokio::sync::oneshot::channel();
    // The engine's stack limit must fit in the thread's own stack, with room to spare.
    let stack = limits.stack_bytes.saturating_add(2 << 20);
    let spawned = std::thread::Builder::new()
        .name("toolrail-js".to_owned())
        .stack_size(stack)
        .spawn(move || {
            let outcome = match tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            {
                Ok(runtime) => {
                    runtime.block_on(run_here(&program, &sdk, &bindings, &limits, &cancelled))
                }
                Err(error) => {
                    JsOutcome::failed(FailureKind::Runtime, error.to_string(), String::new())
                }
            };
            let _ = done.send(outcome);
        });
    let lost = |why: String| JsOutcome::failed(FailureKind::Runtime, why, String::new());
    match spawned {
        Ok(_) => outcome
            .await
            .unwrap_or_else(|_| lost("the JavaScript thread ended without a result".to_owned())),
        Err(error) => lost(format!("no thread for the JavaScript runtime: {error}")),
    }
}

async fn run_here(
    program: &str,
    sdk: &str,
    bindings: &Arc<Bindings>,
    limits: &Limits,
    cancelled: &CancellationToken,
) -> JsOutcome {
    let output = Arc::new(Mutex::new(String::new()));
    let failure = |kind: FailureKind, message: String, output: &Arc<Mutex<String>>| {
        JsOutcome::failed(kind, message, output.lock().clone())
    };
    let runtime = match AsyncRuntime::new() {
        Ok(runtime) => runtime,
        Err(error) => return failure(FailureKind::Runtime, error.to_string(), &output),
    };
    runtime.set_memory_limit(limits.memory_bytes).await;
    runtime.set_max_stack_size(limits.stack_bytes).await;
    let deadline = Instant::now() + limits.wall;
    // Checked between bytecodes: a busy loop stops at its deadline or when the call is
    // cancelled, whatever else the task is doing. It notes that it stopped the program, so
    // the failure is told by what happened, not by words in an error message.
    let stop = cancelled.clone();
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noted = Arc::clone(&interrupted);
    runtime
        .set_interrupt_handler(Some(Box::new(move || {
            let stop = stop.is_cancelled() || Instant::now() > deadline;
            if stop {
                noted.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            stop
        })))
        .await;
    let context = match AsyncContext::full(&runtime).await {
        Ok(context) => context,
        Err(error) => return failure(FailureKind::Runtime, error.to_string(), &output),
    };
    // Defining the program compiles it without running it: a syntax error shows here.
    let setup = format!("{PRELUDE}\n{sdk}\n");
    let definition = format!("globalThis.__toolrail_main = async () => {{\n{program}\n}};");
    let start =
        "__toolrail_main().then((value) => JSON.stringify(value === undefined ? null : value))";
    let printed = Arc::clone(&output);
    let cap = limits.output_bytes;
    let host = Arc::clone(bindings);
    let evaluation = context.async_with(async |ctx| {
        let call = Function::new(
            ctx.clone(),
            Async(move |name: String, arguments: String| {
                let reply = host.submit(name, arguments);
                async move { Ok::<String, rquickjs::Error>(reply.await) }
            }),
        );
        let print = Function::new(ctx.clone(), move |line: String| {
            let mut output = printed.lock();
            const CUT: &str = "[output cut: over the cap]\n";
            if output.ends_with(CUT) {
                return;
            }
            let room = cap.saturating_sub(output.len());
            if line.len() < room {
                output.push_str(&line);
                output.push('\n');
            } else {
                let mut end = room;
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                output.push_str(line.get(..end).unwrap_or_default());
                output.push('\n');
                output.push_str(CUT);
            }
        });
        let globals = ctx.globals();
        let installed = call
            .and_then(|call| globals.set("__toolrail_call", call))
            .and(print)
            .and_then(|print| globals.set("__toolrail_print", print));
        if let Err(error) = installed {
            return Err((FailureKind::Runtime, error.to_string()));
        }
        if let Err(error) = ctx.eval::<(), _>(setup).catch(&ctx) {
            return Err((
                FailureKind::Runtime,
                format!("the SDK did not load: {error}"),
            ));
        }
        if let Err(error) = ctx.eval::<(), _>(definition).catch(&ctx) {
            let (kind, message) = classify(&error.to_string());
            let kind = if kind == FailureKind::Memory {
                kind
            } else {
                FailureKind::Syntax
            };
            return Err((kind, message));
        }
        let promise: Promise = match ctx.eval(start).catch(&ctx) {
            Ok(promise) => promise,
            Err(error) => return Err(classify(&error.to_string())),
        };
        match promise.into_future::<String>().await.catch(&ctx) {
            Ok(text) => Ok(text),
            Err(error) => Err(classify(&error.to_string())),
        }
    });
    let result = tokio::select! {
        result = evaluation => result,
        () = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
            Err((FailureKind::Timeout, format!(
                "the program ran past its {} ms wall time (waiting for a binding call)",
                limits.wall.as_millis()
            )))
        }
        () = cancelled.cancelled() => Err((FailureKind::Cancelled, "the call was cancelled".to_owned())),
    };
    let stopped = interrupted.load(std::sync::atomic::Ordering::Relaxed);
    let result = match result {
        Err((_, message)) if stopped && !cancelled.is_cancelled() => Err((
            FailureKind::Timeout,
            format!(
                "the program ran past its {} ms wall time ({message})",
                limits.wall.as_millis()
            ),
        )),
        Err((FailureKind::Timeout, _)) if !stopped && !cancelled.is_cancelled() => Err((
            FailureKind::Timeout,
            format!(
                "the program ran past its {} ms wall time (waiting for a binding call)",
                limits.wall.as_millis()
            ),
        )),
        Err((FailureKind::Timeout | FailureKind::Exception, _)) if cancelled.is_cancelled() => {
            Err((FailureKind::Cancelled, "the call was cancelled".to_owned()))
        }
        Err((FailureKind::Exception, message)) if Instant::now() > deadline => Err((
            FailureKind::Timeout,
            format!(
                "the program ran past its {} ms wall time ({message})",
                limits.wall.as_millis()
            ),
        )),
        other => other,
    };
    match result {
        Ok(text) if text.len() > limits.output_bytes => failure(
            FailureKind::Output,
            format!(
                "the program returned {} bytes, over the {} bytes it may return; return less",
                text.len(),
                limits.output_bytes
            ),
            &output,
        ),
        Ok(text) => JsOutcome {
            value: Some(serde_json::from_str(&text).unwrap_or(Value::String(text))),
            output: output.lock().clone(),
            failure: None,
        },
        Err((kind, message)) => failure(kind, message, &output),
    }
}

/// The kind of a failure from the engine's message.
fn classify(message: &str) -> (FailureKind, String) {
    // The engine's own errors, by their first line; a tool's error message cannot make a
    // program look out of memory, since it arrives as the message of a plain `Error`.
    let first = message.lines().next().unwrap_or_default();
    let kind = if first == "Error: out of memory"
        || first.starts_with("InternalError: out of memory")
        || first.ends_with("Error: Maximum call stack size exceeded")
        || first.contains("stack overflow")
    {
        FailureKind::Memory
    } else {
        FailureKind::Exception
    };
    (kind, message.trim_end().to_owned())
}
