//! Patterns over tool names and call subjects, shared by the deny-list guard and the
//! permission rules (which build on this crate), so a rule and its second enforcement match
//! exactly the same calls.
//!
//! A tool pattern is a glob over the tool's name (`bash`, `mcp__github__*`). A subject pattern
//! is a glob over the call's subject: over a path with `/` as a separator (`src/*` stays in one
//! folder, `src/**` crosses folders), over a command, URL or text as plain text (`git status*`
//! matches `git status --short`).
//!
//! A command subject is read as a shell parses it ([`CommandLine`]): a glob is matched against
//! each simple command rendered canonically (basename program and arguments after quote
//! removal, single spaces), so `deny bash(curl *)` names `/usr/bin/curl x`, `c''url x` and
//! `bash -c 'curl x'` alike. What restricts catches a line when it could name any of its
//! commands; what permits needs every command known and named.

use std::fmt;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use toolrail_tools_core::{
    CallView,
    command_line::SimpleCommand,
    spec::SubjectKind,
    workspace::{lexical_clean, resolve},
};

use crate::subject::CallSubject;

/// A pattern that is not a valid glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{pattern}` is not a valid pattern: {why}")]
pub struct PatternError {
    /// The text refused: a glob, a whole `tool(subject)` pattern, or a whole rule.
    pub pattern: String,
    /// What is wrong with it, often with how to write it instead.
    pub why: String,
}

fn compile(pattern: &str, literal_separator: bool) -> Result<GlobMatcher, PatternError> {
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .backslash_escape(true)
        .empty_alternates(true)
        .build()
        .map(|glob: Glob| glob.compile_matcher())
        .map_err(|error| PatternError {
            pattern: pattern.to_owned(),
            why: error.kind().to_string(),
        })
}

/// A glob over plain text, kept with the text it was written as: what a tool pattern is,
/// and how a subject pattern reads commands, URLs and text.
#[derive(Clone, Debug)]
struct TextGlob {
    text: String,
    matcher: GlobMatcher,
}

impl TextGlob {
    fn new(pattern: &str) -> Result<Self, PatternError> {
        Ok(Self {
            text: pattern.to_owned(),
            matcher: compile(pattern, false)?,
        })
    }

    fn is_match(&self, text: &str) -> bool {
        self.matcher.is_match(text)
    }

    fn as_str(&self) -> &str {
        &self.text
    }

    /// How many literal characters the pattern has.
    fn specificity(&self) -> usize {
        literal_len(&self.text)
    }
}

/// A glob over tool names.
#[derive(Clone, Debug)]
pub struct ToolPattern(TextGlob);

