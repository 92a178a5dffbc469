//! How much work brush-parser is given. Its parsers are PEG grammars without memoization:
//! where an alternative fails, the next one parses the same text again, so what stands inside
//! constructs that may be read more than one way is parsed once per reading of each, and time
//! multiplies with every level. Before each parse the work is estimated from the text — every
//! byte costs the product of the weights of the constructs open around it — and charged to
//! one budget for the whole command line, which the strings parsed inside it (`bash -c`,
//! substitutions, here-documents) share. What does not fit is not parsed: an unknown command.
//!
//! The line grammar's weights are here, the word grammar's in `word.rs`: per-level factors
//! measured on brush-parser 0.4 in a release build, rounded up to a power of two with room to
//! spare (`tests/command_line_budget.rs` holds the families they were measured on).

mod word;

use brush_parser::Token;

pub(super) use word::{WordKind, word_cost};

/// Work one command line may cost, strings inside it included. A unit is roughly one byte read
/// once at the top level; at this budget the costliest lines measured parse in about 0.1 s in
/// a release build, and real lines, here-documents of hundreds of kilobytes included, cost a
/// few units per byte.
pub(super) const MAX_WORK: u64 = 1 << 24;

/// What is left of the budget of one command line.
#[derive(Debug)]
pub(super) struct Budget {
    left: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Self { left: MAX_WORK }
    }
}

impl Budget {
    /// Takes `cost` from what is left, or nothing and `false` when it is more than that: a
    /// refused parse leaves the budget to the smaller ones after it.
    pub(super) fn take(&mut self, cost: u64) -> bool {
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }
}

/// The work of tokenizing `text`. The tokenizer reads each byte once, but keeps the tokens
/// that follow a here-document's `<<` on its line in a queue it takes from the front, one
/// shift of the whole queue per token: such a line costs the square of its tokens (`cat <<E`
/// and 160,000 words: 24 s). Each is priced from its `<<` to where the tokenizer ends the
/// line, counting every byte that may end a token.
pub(super) fn tokenizer_cost(text: &str) -> u64 {
    let bytes = text.as_bytes();
    let mut cost = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let mut from = 0;
    while let Some(start) = find_here_document(bytes, from) {
        let rest = bytes.get(start..).unwrap_or_default();
        let end = word::line_end(rest).map_or(bytes.len(), |end| start + end);
        let queued = bytes
            .get(start..end)
            .unwrap_or_default()
            .iter()
            .filter(|byte| b" \t\n;&|<>()".contains(byte))
            .count();
        let queued = u64::try_from(queued).unwrap_or(u64::MAX);
        cost = cost.saturating_add(queued.saturating_mul(queued));
        from = end.max(start + 2);
    }
    cost
}

/// The next `<<` at or after `from`.
fn find_here_document(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(2)
        .position(|pair| pair == b"<<")
        .map(|at| from + at)
}

/// `(` is tried as an arithmetic command and then as a subshell (measured 2× a level, also
/// in `[[ … =~ (…) ]]`); a `case` item without `;;` is parsed as an item that must end with
/// one, then again as the last item (2×).
const LINE_PAREN: u64 = 4;
const LINE_CASE: u64 = 4;

/// How many times the line grammar may read one word as an assignment: as a prefix, again to
/// see that the command's name is not one, as each suffix, and once more to report an error.
const ASSIGNMENT_READINGS: u64 = 8;

/// The estimated work of parsing `tokens`: the grammar reads each token once per reading of
/// the parentheses and `case` items open around it. Words are opaque to this grammar but for one question, asked of each word it
/// meets where an assignment may stand: whether it is one, which reads `name[index]=` with the
/// word grammar. The rest of a word is estimated when the walk parses it.
pub(super) fn line_cost(tokens: &[Token]) -> u64 {
    let mut open: Vec<(LineFrame, u64)> = Vec::new();
    let mut cost = 0u64;
    for (at, token) in tokens.iter().enumerate() {
        let previous = at.checked_sub(1).and_then(|before| tokens.get(before));
        let next = tokens.get(at + 1);
        let product = open.last().map_or(1, |&(_, product)| product);
        match token {
            Token::Operator(operator, _) if operator == "(" => {
                open.push((LineFrame::Paren, product.saturating_mul(LINE_PAREN)));
            }
            // Under a `case`, a `)` that closes no `(` ends a pattern.
            Token::Operator(operator, _) if operator == ")" => {
                if matches!(open.last(), Some((LineFrame::Paren, _))) {
                    open.pop();
                }
            }
            Token::Word(word, _) if word == "case" && may_open_case(tokens, at) => {
                open.push((LineFrame::Case, product.saturating_mul(LINE_CASE)));
            }
            Token::Word(word, _) if word == "esac" && closes_case(previous, next) => {
                if matches!(open.last(), Some((LineFrame::Case, _))) {
                    open.pop();
                }
            }
            Token::Operator(..) | Token::Word(..) => {}
        }
        let length = u64::try_from(token.to_str().len()).unwrap_or(u64::MAX);
        let assignment = match token {
            Token::Word(word, _) => assignment_cost(word).saturating_mul(ASSIGNMENT_READINGS),
            Token::Operator(..) => 0,
        };
        let reading = length.saturating_add(1).saturating_add(assignment);
        cost = cost.saturating_add(product.saturating_mul(reading));
    }
    cost
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LineFrame {
    Paren,
    Case,
}

/// Words the grammar reserves: after one of them a command may start.
const RESERVED: [&str; 21] = [
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then",
    "until", "while", "[[", "]]", "function", "select", "coproc",
];

/// Whether the `case` at `at` may open a `case` command: it does not follow a word that is an
/// argument (`echo case`). Counting more openers than the grammar sees only costs more.
fn may_open_case(tokens: &[Token], at: usize) -> bool {
    let word_before = |back: usize| {
        at.checked_sub(back)
            .and_then(|before| tokens.get(before))
            .and_then(|token| match token {
                Token::Word(word, _) => Some(word.as_str()),
                Token::Operator(..) => None,
            })
    };
    match word_before(1) {
        None => true,
        Some(word) => RESERVED.contains(&word) || word_before(2) == Some("function"),
    }
}

/// Whether an `esac` closes its `case`: it stands where a command would (after `;`, `;;`, a
/// newline, `&` or a `)`), and is not a pattern (`esac)`, `esac|x)`). Closing fewer than the
/// grammar does only costs more; closing one it does not would let a `case` nest unpriced.
fn closes_case(previous: Option<&Token>, next: Option<&Token>) -> bool {
    let after_separator = matches!(previous, Some(Token::Operator(operator, _))
        if matches!(operator.as_str(), ";" | ";;" | ";&" | ";;&" | "&" | "\n" | ")"));
    let pattern = matches!(next, Some(Token::Operator(operator, _))
        if matches!(operator.as_str(), ")" | "|"));
    after_separator && !pattern
}

/// The work of reading `word` as an assignment: nothing more than its bytes unless it starts
/// with `name[`, whose index is arithmetic up to `]` (read with the word grammar, nested
/// expansions and all).
fn assignment_cost(word: &str) -> u64 {
    let bytes = word.as_bytes();
    let name = bytes
        .iter()
        .position(|&byte| !(byte.is_ascii_alphanumeric() || byte == b'_'))
        .unwrap_or(bytes.len());
    let starts_with_name = bytes
        .first()
        .is_some_and(|&byte| byte.is_ascii_alphabetic() || byte == b'_');
    match bytes.get(name..) {
        Some(index) if starts_with_name && index.first() == Some(&b'[') => word::index_cost(index),
        _ => 0,
    }
}
