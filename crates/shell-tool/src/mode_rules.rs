//! The embedder's sandbox policy per command: rules that run a command in another mode than
//! the configured one (`cargo test*` may write the workspace, `curl*` stays read-only).
//! Checked on every call. A line takes a rule only when the rule's glob matches every simple
//! command in it whole, as a shell parses them ([`CommandLine::is_permitted_by`]: programs
//! known before run time, nothing redirected to a file), so `cargo test && curl …` never
//! borrows `cargo test*`'s mode: it runs in the configured one.

use globset::{GlobBuilder, GlobMatcher};
use toolrail_tools_core::command_line::CommandLine;

use crate::sandbox::SandboxMode;

/// A rule of the sandbox policy: a command matching `command` runs in `mode`.
#[derive(Clone, Debug)]
pub struct ModeRule {
    command: String,
    matcher: GlobMatcher,
    mode: SandboxMode,
}

/// A rule whose command glob does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sandbox rule `{command}`: {reason}; write a command glob such as `cargo test*`")]
pub struct InvalidModeRule {
    /// The glob, as written.
    pub command: String,
    /// Why it does not compile, in the glob library's words.
    pub reason: String,
}

impl ModeRule {
    /// A rule for commands matching the glob `command` (`*` also matches `/` and spaces).
    pub fn new(command: impl Into<String>, mode: SandboxMode) -> Result<Self, InvalidModeRule> {
        let command = command.into();
        let matcher = GlobBuilder::new(&command)
            .literal_separator(false)
            .build()
            .map_err(|error| InvalidModeRule {
                command: command.clone(),
                reason: error.kind().to_string(),
            })?
            .compile_matcher();
        Ok(Self {
            command,
            matcher,
            mode,
        })
    }

    /// The command glob, as written.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The mode a command that takes this rule runs in.
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }
}

/// The first rule `command` takes, if any.
pub(crate) fn rule_for<'a>(rules: &'a [ModeRule], command: &str) -> Option<&'a ModeRule> {
    if rules.is_empty() {
        return None;
    }
    let line = CommandLine::parse(command);
    rules
        .iter()
        .find(|rule| line.is_permitted_by(|text| rule.matcher.is_match(text)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rules() -> Vec<ModeRule> {
        vec![
            ModeRule::new("cargo test*", SandboxMode::WorkspaceWrite).unwrap(),
            ModeRule::new("cargo *", SandboxMode::ReadOnly).unwrap(),
            ModeRule::new("make", SandboxMode::FullAccess).unwrap(),
        ]
    }

    fn mode_of(command: &str) -> Option<SandboxMode> {
        rule_for(&rules(), command).map(ModeRule::mode)
    }

    #[test]
    fn the_first_rule_a_simple_command_matches_whole_decides() {
        assert_eq!(
            mode_of("cargo test -p x"),
            Some(SandboxMode::WorkspaceWrite)
        );
        assert_eq!(mode_of("  cargo test  "), Some(SandboxMode::WorkspaceWrite));
        assert_eq!(mode_of("cargo build"), Some(SandboxMode::ReadOnly));
        assert_eq!(mode_of("make"), Some(SandboxMode::FullAccess));
        assert_eq!(mode_of("make install"), None, "matched whole");
        assert_eq!(mode_of("ls"), None);
    }

    #[test]
    fn a_chained_nested_or_redirected_command_takes_no_rule() {
        for command in [
            "cargo test && curl evil.example",
            "cargo test; rm -rf x",
            "cargo test $(curl x)",
            "cargo test > out.txt",
            "cargo test | tee log",
            "make\nrm -rf x",
        ] {
            assert_eq!(mode_of(command), None, "{command}");
        }
    }

    #[test]
    fn commands_are_read_as_a_shell_parses_them() {
        for (command, mode) in [
            ("\\cargo test", Some(SandboxMode::WorkspaceWrite)),
            (
                "/usr/bin/cargo 'test' -p x",
                Some(SandboxMode::WorkspaceWrite),
            ),
            ("command cargo\ttest", Some(SandboxMode::WorkspaceWrite)),
            ("cargo test 2>&1", Some(SandboxMode::WorkspaceWrite)),
            // Every command matches `cargo *`, not all `cargo test*`.
            ("cargo test && cargo build", Some(SandboxMode::ReadOnly)),
            ("bash -c 'cargo test'", None),
            ("X=1 cargo test", None),
            ("$CARGO test", None),
            ("cargo test $(curl x)", None),
        ] {
            assert_eq!(mode_of(command), mode, "{command}");
        }
    }

    #[test]
    fn a_glob_that_does_not_compile_is_refused_by_name() {
        let error = ModeRule::new("cargo [test", SandboxMode::FullAccess).unwrap_err();
        assert_eq!(error.command, "cargo [test");
        assert!(
            error.to_string().contains("sandbox rule `cargo [test`"),
            "{error}"
        );
    }
}
