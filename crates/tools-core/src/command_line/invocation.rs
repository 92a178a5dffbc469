//! A simple command's words become a [`SimpleCommand`]: wrappers looked through
//! ([`wrappers`](super::wrappers)), the strings it runs parsed ([`runners`](super::runners)),
//! and its views rendered for globs.

use super::parse::Collector;
use super::words::Word;
use super::wrappers::{Effect, Step};
use super::{CommandText, SimpleCommand, UnknownProgram};

pub(super) fn basename(text: &str) -> &str {
    text.rsplit('/').next().unwrap_or(text)
}

impl Collector {
    /// A simple command's words (program first): wrappers looked through, strings it runs
    /// parsed, and the command added.
    pub(super) fn invocation(&mut self, words: Vec<Word>, sets_environment: bool) {
        let mut starts = Vec::new();
        let mut sets_environment = sets_environment;
        let mut open_ended = false;
        let mut privileged = None;
        let mut at = 0;
        let program = loop {
            let Some(word) = words.get(at) else {
                // A wrapper with nothing after it is the program itself (`env`, `nice`).
                match starts.pop() {
                    Some(last) => break Ok(last),
                    None => return,
                }
            };
            if !word.known || word.pattern {
                break Err(Unknown {
                    at,
                    why: if word.known {
                        UnknownProgram::Pattern
                    } else {
                        UnknownProgram::Expanded
                    },
                    named: true,
                });
            }
            match self.wrapper_step(&words, at) {
                Step::Program => break Ok(at),
                Step::Wrapper { next, effect } => {
                    starts.push(at);
                    match effect {
                        Effect::Transparent => {}
                        Effect::SetsEnvironment => sets_environment = true,
                        Effect::AppendsArguments => open_ended = true,
                        Effect::Privileged => {
                            privileged.get_or_insert(starts.len() - 1);
                        }
                    }
                    at = next;
                }
                Step::Unknown(why) => {
                    starts.push(at);
                    break Err(Unknown {
                        at: at + 1,
                        why,
                        named: false,
                    });
                }
            }
        };
        // A wrapper's option value known only at run time (`nice -n $N curl`) could split into
        // words that move the program.
        let program = match program {
            Ok(at) => match words.iter().take(at).position(|word| !word.known) {
                Some(unknown) => {
                    starts.retain(|start| *start < unknown);
                    Err(Unknown {
                        at: unknown,
                        why: UnknownProgram::Expanded,
                        named: true,
                    })
                }
                None => Ok(at),
            },
            Err(unknown) => Err(unknown),
        };
        if privileged.is_some_and(|view| view >= starts.len()) {
            privileged = None;
        }
        if let Ok(program) = program {
            self.runs_strings(&words, program);
        }
        let command = build(
            &words,
            &starts,
            program,
            sets_environment,
            open_ended,
            privileged,
        );
        self.commands.push(command);
    }
}

pub(super) fn join(words: &[Word]) -> String {
    let mut text = String::new();
    for word in words {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&word.text);
    }
    text
}

/// Where a program cannot be known, and why.
struct Unknown {
    /// The first word of the command it stands for.
    at: usize,
    why: UnknownProgram,
    /// Whether the word at `at` is the program's (unknown) name, rather than a word after a
    /// wrapper whose options could not be read.
    named: bool,
}

/// The command from its words, where its wrappers start, and where its program is (or from
/// where it is unknown).
fn build(
    words: &[Word],
    starts: &[usize],
    program: Result<usize, Unknown>,
    sets_environment: bool,
    open_ended: bool,
    privileged: Option<usize>,
) -> SimpleCommand {
    let (inner, unknown_from, arguments_from, program) = match program {
        Ok(at) => (
            at,
            words
                .iter()
                .skip(at)
                .position(|word| !word.known)
                .map(|offset| at + offset),
            at + 1,
            Ok(words
                .get(at)
                .map_or_else(String::new, |word| basename(&word.text).to_owned())),
        ),
        Err(unknown) => (
            unknown.at,
            Some(unknown.at),
            unknown.at + usize::from(unknown.named),
            Err(unknown.why),
        ),
    };
    // What follows an unknown program may be anything, even when nothing follows.
    let open_ended = open_ended || program.is_err();
    let views: Vec<CommandText> = starts
        .iter()
        .copied()
        .chain(std::iter::once(inner))
        .map(|start| render(words, start, starts, inner, unknown_from, open_ended))
        .collect();
    let permit_view = privileged.unwrap_or_else(|| views.len().saturating_sub(1));
    SimpleCommand {
        arguments: words
            .iter()
            .skip(arguments_from)
            .map(|word| word.text.clone())
            .collect(),
        views,
        program,
        sets_environment,
        permit_view,
    }
}

/// The words from `start` joined by spaces, programs and wrappers by their basenames; known up
/// to the word at `unknown_from`.
fn render(
    words: &[Word],
    start: usize,
    starts: &[usize],
    program: usize,
    unknown_from: Option<usize>,
    open_ended: bool,
) -> CommandText {
    let mut text = String::new();
    let mut known = None;
    for (index, word) in words.iter().enumerate().skip(start) {
        if !text.is_empty() {
            text.push(' ');
        }
        if unknown_from == Some(index) {
            known = Some(text.len());
        }
        let named = index == program || starts.contains(&index);
        if named && word.known {
            text.push_str(basename(&word.text));
        } else {
            text.push_str(&word.text);
        }
    }
    CommandText {
        known: known.unwrap_or(text.len()),
        text,
        open_ended,
    }
}

impl SimpleCommand {
    /// Arguments may be appended to the command where it runs (an alias's value).
    pub(super) fn takes_more_arguments(&mut self) {
        for view in &mut self.views {
            view.open_ended = true;
        }
    }

    /// A command standing for text whose commands cannot be read.
    pub(super) fn unknown(text: &str, why: UnknownProgram) -> Self {
        Self {
            views: vec![CommandText {
                text: text.to_owned(),
                known: 0,
                open_ended: true,
            }],
            program: Err(why),
            arguments: Vec::new(),
            sets_environment: false,
            permit_view: 0,
        }
    }
}
