//! Code mode (DESIGN §7): in code mode the model sees one tool, `run_code`, and an SDK of
//! the tools it may use; it writes a small program that calls them, and only what the
//! program prints and returns goes back. Every binding call re-enters the full pipeline as a
//! call of its own (`<parent>:code:<n>`), under the scheduler's rules, and is logged with its
//! value so a replay rebuilds the run.
//!
//! Built: presentation modes (`native`, `code`, `both`, given to the agent loop per agent; in
//! code mode a direct call is refused with a pointer to `run_code`), the SDK for
//! JavaScript and Python, the JavaScript runtime (QuickJS) with memory, stack and wall-time
//! limits, the Python runtime (`python3 -I` in the shell tool's sandbox, JSON lines, rlimits),
//! per-binding reply caps, cancellation that settles every binding call.
//!
//! Depends on `agent-loop` (a mode is the loop's presentation of each request's tools),
//! `shell-tool` (the sandbox and kill path Python runs under), `tools-core` and
//! `session-log`.

mod bindings;
mod gate;
#[cfg(feature = "javascript")]
mod js;
mod mode;
mod python;
mod run;
mod sdk;
mod tool;

pub use bindings::SubCall;
pub use mode::PresentationMode;
pub use python::PythonRuntime;
pub use run::{FailureKind, Limits};
pub use sdk::{RUN_CODE, identifier, javascript, python};
pub use tool::{CodeMode, Language, RunCodeArgs, RunCodeTool};
