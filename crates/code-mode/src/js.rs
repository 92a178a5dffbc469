//! The JavaScript runtime: QuickJS (`rquickjs`), one fresh runtime per run, with nothing but
//! the language — no filesystem, network, timers or modules. Limits: memory, stack, and wall
//! time twice over (the interrupt handler stops busy loops; a deadline around the whole run
//! stops a program waiting on a binding). Bindings are async host functions taking and
//! returning JSON text; a prelude turns their error replies into thrown `Error`s.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use rquickjs::prelude::Async;
use rquickjs::{AsyncContext, AsyncRuntime, CatchResultExt, Function, Promise};
use serde_json::Value;
use toolrail_tools_core::CancellationToken;

use crate::bindings::Bindings;
use crate::run::{FailureKind, Limits, Output, RunOutcome};

const PRELUDE: &str = r#"
const console = (() => {
  const show = (x) => typeof x === "string" ? x : (() => { try { return JSON.stringify(x); } catch (_) { return String(x); } })();
  const print = (...items) => __toolrail_print(items.map(show).join(" "));
  return { log: print, info: print, warn: print, error: print, debug: print };
})();
// JSON.stringify turns NaN and Infinity into null, drops a function or a symbol, and makes
// a Map or a Set `{}`: a value would change on its way out. Refuse it instead, naming what
// and where. (A property whose value is `undefined` is left out, as JSON always does.) A
// string with a lone surrogate (not Unicode) becomes well formed, U+FFFD in its place.
const __toolrail_json = (value, what) => {
  const text = JSON.stringify(value, (key, v) => {
    const at = key === "" ? "" : ` (under key "${key}")`;
    const refuse = (kind, instead) => {
      throw new TypeError(`${what} holds ${kind}${at}, which JSON cannot carry: ${instead}`);
    };
    if (typeof v === "string" && !v.isWellFormed()) {
      return v.toWellFormed();
    }
    if (typeof v === "number" && !Number.isFinite(v)) {
      refuse(String(v), "use null or a string");
    }
    if (typeof v === "function" || typeof v === "symbol") {
      refuse(`a ${typeof v}`, "use plain data");
    }
    if (v instanceof Map || v instanceof Set) {
      refuse(`a ${v instanceof Map ? "Map" : "Set"}`, "use an object or an array");
    }
    return v;
  });
  if (text === undefined) {
    throw new TypeError(`${what} is ${typeof value}, which JSON cannot carry: use plain data`);
  }
  return text;
};
async function __call(name, args) {
  const sent = __toolrail_json(args === undefined ? {} : args, `the arguments of ${name}`);
  const reply = JSON.parse(await __toolrail_call(name, sent));
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
) -> RunOutcome {
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
                    RunOutcome::failed(FailureKind::Runtime, error.to_string(), String::new())
                }
            };
            let _ = done.send(outcome);
        });
    let lost = |why: String| RunOutcome::failed(FailureKind::Runtime, why, String::new());
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
) -> RunOutcome {
    let output = Arc::new(Mutex::new(Output::new(limits.output_bytes)));
    let failure = |kind: FailureKind, message: String, output: &Arc<Mutex<Output>>| {
        RunOutcome::failed(kind, message, output.lock().text().to_owned())
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
    let start = "__toolrail_main().then((value) => __toolrail_json(value === undefined ? null : value, \"the program's return value\"))";
    let printed = Arc::clone(&output);
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
            output.push(&line);
            output.push("\n");
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
        // The prelude hands back JSON.stringify's text; what still fails to read (a lone
        // surrogate in a key) is an error, never passed off as a string.
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value) => RunOutcome {
                value: Some(value),
                output: output.lock().text().to_owned(),
                failure: None,
            },
            Err(error) => failure(
                FailureKind::Output,
                format!(
                    "the program's return value could not be read as JSON ({error}); return plain data"
                ),
                &output,
            ),
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
