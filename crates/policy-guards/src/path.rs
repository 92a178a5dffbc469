//! The workspace path guard: a call whose path subject leads outside the allowed roots, by
//! `..`, an absolute path or a symlink, is refused before it starts.

use toolrail_tools_core::{CallView, Guard, GuardVerdict, WorkspaceRoots};

/// Refuses calls whose path subject leads outside the workspace. Calls of tools without a
/// path subject pass (other guards and the sandbox cover them).
#[derive(Clone, Debug)]
pub struct WorkspacePathGuard {
    roots: WorkspaceRoots,
}

impl WorkspacePathGuard {
    /// A guard confining path subjects to `roots`.
    pub fn new(roots: WorkspaceRoots) -> Self {
        Self { roots }
    }
}

impl Guard for WorkspacePathGuard {
    fn name(&self) -> &str {
        "workspace-paths"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        let Some(subject) = call.subject() else {
            return GuardVerdict::Abstain;
        };
        if !subject.kind.separates_on_slash() {
            return GuardVerdict::Abstain;
        }
        match self.roots.confine(subject.text) {
            Ok(_) => GuardVerdict::Abstain,
            Err(real) => GuardVerdict::Deny {
                reason: format!(
                    "`{}` leads to `{}`, outside the workspace ({}); use a path inside it",
                    subject.text,
                    real.display(),
                    self.roots
                        .as_slice()
                        .iter()
                        .map(|root| root.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        }
    }
}