impl ToolPattern {
    /// Compiles a glob over tool names (`*` matches any run of characters); an empty pattern
    /// is an error.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        if pattern.trim().is_empty() {
            return Err(PatternError {
                pattern: pattern.to_owned(),
                why: "a tool pattern cannot be empty (use `*` for every tool)".to_owned(),
            });
        }
        TextGlob::new(pattern).map(Self)
    }

    /// Whether the tool named `tool` matches.
    pub fn matches(&self, tool: &str) -> bool {
        self.0.is_match(tool)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// How many literal characters the pattern has: a pattern naming a tool exactly is more
    /// specific than one with wildcards.
    pub fn specificity(&self) -> usize {
        self.0.specificity()
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a pattern reads a command line. A shell command can chain others (`;`, `&&`, `|`,
/// a newline, `$(…)`, `bash -c '…'`) or redirect (`>`, `<`), so `git status*` must not let
/// `git status; rm -rf ~` through, while `rm -rf *` must still catch `cd / && rm -rf .`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// For what lets a call through (allow rules, remembered approvals): every simple command
    /// must be known before run time and matched whole, and nothing may be redirected to or
    /// from a file (`/dev/null` and `2>&1` aside).
    Permit,
    /// For what holds a call back (deny and ask rules): the whole line, or any simple command
    /// in it as the pattern could match it once what is unknown is filled in — so a command
    /// whose program is known only at run time (`$CURL`, `$(printf curl)`) is caught by every
    /// such pattern.
    Restrict,
}

/// A glob over a call's subject, compiled for both kinds of subject: paths (with `/` as a
/// separator) and plain text.
#[derive(Clone, Debug)]
pub struct SubjectPattern {
    as_text: TextGlob,
    as_path: GlobMatcher,
    /// The literal text before the first wildcard: what a partly unknown command's known
    /// prefix is compared with.
    literal_prefix: String,
}

impl SubjectPattern {
    /// Compiles a glob over subjects, once as a path pattern (a leading `./` ignored) and once
    /// as plain text.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        Ok(Self {
            as_path: compile(&normalize_path_pattern(pattern), true)?,
            as_text: TextGlob::new(pattern)?,
            literal_prefix: literal_prefix(pattern),
        })
    }

    /// Whether the subject matches. A path subject matches when any of its spellings
    /// ([`path_spellings`]) does, so `.env`, `./.env`, `<root>/.env` and a symlink pointing at
    /// it are the same file to a rule. A command is read as [`Reading`] says.
    pub fn matches(&self, subject: &CallSubject<'_>, roots: &[PathBuf], reading: Reading) -> bool {
        let text = subject.subject().text;
        match (subject.subject().kind, subject.command_line()) {
            (SubjectKind::Path, _) => path_spellings(text, roots)
                .iter()
                .any(|spelling| self.as_path.is_match(spelling)),
            (SubjectKind::Command, Some(line)) => match reading {
                Reading::Permit => line.is_permitted_by(|command| self.as_text.is_match(command)),
                Reading::Restrict => {
                    self.matches_whole(text)
                        || line
                            .commands()
                            .iter()
                            .any(|command| self.restricts(command))
                }
            },
            (SubjectKind::Command | SubjectKind::Url | SubjectKind::Text, _) => {
                self.as_text.is_match(text.trim())
            }
        }
    }

    /// Whether the pattern could name `command` (for what restricts): any of its views
    /// (`nice -n 5 curl x`, `curl x`) could match once what is unknown is filled in.
    pub fn restricts(&self, command: &SimpleCommand) -> bool {
        command
            .views()
            .iter()
            .any(|view| view.could_match(|text| self.as_text.is_match(text), &self.literal_prefix))
    }

    /// Whether the pattern names `command` whole (for what permits): the command is known
    /// before run time and its [`permit_text`](SimpleCommand::permit_text) matches.
    pub fn permits(&self, command: &SimpleCommand) -> bool {
        command
            .permit_text()
            .is_some_and(|text| self.as_text.is_match(text))
    }

    /// Whether the pattern matches a command line's raw text, trimmed (what restricts also
    /// catches, as it always did).
    pub fn matches_whole(&self, line: &str) -> bool {
        self.as_text.is_match(line.trim())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        self.as_text.as_str()
    }

    /// How many literal characters the pattern has: a subject named exactly is more specific
    /// than one with wildcards.
    pub fn specificity(&self) -> usize {
        self.as_text.specificity()
    }
}

impl fmt::Display for SubjectPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool pattern with an optional subject pattern, written `tool` or `tool(subject)`:
/// `bash(git status*)`, `write(src/**)`, `mcp__github__*`.
#[derive(Clone, Debug)]
pub struct CallPattern {
    /// The tools whose calls the pattern covers.
    pub tool: ToolPattern,
    /// Which of their calls; `None` covers every call of those tools, with a subject or without.
    pub subject: Option<SubjectPattern>,
}

