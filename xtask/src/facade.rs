//! `cargo xtask facade`: each heavy part of the `toolrail` crate is really removable. With
//! every default feature off, `cargo tree` of the facade must show none of the heavy
//! dependencies, and the facade must still build.

use anyhow::{Context, Result, bail};

use crate::workspace;

/// What each default feature brings, by the crate that shows it is there.
pub const HEAVY: &[(&str, &str)] = &[
    ("postgres", "postgres"),
    ("sqlite", "rusqlite"),
    ("code-js", "rquickjs"),
    ("mcp", "rmcp"),
    ("providers", "reqwest"),
];

/// The heavy crates `tree` (the output of `cargo tree --prefix none`) still holds.
pub fn left_in(tree: &str) -> Vec<&'static str> {
    HEAVY
        .iter()
        .filter(|(_, krate)| {
            tree.lines()
                .any(|line| line.split_whitespace().next() == Some(*krate))
        })
        .map(|(_, krate)| *krate)
        .collect()
}

/// Runs the check on the real workspace: `cargo tree` of the facade without default
/// features must hold none of [`HEAVY`]'s crates, and `cargo check` of it must pass.
pub fn run() -> Result<()> {
    let output = workspace::cargo()
        .args([
            "tree",
            "-p",
            "toolrail",
            "--no-default-features",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .context("running cargo tree")?;
    if !output.status.success() {
        bail!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tree = String::from_utf8_lossy(&output.stdout);
    let left = left_in(&tree);
    if !left.is_empty() {
        bail!(
            "`cargo tree -p toolrail --no-default-features` still holds {}: a feature gate leaks (each must come only with its feature: {})",
            left.join(", "),
            HEAVY
                .iter()
                .map(|(feature, krate)| format!("{feature} → {krate}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let status = workspace::cargo()
        .args(["check", "-p", "toolrail", "--no-default-features"])
        .status()
        .context("running cargo check")?;
    if !status.success() {
        bail!("`cargo check -p toolrail --no-default-features` failed");
    }
    println!(
        "facade: without default features, none of {} is built",
        HEAVY
            .iter()
            .map(|(_, krate)| *krate)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heavy_crate_anywhere_in_the_tree_is_found_and_a_lookalike_is_not() {
        let tree = "toolrail v0.1.0 (/w/crates/toolrail)\nserde v1.0.0\nrquickjs v0.14.0\nrmcp-macros v1.0.0\n";
        assert_eq!(left_in(tree), ["rquickjs"]);
        assert!(left_in("toolrail v0.1.0\nserde v1.0.0\n").is_empty());
    }
}
