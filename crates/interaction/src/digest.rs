//! A digest of the workspace's tracked files, so a resumed session can tell whether the
//! world changed while a question waited.

use std::fs;
use std::path::{Path, PathBuf};

use toolrail_tools_core::log::digest::DigestBuilder;

/// Folders that are not the project's own files.
const SKIPPED: &[&str] = &[".git", "target", "node_modules", ".toolrail"];

/// At most this many files (the first in path order) are digested; the count of the rest is
/// part of the digest, so adding or removing files beyond the cap still changes it.
const MAX_FILES: usize = 20_000;

/// `sha256:<hex>` over the sorted relative paths, sizes and contents of the regular files
/// under `root` (symlinks are not followed; version-control and build folders are skipped).
pub fn workspace_digest(root: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                let skipped = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| SKIPPED.contains(&name));
                if !skipped {
                    stack.push(path);
                }
            } else if kind.is_file() {
                files.push(path);
            }
        }
    }
    // Sorted before the cap, so the same tree always digests the same files.
    files.sort();
    let beyond = files.len().saturating_sub(MAX_FILES);
    files.truncate(MAX_FILES);
    let mut hasher = DigestBuilder::new();
    for path in &files {
        let relative: PathBuf = path.strip_prefix(root).unwrap_or(path).to_path_buf();
        let content = fs::read(path)?;
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update(&[0]);
        hasher.update(&(content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    hasher.update(&(beyond as u64).to_le_bytes());
    Ok(hasher.finish())
}
