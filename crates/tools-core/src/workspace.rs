//! Workspace roots and where a path really leads. Shared by the guards that confine calls
//! and the file tools that act, so both agree on what "inside the workspace" means.

use std::path::{Component, Path, PathBuf};

/// A workspace root that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("workspace root `{root}` cannot be used: {source}")]
pub struct RootError {
    /// The root as it was given.
    pub root: PathBuf,
    /// Why it could not be resolved (it does not exist, or cannot be reached).
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

    /// The roots, resolved, in the order given; the first is where relative paths start.
    pub fn as_slice(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Where `path` really leads (relative paths start at the first root), or `Err` with
    /// where it really leads when that is outside every root. With no roots at all nothing
    /// is inside.
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

/// Removes `.` and folds `..` into the component before it, without touching the disk.
pub fn lexical_clean(path: &Path) -> PathBuf {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                let folded = matches!(clean.components().next_back(), Some(Component::Normal(_)));
                if folded {
                    clean.pop();
                } else if !clean.has_root() {
                    clean.push("..");
                }
            }
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => {
                clean.push(component)
            }
        }
    }
    clean
}

/// Where an absolute path really leads: each existing prefix is resolved with its symlinks
/// before the next component is applied, so `link/..` goes up from the link's target, as the
/// kernel would. Components that do not exist (a file about to be written) are kept as they
/// are; nothing that does not exist can be a symlink.
pub fn resolve(path: &Path) -> PathBuf {
    let mut resolved = PathBuf::new();
    let mut exists = true;
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                resolved.pop();
                // Back above a missing component the path may exist again, symlinks and all
                // (`missing/../link/x`): resolve it again rather than keep the text.
                if !exists && let Ok(real) = std::fs::canonicalize(&resolved) {
                    resolved = real;
                    exists = true;
                }
            }
            Component::Prefix(_) | Component::RootDir => resolved.push(component),
            Component::Normal(name) => {
                resolved.push(name);
                if exists {
                    match std::fs::canonicalize(&resolved) {
                        Ok(real) => resolved = real,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_clean_folds_dots() {
        assert_eq!(lexical_clean(Path::new("./a/b/../c")), PathBuf::from("a/c"));
        assert_eq!(lexical_clean(Path::new("../a")), PathBuf::from("../a"));
        assert_eq!(lexical_clean(Path::new("/../a")), PathBuf::from("/a"));
    }
}
