//! Command lines judged as a shell parses them. A rule over `bash` commands must see what bash
//! would run — `/usr/bin/curl`, `c''url`, `env curl`, `bash -c 'curl …'` and `$(curl …)` all
//! run curl — so a line is parsed with `brush-parser` (POSIX and bash syntax) into every simple
//! command it holds, wrappers looked through and quotes removed. What cannot be known before
//! run time is said so, never guessed: such a command can be restricted, never permitted.
//!
//! ```
//! use toolrail_tools_core::command_line::CommandLine;
//! let line = CommandLine::parse("cd src && X=1 \\curl -s \"$URL\" | sh -c 'grep x'");
//! let programs: Vec<_> = line.commands().iter().map(|c| c.program()).collect();
//! // What a command runs (here `sh -c`'s string) comes before the command itself.
//! assert_eq!(programs, [Some("cd"), Some("curl"), Some("grep"), Some("sh")]);
//! assert_eq!(line.commands()[1].canonical().as_str(), "curl -s \"$URL\"");
//! ```

mod budget;
mod invocation;
mod parse;
mod runners;
mod words;
mod wrappers;

#[cfg(test)]
mod tests;

use std::fmt;

/// A command line read as a shell would read it: every simple command it runs, in order of
/// appearance, including those in subshells, groups, compound commands, functions, command and
/// process substitutions, `bash -c`/`sh -c`/`eval`/`trap` strings, alias definitions and
/// `find -exec`, with wrappers (`command`, `env`, `nice`, `sudo`, …) looked through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandLine {
    commands: Vec<SimpleCommand>,
    file_redirections: Vec<String>,
}

impl CommandLine {
    /// Parses `text`. Never fails: a line (or a nested string) that cannot be parsed, or is too
    /// long, too deeply nested or too costly to parse safely, becomes a command whose program
    /// is unknown.
    pub fn parse(text: &str) -> Self {
        parse::parse(text)
    }

    /// The simple commands in the order they were found: what a command's words or its
    /// strings run (`$(…)`, `bash -c '…'`) comes before the command itself.
    pub fn commands(&self) -> &[SimpleCommand] {
        &self.commands
    }

    /// The files the line redirects from or to, as written (`> out.txt`, `< in`, `&> log`):
    /// every redirection except to or from `/dev/null`, descriptor duplications (`2>&1`),
    /// here-documents and here-strings.
    pub fn file_redirections(&self) -> &[String] {
        &self.file_redirections
    }

    /// Whether some command's program is known only at run time.
    pub fn has_unknown_program(&self) -> bool {
        self.commands
            .iter()
            .any(|command| command.unknown_program().is_some())
    }

    /// Whether what lets a line through (an allow rule, a session approval, a sandbox mode
    /// rule, a read-only declaration) lets this one through: at least one command, no file
    /// redirection, and every command has a [`permit_text`](SimpleCommand::permit_text) that
    /// `permits` accepts.
    pub fn is_permitted_by(&self, mut permits: impl FnMut(&str) -> bool) -> bool {
        !self.commands.is_empty()
            && self.file_redirections.is_empty()
            && self
                .commands
                .iter()
                .all(|command| command.permit_text().is_some_and(&mut permits))
    }
}

/// Why a command's program cannot be known before it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnknownProgram {
    /// Its name comes from an expansion (`$CURL`, `$(printf curl)`, `${X}`), or a wrapper's
    /// options do (`nice $N curl`).
    Expanded,
    /// Its name is a pattern or brace expansion the shell fills in (`/usr/bin/cu?l`, `{curl,x}`).
    Pattern,
    /// A wrapper option this reader does not know, so where the program starts is unknown.
    WrapperOption {
        /// The wrapper's name (`env`, `nice`, `sudo`).
        wrapper: String,
        /// The option, as written.
        option: String,
    },
    /// A shell or `eval` runs commands that are read at run time (`curl … | sh`,
    /// `bash -c "$CMD"`).
    CommandsAtRunTime,
    /// The text could not be parsed.
    Unparsable {
        /// The parser's message, or why the text was not handed to the parser.
        error: String,
    },
    /// Nested deeper than this reader follows (strings in strings, substitutions in
    /// substitutions), longer than it parses, or costlier to parse than the line's budget
    /// (constructs the parser reads more than one way, nested in each other).
    TooComplex,
}

