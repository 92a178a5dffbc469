//! Programs that run strings as commands: shells with `-c` (or reading their input),
//! `eval`, `trap`, `alias` definitions and `find -exec`. Their strings are parsed one nesting
//! level deeper; a string known only at run time is an unknown command.

use super::UnknownProgram;
use super::invocation::{basename, join};
use super::parse::{Collector, MAX_NESTING, READ_SUBSTITUTION};
use super::words::Word;

/// Shells whose `-c` string is parsed as commands.
const SHELLS: [&str; 10] = [
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash",
];

impl Collector {
    /// Parses the strings a known program runs as commands.
    pub(super) fn runs_strings(&mut self, words: &[Word], program: usize) {
        let Some(name) = words.get(program).map(|word| basename(&word.text)) else {
            return;
        };
        let operands = words.get(program + 1..).unwrap_or_default();
        match name {
            _ if SHELLS.contains(&name) => {
                let written = join(words.get(program..).unwrap_or_default());
                self.shell(&written, operands);
            }
            "eval" => {
                let operands = match operands.first() {
                    Some(word) if word.text == "--" => operands.get(1..).unwrap_or_default(),
                    _ => operands,
                };
                if operands.is_empty() {
                    return;
                }
                if operands.iter().all(|word| word.known) {
                    self.nested(&join(operands));
                } else {
                    self.unknown(&join(operands), UnknownProgram::CommandsAtRunTime);
                }
            }
            // A script read from a file is out of reach, like any interpreter's; one the line
            // makes as it runs (`. <(curl …)`) is commands read at run time.
            "source" | "." if operands.first().is_some_and(reads_made_file) => {
                self.unknown(&join(operands), UnknownProgram::CommandsAtRunTime);
            }
            "alias" => {
                for word in operands {
                    if !word.known {
                        self.unknown(&word.text, UnknownProgram::CommandsAtRunTime);
                    } else if let Some((_, value)) = word.text.split_once('=') {
                        // Where the alias is used, arguments follow its value.
                        let first = self.commands.len();
                        self.nested(value);
                        for command in self.commands.iter_mut().skip(first) {
                            command.takes_more_arguments();
                        }
                    }
                }
            }
            "trap" => {
                let operands: Vec<&Word> =
                    operands.iter().filter(|word| word.text != "--").collect();
                if operands
                    .iter()
                    .any(|word| matches!(word.text.as_str(), "-l" | "-p" | "-P"))
                {
                    return;
                }
                if let [action, _, ..] = operands.as_slice() {
                    if !action.known {
                        self.unknown(&action.text, UnknownProgram::CommandsAtRunTime);
                    } else if action.text != "-" {
                        self.nested(&action.text);
                    }
                }
            }
            "find" => {
                let mut rest = operands;
                while let Some(start) = rest.iter().position(|word| {
                    matches!(word.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")
                }) {
                    let after = rest.get(start + 1..).unwrap_or_default();
                    let end = after
                        .iter()
                        .position(|word| word.text == ";" || word.text == "+")
                        .unwrap_or(after.len());
                    let command = after.get(..end).unwrap_or_default().to_vec();
                    if !command.is_empty() {
                        self.nested_invocation(command);
                    }
                    rest = after.get(end + 1..).unwrap_or_default();
                }
            }
            _ => {}
        }
    }

    /// `sh [options] [-c string | script | reading its input]`.
    fn shell(&mut self, written: &str, operands: &[Word]) {
        let mut at = 0;
        let mut string = false;
        let mut reads_input = false;
        let mut informational = false;
        while let Some(word) = operands.get(at) {
            if !word.known {
                self.unknown(written, UnknownProgram::CommandsAtRunTime);
                return;
            }
            let text = word.text.as_str();
            if text == "--" || text == "-" {
                at += 1;
                break;
            }
            if let Some(long) = text.strip_prefix("--") {
                informational |= matches!(long, "version" | "help");
                at += if matches!(long, "rcfile" | "init-file") {
                    2
                } else {
                    1
                };
                continue;
            }
            let Some(cluster) = text
                .strip_prefix(['-', '+'])
                .filter(|rest| !rest.is_empty())
            else {
                break;
            };
            string |= text.starts_with('-') && cluster.contains('c');
            reads_input |= cluster.contains('s');
            // `-o pipefail`, `-O extglob`: the option's name is the next word.
            at += if cluster.contains(['o', 'O']) { 2 } else { 1 };
        }
        let operand = operands.get(at);
        if string {
            match operand {
                Some(word) if word.known => self.nested(&word.text),
                Some(word) => self.unknown(&word.text, UnknownProgram::CommandsAtRunTime),
                None => {}
            }
        } else if (reads_input || operand.is_none_or(reads_made_file)) && !informational {
            self.unknown(written, UnknownProgram::CommandsAtRunTime);
        }
    }

    /// Parses a string as a command line one level deeper.
    pub(super) fn nested(&mut self, text: &str) {
        self.commands_in(text, self.depth + 1);
    }

    /// A command given as words (`find -exec`), one level deeper.
    fn nested_invocation(&mut self, words: Vec<Word>) {
        if self.depth + 1 > MAX_NESTING {
            self.unknown(&join(&words), UnknownProgram::TooComplex);
            return;
        }
        self.depth += 1;
        self.invocation(words, false);
        self.depth -= 1;
    }
}

/// Whether a script operand is made by the line itself or read from the input: a process
/// substitution, standard input or an inherited descriptor.
fn reads_made_file(word: &Word) -> bool {
    let text = word.text.as_str();
    !word.known
        || text == READ_SUBSTITUTION
        || text == "-"
        || text == "/dev/stdin"
        || text.starts_with("/dev/fd/")
        || text.starts_with("/proc/self/fd/")
}
