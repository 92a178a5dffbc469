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
//! mode's Python runtime uses them. [`ProcessTree`] is the kill path alone, for programs
//! that are not sandboxed but must end whole (MCP servers).
//!
//! Depends on `tools-core` only.
//!
//! # Example
//!
//! A command run through the pipeline in the default `read-only` sandbox: it prints, but it
//! cannot change the workspace. Where no sandbox can be made, [`diagnose`] says why, and the
//! command does not run at all (`SANDBOX_UNAVAILABLE`).
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use toolrail_shell_tool::{BashTool, SandboxMode, ShellConfig, diagnose};
//! use toolrail_tools_core::log::MemorySink;
//! use toolrail_tools_core::{
//!     CallRequest, Pipeline, RegistryBuilder, Typed, WorkspaceRoots, pipeline::BatchControl,
//! };
//!
//! let workspace = tempfile::tempdir()?;
//! let session = tempfile::tempdir()?; // where full outputs are spilled
//! let config = ShellConfig::new(WorkspaceRoots::new([workspace.path()])?, session.path());
//! assert_eq!(config.mode, SandboxMode::ReadOnly);
//! let diagnosis = diagnose(&config.tier); // starts a trial command in the sandbox
//!
//! let bash = Typed::new(BashTool::new(config));
//! let (registry, _warnings) = RegistryBuilder::new().builtin(bash).build()?;
//! let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
//! let arguments = json!({"command": "echo hi && touch note.txt", "description": "try to write"});
//! let request = CallRequest::new("c1", 0, "bash", arguments.to_string());
//! let (tools, control) = (registry.snapshot(), BatchControl::default());
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let result = pipeline.execute_one(&tools, request, &control).await?;
//! let text = result.record().text();
//! match &diagnosis.problem {
//!     // `hi`, then touch's refusal on stderr and `[exit code 1]`.
//!     None => assert!(text.starts_with("hi\n") && text.contains("[exit code 1]"), "{text}"),
//!     Some(why) => {
//!         let code = result.record().error_code().map(|code| code.as_str());
//!         assert_eq!(code, Some("SANDBOX_UNAVAILABLE"), "{why}");
//!     }
//! }
//! assert!(!workspace.path().join("note.txt").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod background;
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
mod tree;

pub use background::{
    BackgroundConfig, EndedWithRuntime, InputReading, Key, ShellKillTool, ShellListTool,
    ShellOutputTool, ShellSummary, ShellWriteTool, Shells, ended_with_runtime,
};
pub use bash::{BashArgs, BashTool, ShellConfig};
pub use confined::{ConfineError, ConfinedChild, ConfinedCommand};
pub use diagnose::{Diagnosis, diagnose};
pub use mode_rules::{InvalidModeRule, ModeRule};
pub use process::{Ended, Stop};
pub use sandbox::{Escalation, ResourceLimits, SandboxMode, SandboxTier, TierCheck};
pub use tree::{ProcessTree, TreeChild};
