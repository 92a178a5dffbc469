//! Permission rules (DESIGN §2): `allow`, `ask` or `deny` a tool, optionally matched on the
//! call's subject with a glob — `deny bash(rm -rf *)`, `allow bash(git status*)`,
//! `ask write(src/**)`, `deny read(**/.env)`. Deny beats ask beats allow; the most specific
//! matching rule is named in the reason. Presets decide what no rule covers. An "approve for
//! session" answer is remembered (and rebuilt from the log on resume).
//!
//! A `bash` command is judged as a shell parses it (`CommandLine` in `tools-core`): each
//! simple command gets its strongest rule or the preset, and the line the strongest of those.
//! A deny or ask rule catches a command it could name — so a command whose program is known
//! only at run time (`$CURL`, `$(printf curl)`) is denied by any deny rule with a command
//! subject, and asked about by any such ask rule; an allow rule or a session approval
//! permits only a command known before run time, named whole, in a line that redirects to
//! no file.
//!
//! The rules run as a pre-execute hook ([`Permissions::hook`]); their deny rules run again
//! as a guard ([`Permissions::deny_guard`]), so no hook, approval or session key undoes a
//! deny. [`Permissions::protect`] hands the paths the deny rules for `read` name to the file
//! tools and the sandbox.
//!
//! Depends on `policy-guards` and `tools-core`.
//!
//! # Example
//!
//! A rule file read from TOML, deciding `bash` calls by their command line.
//!
//! ```
//! use serde_json::json;
//! use toolrail_permissions::{Permissions, Preset, RuleEffect, RuleFile};
//! use toolrail_tools_core::log::ToolSource;
//! use toolrail_tools_core::{
//!     CallView, ToolKind, ToolSpec, WorkspaceRoots, context::CallIdentity, spec::SubjectKind,
//! };
//!
//! let file = RuleFile::from_toml(
//!     r#"
//!     preset = "workspace"
//!     allow = ["bash(git status*)"]
//!     deny = [{ rule = "bash(rm -rf *)", reason = "deleting trees is done by hand" }]
//!     "#,
//!     "rules.toml",
//! )?;
//! let workspace = tempfile::tempdir()?;
//! let roots = WorkspaceRoots::new([workspace.path()])?;
//! let permissions = Permissions::from_file(file, Preset::Untrusted, &roots);
//! assert_eq!(permissions.preset(), Preset::Workspace, "the file's preset wins");
//!
//! let bash = ToolSpec::builder("bash", "Runs a command.", json!({"type": "object"}))
//!     .kind(ToolKind::Execute)
//!     .subject("command", SubjectKind::Command)
//!     .build();
//! let decide = |command: &str| {
//!     let identity = CallIdentity {
//!         call_id: "c1".into(),
//!         index: 0,
//!         name: "bash".to_owned(),
//!         turn: None,
//!         step: None,
//!         source: Some(ToolSource::Builtin),
//!         version: None,
//!     };
//!     permissions.decide(&CallView {
//!         identity: &identity,
//!         spec: &bash,
//!         source: &ToolSource::Builtin,
//!         arguments: &json!({ "command": command }),
//!     })
//! };
//! assert_eq!(decide("git status --short").effect, RuleEffect::Allow);
//! // Each command of a line is judged; the strongest decision wins.
//! assert_eq!(decide("git status && rm -rf build").effect, RuleEffect::Deny);
//! // No rule covers it: the `workspace` preset asks before a shell command runs.
//! assert_eq!(decide("cargo build").effect, RuleEffect::Ask);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod file;
mod policy;
mod preset;
mod rule;
mod session;

pub use file::{RuleFile, RulesError};
pub use policy::{PermissionHook, Permissions, Verdict};
pub use preset::Preset;
pub use rule::{Rule, RuleEffect, RuleOrigin};
pub use session::{RememberApprovals, SessionApprovals};
