//! The shell tool (DESIGN §7): `bash`, one contained process tree per call.
//!
//! Built so far: a fresh `bash -c` per call with stdin closed and a scrubbed environment,
//! in its own process group and PID namespace (nothing it starts outlives the call, `setsid`
//! and double forks included); stdout and stderr captured together, each capped head+tail
//! with the full output spilled to a file; SIGTERM, grace, SIGKILL on timeout and cancel;
//! exit code, signal and timeout reported as facts.
//!
//! Sandbox: made in-process between fork and exec, so any program that links this crate
//! gets it with nothing to ship or dispatch. In `read-only` and `workspace-write` mode the
//! command gets its own user, PID, mount, IPC, UTS and (without network) network namespaces;
//! the file system is remounted read-only with writable binds for the roots (in
//! `workspace-write`) and a private temp folder, every `.git` bound read-only again, and the
//! hidden paths ([`toolrail_tools_core::ProtectedPaths`]: credentials, the session folder,
//! what a deny rule names for reading) masked; it has no capabilities and `NoNewPrivs`;
//! Landlock and a seccomp filter (io_uring, ptrace, mounts, namespaces, sockets) are second
//! layers; limits on processes, memory, file size and spilled output apply. A step that
//! fails is reported through a close-on-exec status channel and the command does not run
//! (`SANDBOX_UNAVAILABLE`). The bubblewrap tier builds the same view with bubblewrap.
//! [`diagnose`] says which tier runs here and, if one cannot, why and what to do. A call may
//! ask for `workspace-write` or `network` with a justification; the approval service is
//! asked whatever the permission rules say, and only its allowed answer widens the sandbox.
//!
//! The same confinement and kill path serve other programs ([`ConfinedCommand`]): code
//! mode's Python runtime uses them.
//!
//! Depends on `tools-core` only.

mod bash;
mod confined;
mod diagnose;
mod file_view;
mod landlock_rules;
mod limits_hit;
mod mode_rules;
mod namespace;
mod output;
mod process;
mod sandbox;
mod seccomp;

pub use bash::{BashArgs, BashTool, ShellConfig};
pub use confined::{ConfineError, ConfinedChild, ConfinedCommand};
pub use diagnose::{Diagnosis, diagnose};
pub use mode_rules::{InvalidModeRule, ModeRule};
pub use process::{Ended, Stop};
pub use sandbox::{Escalation, ResourceLimits, SandboxMode, SandboxTier, TierCheck};
