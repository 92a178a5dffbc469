//! Wrappers: programs whose operand is the real program (`command`, `env`, `nice`, `sudo`,
//! `xargs`, …), and how to read their options to find it. An option this reader does not
//! know makes the program unknown rather than a guess.

use super::UnknownProgram;
use super::invocation::basename;
use super::parse::Collector;
use super::words::Word;

/// What a wrapper does to the command it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Effect {
    /// Runs it as it is (`command`, `nice`, `timeout`, …).
    Transparent,
    /// Sets environment variables for it (`env X=1`).
    SetsEnvironment,
    /// Appends arguments read at run time (`xargs`).
    AppendsArguments,
    /// Runs it as someone else (`sudo`, `doas`): an allow rule must name the wrapper.
    Privileged,
}

pub(super) enum Step {
    /// The word is the program.
    Program,
    /// The word is a wrapper; the command it runs starts at `next` (if there is one).
    Wrapper { next: usize, effect: Effect },
    /// Where the program starts cannot be known.
    Unknown(UnknownProgram),
}

/// How a wrapper's options read: short flags, short options with a value (attached or the
/// next word), short options whose value can only be attached, and long ones.
struct Options {
    flags: &'static str,
    valued: &'static str,
    attached: &'static str,
    long_flags: &'static [&'static str],
    long_valued: &'static [&'static str],
}

const NO_OPTIONS: Options = Options {
    flags: "",
    valued: "",
    attached: "",
    long_flags: &[],
    long_valued: &[],
};

