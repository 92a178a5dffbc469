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
//! does not run (`SANDBOX_UNAVAILABLE`). The bubblewrap tier adds namespaces around the
//! helper: a read-only view of `/`, no network namespace, no capabilities. A call may ask
//! for `workspace-write` or `network` with a justification; the approval service is asked
//! whatever the permission rules say, and only its allowed answer widens the sandbox.
//!
//! The same confinement and kill path serve other programs ([`ConfinedCommand`]): code
//! mode's Python runtime uses them.
//!
//! Depends on `tools-core` only.

mod bash;
mod confined;
mod helper;
mod mode_rules;
mod namespace;
mod output;
mod process;
mod sandbox;

pub use bash::{BashArgs, BashTool, ShellConfig};
pub use confined::{ConfineError, ConfinedChild, ConfinedCommand};
pub use helper::sandbox_main;
pub use mode_rules::{InvalidModeRule, ModeRule};
pub use process::{Ended, Stop};
pub use sandbox::{Escalation, ResourceLimits, SandboxHelper, SandboxMode, SandboxTier, TierCheck};
