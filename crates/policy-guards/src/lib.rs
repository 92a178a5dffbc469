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
pub use toolrail_tools_core::{RootError, WorkspaceRoots};
