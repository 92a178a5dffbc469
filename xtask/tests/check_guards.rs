//! The guard checks against planted fixtures: a guard crate that allows (through aliases,
//! across files) and a verdict type with an allow must fail; clean ones must pass. Each
//! fixture line that must be reported carries a `// BAD` marker, so the expected findings
//! are read from the fixtures themselves.

// clippy.toml lets `#[test]` functions unwrap; the helpers below are test code too, where a
// panic is a failed test.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use xtask::check_guards::{Finding, check_guard_crate, check_guard_verdict};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// `(file, line)` of every `// BAD` marker under `dir`, sorted.
fn marked_lines(dir: &Path) -> Vec<(PathBuf, usize)> {
    let mut marked = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let text = fs::read_to_string(&path).unwrap();
                for (index, line) in text.lines().enumerate() {
                    if line.contains("// BAD") {
                        marked.push((path.clone(), index + 1));
                    }
                }
            }
        }
    }
    marked.sort();
    marked
}

fn located(findings: &[Finding]) -> Vec<(PathBuf, usize)> {
    let mut located: Vec<(PathBuf, usize)> = findings
        .iter()
        .map(|f| (f.path.clone(), f.line.unwrap()))
        .collect();
    located.sort();
    located
}

#[test]
fn a_guard_crate_that_allows_is_rejected_at_every_marked_line() {
    let src = fixture("bad-guards/src");
    let findings = check_guard_crate(&src).unwrap();
    assert_eq!(located(&findings), marked_lines(&src), "{findings:#?}");

    let messages: Vec<String> = findings.iter().map(ToString::to_string).collect();
    let lib = "bad-guards/src/lib.rs";
    assert!(
        messages.iter().any(|m| m.contains(&format!("{lib}:11:"))
            && m.contains("hook trait `PreExecuteHook` (as `Hook`)")),
        "{messages:#?}"
    );
    assert!(
        messages.iter().any(|m| m.contains(&format!("{lib}:13:"))
            && m.contains("allow decision `PreExecuteDecision::Allow` (as `Verdict`)")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("bad-guards/src/rules/mod.rs:9:") && m.contains("(as `Again`)")),
        "{messages:#?}"
    );
}

#[test]
fn a_verdict_with_an_allow_variant_is_rejected() {
    let src = fixture("bad-guards/tools-core-src");
    let findings = check_guard_verdict(&src).unwrap();
    assert_eq!(located(&findings), marked_lines(&src));
    assert!(
        findings[0]
            .message
            .contains("GuardVerdict has a variant `Allow`"),
        "{findings:#?}"
    );
}

#[test]
fn a_clean_guard_crate_and_verdict_pass() {
    assert_eq!(
        check_guard_crate(&fixture("good-guards/src")).unwrap(),
        vec![]
    );
    assert_eq!(
        check_guard_verdict(&fixture("good-guards/tools-core-src")).unwrap(),
        vec![]
    );
}

#[test]
fn a_missing_verdict_is_reported_not_assumed() {
    // The clean guard crate has no GuardVerdict definition of its own.
    let src = fixture("good-guards/src");
    let findings = check_guard_verdict(&src).unwrap();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].line, None);
    assert!(
        findings[0]
            .message
            .contains("`pub enum GuardVerdict` was not found")
    );
}

#[test]
fn a_missing_source_directory_is_an_error() {
    let error = check_guard_crate(&fixture("no-such-crate/src")).unwrap_err();
    assert!(error.to_string().contains("could not list"), "{error}");
}

fn policy_guards_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/policy-guards/src")
}

#[test]
fn the_real_policy_guards_crate_passes() {
    assert_eq!(check_guard_crate(&policy_guards_src()).unwrap(), vec![]);
}

#[test]
fn a_violation_planted_in_a_copy_of_policy_guards_is_found_at_its_line() {
    let copy = tempfile::tempdir().unwrap();
    let mut stack = vec![(policy_guards_src(), copy.path().to_path_buf())];
    while let Some((from, to)) = stack.pop() {
        fs::create_dir_all(&to).unwrap();
        for entry in fs::read_dir(&from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                stack.push((path, target));
            } else {
                fs::copy(&path, &target).unwrap();
            }
        }
    }
    let plan = copy.path().join("plan.rs");
    let mut text = fs::read_to_string(&plan).unwrap();
    let planted_line = text.lines().count() + 2;
    text.push_str(
        "\nfn sneak() -> toolrail_tools_core::PreExecuteDecision { toolrail_tools_core::PreExecuteDecision::Allow }\n",
    );
    fs::write(&plan, text).unwrap();
    let findings = check_guard_crate(copy.path()).unwrap();
    assert_eq!(
        located(&findings),
        vec![(plan, planted_line)],
        "{findings:#?}"
    );
}