impl CallPattern {
    /// Reads `tool` or `tool(subject)`; the subject runs to the last `)`, so it may hold
    /// parentheses of its own.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let text = text.trim();
        let invalid = |why: &str| PatternError {
            pattern: text.to_owned(),
            why: why.to_owned(),
        };
        let (tool, subject) = match text.split_once('(') {
            None => (text, None),
            Some((tool, rest)) => {
                let subject = rest
                    .strip_suffix(')')
                    .ok_or_else(|| invalid("a subject opened with `(` must end with `)`"))?;
                if subject.trim().is_empty() {
                    return Err(invalid(
                        "the subject in `()` is empty; write the tool alone to cover all its calls",
                    ));
                }
                (tool.trim(), Some(subject))
            }
        };
        if tool.chars().any(char::is_whitespace) {
            return Err(invalid(
                "a tool name has no spaces; write `tool(subject)`, e.g. `bash(git status*)`",
            ));
        }
        Ok(Self {
            tool: ToolPattern::new(tool)?,
            subject: subject.map(SubjectPattern::new).transpose()?,
        })
    }

    /// Whether the pattern covers the call. A pattern with a subject covers only calls that
    /// have one; a call whose tool declares no subject is not matched by it.
    pub fn matches(&self, call: &CallView<'_>, roots: &[PathBuf], reading: Reading) -> bool {
        self.matches_subject(
            call.spec.name(),
            CallSubject::of(call).as_ref(),
            roots,
            reading,
        )
    }

    /// [`matches`](Self::matches) for a subject already read (so a command is parsed once
    /// for many patterns).
    pub fn matches_subject(
        &self,
        tool: &str,
        subject: Option<&CallSubject<'_>>,
        roots: &[PathBuf],
        reading: Reading,
    ) -> bool {
        if !self.tool.matches(tool) {
            return false;
        }
        match (&self.subject, subject) {
            (None, _) => true,
            (Some(pattern), Some(subject)) => pattern.matches(subject, roots, reading),
            (Some(_), None) => false,
        }
    }

    /// Whether the pattern covers one simple command of a call's command line, for decisions
    /// taken per command: a pattern without a subject covers every command of its tool; what
    /// permits must name the command whole in a line without file redirections; what
    /// restricts covers it if it could name it, or if it matches the whole line.
    pub fn matches_command(
        &self,
        tool: &str,
        subject: &CallSubject<'_>,
        command: &SimpleCommand,
        reading: Reading,
    ) -> bool {
        if !self.tool.matches(tool) {
            return false;
        }
        let Some(pattern) = &self.subject else {
            return true;
        };
        let Some(line) = subject.command_line() else {
            return false;
        };
        match reading {
            Reading::Permit => line.file_redirections().is_empty() && pattern.permits(command),
            Reading::Restrict => {
                pattern.restricts(command) || pattern.matches_whole(subject.subject().text)
            }
        }
    }

    /// Orders patterns from general to specific: a subject beats none, then more literal
    /// characters beat fewer.
    pub fn specificity(&self) -> (bool, usize) {
        let subject = self.subject.as_ref().map_or(0, SubjectPattern::specificity);
        (self.subject.is_some(), subject + self.tool.specificity())
    }
}

impl fmt::Display for CallPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Some(subject) => write!(f, "{}({subject})", self.tool),
            None => write!(f, "{}", self.tool),
        }
    }
}

/// The literal text of a glob before its first wildcard, escapes removed.
fn literal_prefix(pattern: &str) -> String {
    let mut prefix = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' | '{' => break,
            '\\' => match chars.next() {
                Some(escaped) => prefix.push(escaped),
                None => break,
            },
            literal => prefix.push(literal),
        }
    }
    prefix
}

fn literal_len(pattern: &str) -> usize {
    pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?' | '[' | ']' | '{' | '}'))
        .count()
}

/// `./src/**` and `src/**` mean the same folder.
fn normalize_path_pattern(pattern: &str) -> String {
    pattern.trim_start_matches("./").to_owned()
}

/// Every spelling of a path a rule should see: as written (cleaned of `.` and `..`), relative
/// to each workspace root it lies in, and the same for where it really leads once symlinks
/// are resolved.
pub fn path_spellings(text: &str, roots: &[PathBuf]) -> Vec<String> {
    let written = Path::new(text);
    let mut spellings = Vec::with_capacity(4);
    let mut add = |path: &Path| {
        for spelling in relative_spellings(path, roots) {
            if !spellings.contains(&spelling) {
                spellings.push(spelling);
            }
        }
    };
    add(&lexical_clean(written));
    let anchored = match (written.is_absolute(), roots.first()) {
        (true, _) | (false, None) => written.to_path_buf(),
        (false, Some(root)) => root.join(written),
    };
    add(&resolve(&anchored));
    spellings
}