/// Wrappers whose options are all a table says, and what they do to the command.
const TABLE: [(&str, Options, Effect); 5] = [
    (
        "exec",
        Options {
            flags: "cl",
            valued: "a",
            ..NO_OPTIONS
        },
        Effect::Transparent,
    ),
    (
        "time",
        Options {
            flags: "pvaq",
            valued: "fo",
            attached: "",
            long_flags: &["--append", "--verbose", "--portability", "--quiet"],
            long_valued: &["--format", "--output"],
        },
        Effect::Transparent,
    ),
    (
        "stdbuf",
        Options {
            valued: "ioe",
            long_valued: &["--input", "--output", "--error"],
            ..NO_OPTIONS
        },
        Effect::Transparent,
    ),
    (
        "setsid",
        Options {
            flags: "cfw",
            long_flags: &["--ctty", "--fork", "--wait"],
            ..NO_OPTIONS
        },
        Effect::Transparent,
    ),
    (
        "xargs",
        Options {
            flags: "0prtx",
            valued: "adEILnPs",
            attached: "eil",
            long_flags: &[
                "--null",
                "--interactive",
                "--no-run-if-empty",
                "--verbose",
                "--exit",
                "--open-tty",
                "--eof",
                "--replace",
                "--max-lines",
            ],
            long_valued: &[
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
        },
        Effect::AppendsArguments,
    ),
];

const TIMEOUT: Options = Options {
    flags: "v",
    valued: "sk",
    attached: "",
    long_flags: &["--foreground", "--preserve-status", "--verbose"],
    long_valued: &["--signal", "--kill-after"],
};

const SUDO: Options = Options {
    flags: "AbEeHiKklnPSsVv",
    valued: "CDghprRtTuU",
    attached: "",
    long_flags: &[
        "--askpass",
        "--background",
        "--preserve-env",
        "--edit",
        "--set-home",
        "--login",
        "--remove-timestamp",
        "--reset-timestamp",
        "--list",
        "--non-interactive",
        "--preserve-groups",
        "--stdin",
        "--shell",
        "--version",
        "--validate",
        "--help",
    ],
    long_valued: &[
        "--close-from",
        "--chdir",
        "--group",
        "--host",
        "--prompt",
        "--role",
        "--type",
        "--command-timeout",
        "--other-user",
        "--user",
        "--chroot",
    ],
};

/// The option words right after a wrapper, before its first operand.
fn leading_options(words: &[Word], from: usize) -> impl Iterator<Item = &str> {
    words
        .get(from..)
        .unwrap_or_default()
        .iter()
        .map(|word| word.text.as_str())
        .take_while(|text| text.starts_with('-') && *text != "--")
}

impl Collector {
    /// What the word at `at` is: the program, or a wrapper and where its command starts.
    pub(super) fn wrapper_step(&mut self, words: &[Word], at: usize) -> Step {
        let name = words.get(at).map_or("", |word| basename(&word.text));
        let next = at + 1;
        if let Some((_, options, effect)) = TABLE.iter().find(|(wrapper, ..)| *wrapper == name) {
            return options_then(words, name, next, options, *effect);
        }
        match name {
            "builtin" | "nohup" | "busybox" => match words.get(next).map(|word| word.text.as_str())
            {
                Some("--") => transparent_at(next + 1),
                Some(option) if option.starts_with("--") => Step::Program,
                _ => transparent_at(next),
            },
            "command" => {
                // `command -v curl` only says where curl is.
                if leading_options(words, next).any(|option| option.contains(['v', 'V'])) {
                    return Step::Program;
                }
                let options = Options {
                    flags: "p",
                    ..NO_OPTIONS
                };
                options_then(words, name, next, &options, Effect::Transparent)
            }
            "nice" => nice(words, next),
            "timeout" => match skip_options(words, name, next, &TIMEOUT) {
                // The duration, then the command.
                Ok(duration) if words.get(duration).is_none_or(|word| word.known) => {
                    transparent_at(duration + 1)
                }
                Ok(_) => Step::Unknown(UnknownProgram::Expanded),
                Err(why) => Step::Unknown(why),
            },
            "env" => self.env(words, next),
            "sudo" => {
                // Editing, listing, validating: no command runs.
                let runs_nothing = leading_options(words, next).any(|option| {
                    matches!(
                        option,
                        "--edit"
                            | "--list"
                            | "--validate"
                            | "--version"
                            | "--help"
                            | "--remove-timestamp"
                    ) || (!option.starts_with("--") && option.contains(['e', 'l', 'v', 'V', 'K']))
                });
                if runs_nothing {
                    return Step::Program;
                }
                match skip_options(words, name, next, &SUDO) {
                    Ok(operand) => Step::Wrapper {
                        next: skip_assignments(words, operand),
                        effect: Effect::Privileged,
                    },
                    Err(why) => Step::Unknown(why),
                }
            }
            "doas" => {
                // A shell, a config check, clearing credentials: no command given.
                if leading_options(words, next).any(|option| option.contains(['s', 'L', 'C'])) {
                    return Step::Program;
                }
                let options = Options {
                    flags: "n",
                    valued: "u",
                    ..NO_OPTIONS
                };
                options_then(words, name, next, &options, Effect::Privileged)
            }
            _ => Step::Program,
        }
    }

    /// `env [options] [NAME=VALUE]… [command]`; `-S STRING` splits a string into the command.
    fn env(&mut self, words: &[Word], mut at: usize) -> Step {
        let unknown_option = |option: &str| {
            Step::Unknown(UnknownProgram::WrapperOption {
                wrapper: "env".to_owned(),
                option: option.to_owned(),
            })
        };
        // The value of `-S`/`--split-string`, when given: it and the operands make the command.
        let mut split: Option<Word> = None;
        while let Some(word) = words.get(at) {
            if !word.known {
                return Step::Unknown(UnknownProgram::Expanded);
            }
            let text = word.text.as_str();
            if text == "--" {
                at += 1;
                break;
            }
            if text == "-" {
                at += 1;
                continue;
            }
            if !text.starts_with('-') {
                break;
            }
            if let Some(long) = text.strip_prefix("--") {
                let (name, value) = match long.split_once('=') {
                    Some((name, value)) => (name, Some(Word::known(value))),
                    None => (long, None),
                };
                let valued = match name {
                    "ignore-environment"
                    | "null"
                    | "debug"
                    | "list-signal-handling"
                    | "ignore-signal"
                    | "default-signal"
                    | "block-signal" => false,
                    "unset" | "chdir" | "split-string" => true,
                    _ => return unknown_option(text),
                };
                let value = match (valued, value) {
                    (false, _) => None,
                    (true, Some(value)) => Some(value),
                    (true, None) => {
                        at += 1;
                        words.get(at).cloned()
                    }
                };
                if name == "split-string" {
                    split = value.or_else(|| Some(Word::unknown()));
                }
                at += 1;
                continue;
            }
            for (position, option) in text.char_indices().skip(1) {
                match option {
                    'i' | '0' | 'v' => {}
                    'u' | 'C' | 'S' => {
                        let attached = text.get(position + 1..).unwrap_or_default();
                        let value = if attached.is_empty() {
                            at += 1;
                            words.get(at).cloned().unwrap_or_else(Word::unknown)
                        } else {
                            Word::known(attached)
                        };
                        if option == 'S' {
                            split = Some(value);
                        } else if !value.known {
                            return Step::Unknown(UnknownProgram::Expanded);
                        }
                        break;
                    }
                    _ => return unknown_option(text),
                }
            }
            at += 1;
        }
        if let Some(value) = split {
            let rest = words.get(at..).unwrap_or_default();
            if value.known && rest.iter().all(|word| word.known) {
                let mut line = value.text;
                for word in rest {
                    line.push(' ');
                    line.push_str(&word.text);
                }
                self.nested(&line);
            } else {
                self.unknown(&value.text, UnknownProgram::CommandsAtRunTime);
            }
            return Step::Program;
        }
        let command = skip_assignments(words, at);
        Step::Wrapper {
            next: command,
            effect: if command > at {
                Effect::SetsEnvironment
            } else {
                Effect::Transparent
            },
        }
    }
}

/// `nice [-n N | -N | --adjustment=N] command`.
fn nice(words: &[Word], mut at: usize) -> Step {
    while let Some(word) = words.get(at) {
        if !word.known {
            return Step::Unknown(UnknownProgram::Expanded);
        }
        let text = word.text.as_str();
        let digits = |value: &str| {
            let value = value.strip_prefix(['-', '+']).unwrap_or(value);
            !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
        };
        at += match text {
            "--" => return transparent_at(at + 1),
            "-n" | "--adjustment" => {
                if !words.get(at + 1).is_some_and(|value| value.known) {
                    return Step::Unknown(UnknownProgram::Expanded);
                }
                2
            }
            _ if text.starts_with("--adjustment=") => 1,
            _ if text.strip_prefix("-n").is_some_and(digits) => 1,
            _ if text.strip_prefix('-').is_some_and(digits) => 1,
            _ if text.starts_with('-') && text != "-" => {
                return Step::Unknown(UnknownProgram::WrapperOption {
                    wrapper: "nice".to_owned(),
                    option: text.to_owned(),
                });
            }
            _ => return transparent_at(at),
        };
    }
    transparent_at(at)
}

fn transparent_at(next: usize) -> Step {
    Step::Wrapper {
        next,
        effect: Effect::Transparent,
    }
}

fn options_then(
    words: &[Word],
    wrapper: &str,
    next: usize,
    options: &Options,
    effect: Effect,
) -> Step {
    match skip_options(words, wrapper, next, options) {
        Ok(next) => Step::Wrapper { next, effect },
        Err(why) => Step::Unknown(why),
    }
}

/// The index of the first operand after a wrapper's options.
fn skip_options(
    words: &[Word],
    wrapper: &str,
    mut at: usize,
    options: &Options,
) -> Result<usize, UnknownProgram> {
    let unknown = |option: &str| UnknownProgram::WrapperOption {
        wrapper: wrapper.to_owned(),
        option: option.to_owned(),
    };
    while let Some(word) = words.get(at) {
        if !word.known {
            return Err(UnknownProgram::Expanded);
        }
        let text = word.text.as_str();
        if text == "--" {
            return Ok(at + 1);
        }
        if !text.starts_with('-') || text == "-" {
            return Ok(at);
        }
        if text.starts_with("--") {
            let (name, value) = match text.split_once('=') {
                Some((name, _)) => (name, true),
                None => (text, false),
            };
            at += if options.long_flags.contains(&name) {
                1
            } else if options.long_valued.contains(&name) {
                if value {
                    1
                } else {
                    known_value(words, at)?;
                    2
                }
            } else {
                return Err(unknown(text));
            };
            continue;
        }
        let mut step = 1;
        for (position, option) in text.char_indices().skip(1) {
            if options.flags.contains(option) {
                continue;
            }
            if options.attached.contains(option) {
                break;
            }
            if options.valued.contains(option) {
                if position + option.len_utf8() == text.len() {
                    known_value(words, at)?;
                    step = 2;
                }
                break;
            }
            return Err(unknown(text));
        }
        at += step;
    }
    Ok(at)
}

/// An option's value in the next word must be known: unquoted, it could split into words.
fn known_value(words: &[Word], option: usize) -> Result<(), UnknownProgram> {
    match words.get(option + 1) {
        Some(word) if !word.known => Err(UnknownProgram::Expanded),
        _ => Ok(()),
    }
}

/// The index after `NAME=VALUE` words.
fn skip_assignments(words: &[Word], mut at: usize) -> usize {
    while words
        .get(at)
        .is_some_and(|word| word.known && word.text.contains('=') && !word.text.starts_with('='))
    {
        at += 1;
    }
    at
}
