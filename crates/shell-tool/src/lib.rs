//! The shell tool (DESIGN §7): `bash`, one contained process tree per call.
//!
//! Built so far: a fresh `bash -c` per call with stdin closed and a scrubbed environment,
//! in its own process group and PID namespace (nothing it starts outlives the call, `setsid`
//! and double forks included); stdout and stderr captured together, each capped head+tail
//! with the full output spilled to a file; SIGTERM, grace, SIGKILL on timeout and cancel;
//! exit code, signal and timeout reported as facts.
//!
//! Not built yet: the Landlock + seccomp sandbox and the bubblewrap tier. Until they exist
//! the `read-only` and `workspace-write` modes fail closed (`SANDBOX_UNAVAILABLE`): only an
//! embedder that chooses `full-access` runs commands.
//!
//! Depends on `tools-core` only.

mod bash;
mod output;

pub use bash::{BashArgs, BashTool, SandboxMode, ShellConfig};