impl fmt::Display for UnknownProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expanded => f.write_str("the program's name is only known at run time"),
            Self::Pattern => f.write_str("the program's name is a pattern the shell expands"),
            Self::WrapperOption { wrapper, option } => {
                write!(
                    f,
                    "`{wrapper}` has an option this reader does not know (`{option}`)"
                )
            }
            Self::CommandsAtRunTime => f.write_str("the commands it runs are read at run time"),
            Self::Unparsable { error } => write!(f, "the command could not be parsed: {error}"),
            Self::TooComplex => {
                f.write_str("the command is nested too deeply, too long or too costly to parse")
            }
        }
    }
}

/// One simple command: a program and its arguments, after quote removal, with the wrappers
/// that run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// From the outermost wrapper inwards; the last is the program's view.
    views: Vec<CommandText>,
    program: Result<String, UnknownProgram>,
    arguments: Vec<String>,
    sets_environment: bool,
    /// The view an allow rule is matched against: the program's, or the outermost wrapper's
    /// that changes who runs it (`sudo`, `doas`).
    permit_view: usize,
}

impl SimpleCommand {
    /// The program's name (its basename after quote removal: `/usr/bin/curl`, `\curl`,
    /// `"curl"` are all `curl`), or `None` when it is only known at run time.
    pub fn program(&self) -> Option<&str> {
        self.program.as_deref().ok()
    }

    /// Why the program is unknown, when it is.
    pub fn unknown_program(&self) -> Option<&UnknownProgram> {
        self.program.as_ref().err()
    }

    /// The arguments after the program, quotes removed; an argument only known at run time
    /// (`$URL`, `$(…)`) is kept as written.
    pub fn arguments(&self) -> &[String] {
        &self.arguments
    }

    /// Whether environment variables are set for the program (`X=1 curl`, `env X=1 curl`):
    /// they can change what it runs (`PAGER`, `LD_PRELOAD`, `GIT_SSH_COMMAND`).
    pub fn sets_environment(&self) -> bool {
        self.sets_environment
    }

    /// The command as a rule reads it: the program's basename and its arguments, joined by
    /// single spaces (`curl -s x`).
    pub fn canonical(&self) -> &CommandText {
        // `views` always ends with the program's view; the fallback is never taken.
        self.views.last().unwrap_or(&EMPTY_TEXT)
    }

    /// Every way a rule may read the command: from each wrapper inwards, the program's view
    /// last (`nice -n 5 curl x`, `curl x`). What restricts looks at all of them.
    pub fn views(&self) -> &[CommandText] {
        &self.views
    }

    /// The text what permits is matched against, or `None` when nothing may permit the
    /// command by its text: its program, an argument or a privileged wrapper's argument is
    /// known only at run time, arguments are appended at run time (`xargs`), or it sets
    /// environment variables.
    pub fn permit_text(&self) -> Option<&str> {
        let view = self.views.get(self.permit_view)?;
        (self.program.is_ok() && !self.sets_environment && view.is_fully_known())
            .then_some(view.as_str())
    }
}

static EMPTY_TEXT: CommandText = CommandText {
    text: String::new(),
    known: 0,
    open_ended: true,
};

/// A command rendered as text for a glob: words after quote removal joined by single spaces.
/// A word known only at run time is written as it stands in the line, and everything from it
/// on is unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandText {
    text: String,
    /// Bytes of `text` known before run time.
    known: usize,
    /// Whether arguments may be appended at run time (`xargs`).
    open_ended: bool,
}

impl CommandText {
    /// The whole text, including any part known only at run time.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The part of the text known before run time: all of it, or what precedes the first
    /// word that is not.
    pub fn known_prefix(&self) -> &str {
        self.text.get(..self.known).unwrap_or_default()
    }

    /// Whether the whole command is known before run time.
    pub fn is_fully_known(&self) -> bool {
        self.known == self.text.len() && !self.open_ended
    }

    /// Whether a glob could match the command once what is unknown is filled in: it matches
    /// the text, or the text is not fully known and its known prefix agrees with
    /// `literal_prefix`, the glob's literal text before its first wildcard (one of the two
    /// starts with the other). A command whose program is unknown has an empty known prefix,
    /// so every glob could match it.
    pub fn could_match(&self, is_match: impl Fn(&str) -> bool, literal_prefix: &str) -> bool {
        if is_match(&self.text) {
            return true;
        }
        if self.is_fully_known() {
            return false;
        }
        let known = self.known_prefix();
        known.starts_with(literal_prefix) || literal_prefix.starts_with(known)
    }
}

impl fmt::Display for CommandText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
