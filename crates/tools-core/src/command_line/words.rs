//! Words after quote removal: the text a program receives when it is known before run time,
//! and the commands a word's expansions run (`$(…)`, backticks, inside `${…}` and `$((…))`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::word::{self, TildeExpr, WordPiece, WordPieceWithSource};

use super::UnknownProgram;
use super::budget::{WordKind, word_cost};
use super::parse::{Collector, options};

/// One word of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Word {
    /// After quote removal when `known`; as written otherwise.
    pub text: String,
    /// Whether the value is known before run time: no parameter, command or arithmetic
    /// expansion in it (a tilde counts as known: it never splits).
    pub known: bool,
    /// Whether unquoted pattern or brace characters may make it other words (`cu*`, `{a,b}`).
    pub pattern: bool,
}

impl Word {
    pub(super) fn known(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            known: true,
            pattern: false,
        }
    }

    /// A word whose value is missing or unknown.
    pub(super) fn unknown() -> Self {
        Self {
            text: String::new(),
            known: false,
            pattern: false,
        }
    }

    /// A descriptor number or `-` (closing), as in `2>&1` and `>&-`.
    pub(super) fn is_descriptor(&self) -> bool {
        self.known
            && (self.text == "-"
                || (!self.text.is_empty() && self.text.bytes().all(|b| b.is_ascii_digit())))
    }
}

/// Whether text may run commands when expanded.
fn may_run_commands(text: &str) -> bool {
    text.contains("$(") || text.contains('`') || text.contains("<(") || text.contains(">(")
}

/// Unquoted characters that make a word a pattern (globs, extended globs, brace expansion).
fn has_pattern(text: &str) -> bool {
    text.contains(['*', '?', '[', '{', '('])
}

/// Characters after which a word needs the word parser; without them it is its own text.
const SPECIAL: [char; 6] = ['\\', '\'', '"', '$', '`', '~'];

struct Builder {
    text: String,
    known: bool,
    pattern: bool,
}

impl Collector {
    /// Analyzes a word and adds the commands its expansions run.
    pub(super) fn word(&mut self, raw: &str) -> Word {
        self.analyze(raw, Nested::Collect)
    }

    /// Analyzes a word whose commands were already added.
    pub(super) fn word_quietly(&mut self, raw: &str) -> Word {
        self.analyze(raw, Nested::Ignore)
    }

    fn analyze(&mut self, raw: &str, nested: Nested) -> Word {
        if !raw.contains(SPECIAL) {
            return Word {
                text: raw.to_owned(),
                known: true,
                pattern: has_pattern(raw),
            };
        }
        let pieces = match self.parse_word(raw, WordKind::Word) {
            Ok(pieces) => pieces,
            Err(why) => {
                if nested == Nested::Collect {
                    self.unknown(raw, why);
                }
                return Word {
                    text: raw.to_owned(),
                    known: false,
                    pattern: false,
                };
            }
        };
        let mut builder = Builder {
            text: String::with_capacity(raw.len()),
            known: true,
            pattern: false,
        };
        self.pieces(&pieces, raw, &mut builder, Quoting::Unquoted, nested);
        Word {
            text: if builder.known {
                builder.text
            } else {
                raw.to_owned()
            },
            known: builder.known,
            pattern: builder.pattern,
        }
    }

    /// Adds the commands a here-document's body runs (its quotes are literal).
    pub(super) fn heredoc(&mut self, body: &str) {
        if !may_run_commands(body) {
            return;
        }
        match self.parse_word(body, WordKind::HereDocument) {
            Ok(pieces) => {
                let mut ignored = Builder {
                    text: String::new(),
                    known: true,
                    pattern: false,
                };
                self.pieces(
                    &pieces,
                    body,
                    &mut ignored,
                    Quoting::Double,
                    Nested::Collect,
                );
            }
            Err(why) => self.unknown(body, why),
        }
    }

    /// Adds the commands substitutions in `text` run, where text is not a word of its own:
    /// an arithmetic expression, the inside of `${…}`, an array index.
    pub(super) fn scan(&mut self, text: &str) {
        if may_run_commands(text) {
            self.word(text);
        }
    }

