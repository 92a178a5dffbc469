//! The workspace path guard: a call whose path subject leads outside the allowed roots, by
//! `..`, an absolute path or a symlink, is refused before it starts.

use std::path::{Path, PathBuf};

use toolrail_tools_core::{CallView, Guard, GuardVerdict};

use crate::pattern::resolve;

/// A workspace root that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("workspace root `{root}` cannot be used: {source}")]
pub struct RootError {
    pub root: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The folders a workspace may touch, resolved once (symlinks and all), so a check compares
/// real paths with real paths.
#[derive(Clone, Debug)]
pub struct WorkspaceRoots {
    roots: Vec<PathBuf>,
}

impl WorkspaceRoots {
    /// The first root is where relative paths start. Every root must exist.
    pub fn new(roots: impl IntoIterator<Item = impl AsRef<Path>>) -> Result<Self, RootError> {
        let roots = roots
            .into_iter()
            .map(|root| {
                let root = root.as_ref();
                std::fs::canonicalize(root).map_err(|source| RootError {
                    root: root.to_path_buf(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { roots })
    }

    pub fn as_slice(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Where `path` really leads (relative paths start at the first root), or `None` when that
    /// is outside every root. With no roots at all nothing is inside.
    pub fn confine(&self, path: &str) -> Result<PathBuf, PathBuf> {
        let written = Path::new(path);
        let anchored = match (written.is_absolute(), self.roots.first()) {
            (true, _) | (false, None) => written.to_path_buf(),
            (false, Some(root)) => root.join(written),
        };
        let real = resolve(&anchored);
        if self.roots.iter().any(|root| real.starts_with(root)) {
            Ok(real)
        } else {
            Err(real)
        }
    }
}

/// Refuses calls whose path subject leads outside the workspace. Calls of tools without a
/// path subject pass (other guards and the sandbox cover them).
#[derive(Clone, Debug)]
pub struct WorkspacePathGuard {
    roots: WorkspaceRoots,
}

impl WorkspacePathGuard {
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
