//! Deny-only guards (DESIGN §2, stage 5): each can refuse a call and nothing here can allow
//! one. `cargo xtask check-guards` keeps it so: this crate never names the pre-execute allow
//! decision and never implements the pre-execute hook trait.
//!
//! - [`WorkspacePathGuard`]: a path subject must lead inside the workspace roots, after `..`
//!   and symlinks are resolved.
//! - [`PlanModeGuard`]: while plan mode is on, only read-only tools run.
//! - [`DenyListGuard`]: (tool pattern, subject pattern, reason) entries no call may match;
//!   `permissions` enforces its deny rules a second time through it.
//!
//! Depends on `tools-core` only.
//!
//! # Example
//!
//! Two guards judging calls of a `write` tool whose subject is its `path` argument, as the
//! pipeline asks them at stage 5.
//!
//! ```
//! use serde_json::{Value, json};
//! use toolrail_policy_guards::{
//!     CallPattern, DenyEntry, DenyListGuard, WorkspacePathGuard, WorkspaceRoots,
//! };
//! use toolrail_tools_core::log::ToolSource;
//! use toolrail_tools_core::{CallView, Guard, GuardVerdict, ToolSpec, context::CallIdentity, spec::SubjectKind};
//!
//! let workspace = tempfile::tempdir()?;
//! let roots = WorkspaceRoots::new([workspace.path()])?;
//! let write = ToolSpec::builder("write", "Writes a file.", json!({"type": "object"}))
//!     .subject("path", SubjectKind::Path)
//!     .build();
//! // What a guard sees: a read-only view of the call.
//! let judge = |guard: &dyn Guard, arguments: Value| {
//!     let identity = CallIdentity {
//!         call_id: "c1".into(),
//!         index: 0,
//!         name: "write".to_owned(),
//!         turn: None,
//!         step: None,
//!         source: Some(ToolSource::Builtin),
//!         version: None,
//!     };
//!     guard.check(&CallView {
//!         identity: &identity,
//!         spec: &write,
//!         source: &ToolSource::Builtin,
//!         arguments: &arguments,
//!     })
//! };
//!
//! let paths = WorkspacePathGuard::new(roots.clone());
//! assert_eq!(judge(&paths, json!({"path": "src/new.rs"})), GuardVerdict::Abstain);
//! let escape = judge(&paths, json!({"path": "../elsewhere.txt"}));
//! let GuardVerdict::Deny { reason } = escape else { return Err("`..` must be refused".into()) };
//! assert!(reason.contains("outside the workspace"), "{reason}");
//!
//! let env_files = CallPattern::parse("write(**/.env)")?;
//! let entry = DenyEntry { pattern: env_files, reason: "secrets are edited by hand".to_owned() };
//! let deny_list = DenyListGuard::new(vec![entry], roots.as_slice().to_vec());
//! assert_eq!(judge(&deny_list, json!({"path": "config/.env"})), GuardVerdict::Deny {
//!     reason: "denied by `deny write(**/.env)`: secrets are edited by hand".to_owned(),
//! });
//! assert_eq!(judge(&deny_list, json!({"path": "config/app.toml"})), GuardVerdict::Abstain);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod deny_list;
mod path;
mod pattern;
mod plan;
mod subject;

pub use deny_list::{DenyEntry, DenyListGuard};
pub use path::WorkspacePathGuard;
pub use pattern::{
    CallPattern, PatternError, Reading, SubjectPattern, ToolPattern, path_spellings,
};
pub use plan::{EXIT_PLAN_MODE, PlanModeGuard};
pub use subject::CallSubject;
/// Where the roots live (tools-core), re-exported for users of the guards.
pub use toolrail_tools_core::{WorkspaceRoots, workspace::RootError};