    /// Parses a word or a here-document's body if the work it may cost is left in the budget.
    fn parse_word(
        &mut self,
        raw: &str,
        kind: WordKind,
    ) -> Result<Vec<WordPieceWithSource>, UnknownProgram> {
        if !self.budget.take(word_cost(raw, kind)) {
            return Err(UnknownProgram::TooComplex);
        }
        let options = options();
        let unparsable = |error: String| UnknownProgram::Unparsable { error };
        catch_unwind(AssertUnwindSafe(|| match kind {
            WordKind::Word => word::parse(raw, &options),
            WordKind::HereDocument => word::parse_heredoc(raw, &options),
        }))
        .map_err(|_| unparsable("the word parser failed".to_owned()))?
        .map_err(|error| unparsable(error.to_string()))
    }

    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        raw: &str,
        builder: &mut Builder,
        quoting: Quoting,
        nested: Nested,
    ) {
        for WordPieceWithSource {
            piece,
            start_index,
            end_index,
        } in pieces
        {
            match piece {
                WordPiece::Text(text) => {
                    builder.text.push_str(text);
                    if quoting == Quoting::Unquoted && has_pattern(text) {
                        builder.pattern = true;
                    }
                }
                WordPiece::SingleQuotedText(text) => builder.text.push_str(text),
                WordPiece::AnsiCQuotedText(text) => builder.text.push_str(&ansi_c(text)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, raw, builder, Quoting::Double, nested);
                }
                WordPiece::TildeExpansion(tilde) => builder.text.push_str(&tilde_text(tilde)),
                WordPiece::EscapeSequence(escape) => {
                    builder.text.push_str(&unescape(escape, quoting));
                }
                WordPiece::ParameterExpansion(_) => {
                    builder.known = false;
                    // `${X:-$(curl …)}`: the inside is read as a word for its substitutions.
                    if nested == Nested::Collect {
                        let source = raw.get(*start_index..*end_index).unwrap_or(raw);
                        let inside = source
                            .strip_prefix("${")
                            .and_then(|rest| rest.strip_suffix('}'));
                        match inside {
                            Some(inside) => self.scan(inside),
                            None if source.starts_with("${") => self.scan(source),
                            None => {}
                        }
                    }
                }
                WordPiece::CommandSubstitution(body)
                | WordPiece::BackquotedCommandSubstitution(body) => {
                    builder.known = false;
                    if nested == Nested::Collect {
                        self.commands_in(body, self.depth + 1);
                    }
                }
                WordPiece::ArithmeticExpression(expr) => {
                    builder.known = false;
                    if nested == Nested::Collect {
                        self.scan(&expr.value);
                    }
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Nested {
    Collect,
    Ignore,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quoting {
    Unquoted,
    Double,
}

/// A backslash escape: outside quotes the next character stands for itself (a newline after
/// it disappears); inside double quotes only `$`, `` ` ``, `"`, `\` and a newline are escaped.
fn unescape(escape: &str, quoting: Quoting) -> String {
    let Some(rest) = escape.strip_prefix('\\') else {
        return escape.to_owned();
    };
    match (quoting, rest) {
        (_, "\n") => String::new(),
        (Quoting::Unquoted, _) | (Quoting::Double, "$" | "`" | "\"" | "\\") => rest.to_owned(),
        (Quoting::Double, _) => escape.to_owned(),
    }
}

fn tilde_text(tilde: &TildeExpr) -> String {
    match tilde {
        TildeExpr::Home => "~".to_owned(),
        TildeExpr::UserHome(user) => format!("~{user}"),
        TildeExpr::WorkingDir => "~+".to_owned(),
        TildeExpr::OldWorkingDir => "~-".to_owned(),
        TildeExpr::NthDirFromTopOfDirStack { n, plus_used } => {
            format!("~{}{n}", if *plus_used { "+" } else { "" })
        }
        TildeExpr::NthDirFromBottomOfDirStack { n } => format!("~-{n}"),
    }
}

/// The value of `$'…'`'s inside, as bash decodes it.
pub(super) fn ansi_c(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(escape) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match escape {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(escape),
            _ => None,
        };
        if let Some(decoded) = simple {
            out.push(decoded);
            continue;
        }
        let (radix, max_digits) = match escape {
            '0'..='7' => (8, 3),
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            'c' => {
                // Control character: `\cA` is 0x01.
                match chars
                    .next()
                    .and_then(|control| char::from_u32(u32::from(control) & 0x1f))
                {
                    Some(control) => out.push(control),
                    None => out.push_str("\\c"),
                }
                continue;
            }
            other => {
                out.push('\\');
                out.push(other);
                continue;
            }
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(escape);
        }
        while digits.len() < max_digits {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => {
                    digits.push(*d);
                    chars.next();
                }
                _ => break,
            }
        }
        match u32::from_str_radix(&digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(decoded) if !digits.is_empty() => out.push(decoded),
            _ => {
                out.push('\\');
                out.push(escape);
                let typed = if radix == 8 {
                    digits.get(1..)
                } else {
                    digits.get(..)
                };
                out.push_str(typed.unwrap_or_default());
            }
        }
    }
    out
}
