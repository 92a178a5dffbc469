//! `cargo xtask check-guards`: guards can only refuse. The type system says so in
//! tools-core (`GuardVerdict` has no allow); this check keeps it that way, and keeps guard
//! crates from reaching for the one stage that can allow (pre-execute hooks).
//!
//! Both checks take directories so tests can point them at fixtures.

mod decision;
mod lexer;
mod verdict;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

pub use decision::check_guard_crate;
pub use verdict::check_guard_verdict;

use crate::workspace::{self, Package};

/// The conventional home of the deny-only guards (DESIGN §2).
const POLICY_GUARDS_DIR: &str = "crates/policy-guards";
/// `[package.metadata.toolrail] role = "guards"` marks any other crate as a guard crate.
const GUARDS_ROLE: &str = "guards";

/// A rule broken at a place in the sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The file the rule is broken in, or the directory for a finding about a whole crate.
    pub path: PathBuf,
    /// 1-based; `None` when the finding is about a whole directory.
    pub line: Option<usize>,
    /// Which rule is broken, and how.
    pub message: String,
}

impl Finding {
    fn in_dir(dir: &Path, message: String) -> Self {
        Finding {
            path: dir.to_path_buf(),
            line: None,
            message,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Paths under the workspace are shown relative to it, as a developer types them.
        let root = workspace::root();
        let path = self
            .path
            .strip_prefix(&root)
            .unwrap_or(&self.path)
            .display();
        match self.line {
            Some(line) => write!(f, "check-guards: {path}:{line}: {}", self.message),
            None => write!(f, "check-guards: {path}: {}", self.message),
        }
    }
}

/// One tokenized source file.
struct SourceFile {
    path: PathBuf,
    tokens: Vec<lexer::Token>,
}

impl SourceFile {
    fn finding(&self, line: usize, message: String) -> Finding {
        Finding {
            path: self.path.clone(),
            line: Some(line),
            message,
        }
    }
}

/// Every `.rs` file under `dir`, recursively, in a stable order.
fn rust_sources(dir: &Path) -> Result<Vec<SourceFile>> {
    let mut paths = Vec::new();
    collect_rs(dir, &mut paths)?;
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path)
                .with_context(|| format!("could not read {}", path.display()))?;
            Ok(SourceFile {
                tokens: lexer::tokenize(&text),
                path,
            })
        })
        .collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = fs::read_dir(dir).with_context(|| format!("could not list {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("could not list {}", dir.display()))?
            .path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The guard crates' directories: `crates/policy-guards` when it exists, plus every
/// package whose metadata declares the guards role.
pub fn guard_crate_dirs(workspace_root: &Path, packages: &[Package]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = packages
        .iter()
        .filter(|package| package.role.as_deref() == Some(GUARDS_ROLE))
        .map(|package| package.dir.clone())
        .collect();
    let conventional = workspace_root.join(POLICY_GUARDS_DIR);
    if conventional.is_dir() {
        dirs.push(conventional);
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Runs both checks on the real workspace.
pub fn run() -> Result<()> {
    let root = workspace::root();
    let mut findings = check_guard_verdict(&root.join("crates/tools-core/src"))?;
    let guard_crates = guard_crate_dirs(&root, &workspace::packages()?);
    for dir in &guard_crates {
        findings.extend(check_guard_crate(&dir.join("src"))?);
    }
    if findings.is_empty() {
        let crates: Vec<String> = guard_crates
            .iter()
            .map(|dir| dir.strip_prefix(&root).unwrap_or(dir).display().to_string())
            .collect();
        println!(
            "check-guards: GuardVerdict is Deny/Abstain only; guard crates that never allow: {}",
            if crates.is_empty() {
                "none yet".to_owned()
            } else {
                crates.join(", ")
            }
        );
        return Ok(());
    }
    for finding in &findings {
        eprintln!("{finding}");
    }
    bail!(
        "check-guards: {} finding(s): guards must only refuse",
        findings.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_crates_come_from_the_role_and_the_conventional_dir() {
        let root = workspace::root();
        let package = |dir: &str, role: Option<&str>| Package {
            name: format!("toolrail-{dir}"),
            dir: root.join("crates").join(dir),
            dependencies: vec![],
            benches: vec![],
            bench_features: vec![],
            role: role.map(str::to_owned),
        };
        let packages = [
            package("sandbox-guards", Some("guards")),
            package("cli", None),
        ];
        let dirs = guard_crate_dirs(&root, &packages);
        assert!(dirs.contains(&root.join("crates/sandbox-guards")));
        assert!(!dirs.contains(&root.join("crates/cli")));
        assert_eq!(
            dirs.contains(&root.join(POLICY_GUARDS_DIR)),
            root.join(POLICY_GUARDS_DIR).is_dir()
        );
    }
}