fn relative_spellings(path: &Path, roots: &[PathBuf]) -> Vec<String> {
    let mut spellings = vec![display(path)];
    for root in roots {
        if let Ok(inside) = path.strip_prefix(root) {
            spellings.push(display(inside));
        }
    }
    spellings
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use toolrail_tools_core::Subject;

    use super::*;

    fn path_subject(text: &str) -> CallSubject<'_> {
        CallSubject::new(Subject {
            kind: SubjectKind::Path,
            text,
        })
    }

    fn command(text: &str) -> CallSubject<'_> {
        CallSubject::new(Subject {
            kind: SubjectKind::Command,
            text,
        })
    }

    #[test]
    fn path_globs_respect_folders_and_command_globs_do_not() {
        let one_level = SubjectPattern::new("src/*").unwrap();
        assert!(one_level.matches(&path_subject("src/main.rs"), &[], Reading::Permit));
        assert!(!one_level.matches(&path_subject("src/a/b.rs"), &[], Reading::Permit));
        let deep = SubjectPattern::new("src/**").unwrap();
        assert!(deep.matches(&path_subject("src/a/b.rs"), &[], Reading::Permit));
        assert!(deep.matches(&path_subject("./src/a/../b.rs"), &[], Reading::Permit));
        let rm = SubjectPattern::new("rm -rf *").unwrap();
        assert!(rm.matches(&command("rm -rf /tmp/x"), &[], Reading::Restrict));
        assert!(!rm.matches(&command("rm -r /tmp/x"), &[], Reading::Restrict));
    }

    #[test]
    fn absolute_paths_match_relative_rules_inside_a_root() {
        let env = SubjectPattern::new("**/.env").unwrap();
        let roots = [PathBuf::from("/work/project")];
        assert!(env.matches(
            &path_subject("/work/project/.env"),
            &roots,
            Reading::Restrict
        ));
        assert!(env.matches(&path_subject(".env"), &roots, Reading::Restrict));
        let src = SubjectPattern::new("src/**").unwrap();
        assert!(src.matches(
            &path_subject("/work/project/src/x.rs"),
            &roots,
            Reading::Permit
        ));
    }

    #[test]
    fn chained_commands_are_never_permitted_and_always_restricted() {
        let status = SubjectPattern::new("git status*").unwrap();
        let rm = SubjectPattern::new("rm -rf *").unwrap();
        assert!(status.matches(&command("git status --short"), &[], Reading::Permit));
        for chained in [
            "git status; rm -rf ~",
            "git status && curl x | sh",
            "git status\nrm -rf ~",
            "git status $(rm -rf ~)",
            "git status `rm -rf ~`",
            "git status > /etc/passwd",
        ] {
            assert!(
                !status.matches(&command(chained), &[], Reading::Permit),
                "{chained}"
            );
        }
        for chained in [
            "cd / && rm -rf .",
            "ls; rm -rf x",
            "echo $(rm -rf y)",
            "a | rm -rf z",
        ] {
            assert!(
                rm.matches(&command(chained), &[], Reading::Restrict),
                "{chained}"
            );
        }
        assert!(!rm.matches(&command("cd / && rm -r ."), &[], Reading::Restrict));
    }

    #[test]
    fn commands_are_matched_as_a_shell_parses_them() {
        let curl = SubjectPattern::new("curl *").unwrap();
        for caught in [
            "/usr/bin/c''url x",
            "bash -c 'curl x'",
            "echo $(curl x)",
            "nice -n 5 curl x",
            // The program is known only at run time: any pattern could name it.
            "$X y",
            "$(printf curl) x",
        ] {
            assert!(
                curl.matches(&command(caught), &[], Reading::Restrict),
                "{caught}"
            );
        }
        for spared in ["echo curl", "grep curl file", "echo $HOME", "curl"] {
            assert!(
                !curl.matches(&command(spared), &[], Reading::Restrict),
                "{spared}"
            );
        }
        assert!(curl.matches(&command("\\curl  x"), &[], Reading::Permit));
        for unpermitted in [
            "X=1 curl x",
            "curl $U",
            "curl x > page",
            "$X y",
            "xargs curl",
        ] {
            assert!(
                !curl.matches(&command(unpermitted), &[], Reading::Permit),
                "{unpermitted}"
            );
        }
        // A known prefix that agrees with the pattern's literal text: it could match.
        let push = SubjectPattern::new("git push*").unwrap();
        assert!(push.matches(&command("git $(echo push)"), &[], Reading::Restrict));
        assert!(!push.matches(&command("git log $(echo x)"), &[], Reading::Restrict));
        assert_eq!(literal_prefix(r"git \* push*"), "git * push");
        assert_eq!(literal_prefix("{curl,wget} *"), "");
    }

    #[test]
    fn call_patterns_read_tool_and_subject() {
        let pattern = CallPattern::parse(" bash(echo (hi) *) ").unwrap();
        assert_eq!(pattern.tool.as_str(), "bash");
        assert_eq!(pattern.subject.unwrap().as_str(), "echo (hi) *");
        assert!(CallPattern::parse("read").unwrap().subject.is_none());
        for bad in ["bash(", "bash()", "git status", "(x)", "src/["] {
            assert!(CallPattern::parse(bad).is_err(), "{bad}");
        }
        let exact = CallPattern::parse("bash(git status)").unwrap();
        let wide = CallPattern::parse("bash(git *)").unwrap();
        let bare = CallPattern::parse("bash").unwrap();
        assert!(exact.specificity() > wide.specificity());
        assert!(wide.specificity() > bare.specificity());
    }

    #[test]
    fn bad_globs_are_errors_naming_the_pattern() {
        let error = SubjectPattern::new("src/[").unwrap_err();
        assert_eq!(error.pattern, "src/[");
        assert!(ToolPattern::new(" ").is_err());
    }
}
