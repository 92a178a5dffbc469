//! The shell tool (DESIGN §7): `bash`, one contained process tree per call.
//!
//! Built so far: a fresh `bash -c` per call with stdin closed and a scrubbed environment,
//! in its own process group and PID namespace (nothing it starts outlives the call, `setsid`
//! and double forks included); stdout and stderr captured together, each capped head+tail
//! with the full output spilled to a file; SIGTERM, grace, SIGKILL on timeout and cancel;
//! exit code, signal and timeout reported as facts.
//!
//! Sandbox: in `read-only` and `workspace-write` mode the `toolrail-sandbox` helper (a binary
//! of this crate) restricts itself with Landlock (files) and seccomp (inet sockets, ptrace)
//! and then becomes `bash`; if it is missing or cannot enforce the mode fully, the command
//! does not run (`SANDBOX_UNAVAILABLE`). Not built yet: the bubblewrap tier and escalation
//! through the approval service.
//!
//! Depends on `tools-core` only.

mod bash;
mod output;

pub use bash::{BashArgs, BashTool, SandboxMode, ShellConfig};
