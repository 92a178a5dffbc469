//! A small Rust tokenizer for the guard checks. It only needs identifiers, `::` and
//! single-character punctuation with their line numbers; comments and every kind of
//! literal are dropped so that text in a doc comment or a string never counts as code.

/// What a token is. Literals and lifetimes are kept as opaque tokens so that token
/// adjacency (`X :: Allow`) is not faked by removing something between two identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// An identifier or keyword; raw identifiers (`r#type`) lose their `r#`.
    Ident(String),
    /// `::`
    PathSep,
    /// Any other single punctuation character.
    Punct(char),
    /// A string, char or number literal, or a lifetime.
    Opaque,
}

/// A token and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub kind: TokenKind,
    pub line: usize,
}

impl Token {
    pub(super) fn is_ident(&self, name: &str) -> bool {
        matches!(&self.kind, TokenKind::Ident(ident) if ident == name)
    }

    pub(super) fn ident(&self) -> Option<&str> {
        match &self.kind {
            TokenKind::Ident(ident) => Some(ident),
            TokenKind::PathSep | TokenKind::Punct(_) | TokenKind::Opaque => None,
        }
    }

    pub(super) fn is_punct(&self, c: char) -> bool {
        self.kind == TokenKind::Punct(c)
    }
}

/// Splits Rust source into tokens. Malformed input (an unterminated string or comment)
/// ends the token stream early instead of failing: the compiler reports such files better.
pub(super) fn tokenize(source: &str) -> Vec<Token> {
    Lexer {
        chars: source.chars().collect(),
        pos: 0,
        line: 1,
        tokens: Vec::new(),
    }
    .run()
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    tokens: Vec<Token>,
}

impl Lexer {
    fn run(mut self) -> Vec<Token> {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            if c.is_whitespace() {
                self.bump();
            } else if c == '/' && self.peek(1) == Some('/') {
                self.skip_line_comment();
            } else if c == '/' && self.peek(1) == Some('*') {
                self.skip_block_comment();
            } else if let Some(hashes) = self.raw_string_start() {
                self.skip_raw_string(hashes);
                self.push(TokenKind::Opaque, line);
            } else if c == '"' || (matches!(c, 'b' | 'c') && self.peek(1) == Some('"')) {
                if c != '"' {
                    self.bump();
                }
                self.skip_quoted('"');
                self.push(TokenKind::Opaque, line);
            } else if c == 'b' && self.peek(1) == Some('\'') {
                self.bump();
                self.skip_quoted('\'');
                self.push(TokenKind::Opaque, line);
            } else if c == '\'' {
                self.char_or_lifetime();
                self.push(TokenKind::Opaque, line);
            } else if c == 'r'
                && self.peek(1) == Some('#')
                && self.peek(2).is_some_and(is_ident_start)
            {
                self.pos += 2;
                let ident = self.take_ident();
                self.push(TokenKind::Ident(ident), line);
            } else if is_ident_start(c) {
                let ident = self.take_ident();
                self.push(TokenKind::Ident(ident), line);
            } else if c.is_ascii_digit() {
                self.skip_number();
                self.push(TokenKind::Opaque, line);
            } else if c == ':' && self.peek(1) == Some(':') {
                self.pos += 2;
                self.push(TokenKind::PathSep, line);
            } else {
                self.bump();
                self.push(TokenKind::Punct(c), line);
            }
        }
        self.tokens
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn push(&mut self, kind: TokenKind, line: usize) {
        self.tokens.push(Token { kind, line });
    }

    fn skip_line_comment(&mut self) {
        while let Some(c) = self.peek(0) {
            if c == '\n' {
                return;
            }
            self.bump();
        }
    }

    /// Block comments nest in Rust.
    fn skip_block_comment(&mut self) {
        self.pos += 2;
        let mut depth = 1usize;
        while depth > 0 {
            match (self.peek(0), self.peek(1)) {
                (Some('/'), Some('*')) => {
                    self.pos += 2;
                    depth += 1;
                }
                (Some('*'), Some('/')) => {
                    self.pos += 2;
                    depth -= 1;
                }
                (Some(_), _) => {
                    self.bump();
                }
                (None, _) => return,
            }
        }
    }

    /// `r"`, `r#"`, `br##"`, `cr"`…: returns the number of `#` when a raw string starts here.
    fn raw_string_start(&self) -> Option<usize> {
        let prefix = match (self.peek(0), self.peek(1)) {
            (Some('r'), _) => 1,
            (Some('b' | 'c'), Some('r')) => 2,
            _ => return None,
        };
        let mut hashes = 0;
        while self.peek(prefix + hashes) == Some('#') {
            hashes += 1;
        }
        (self.peek(prefix + hashes) == Some('"')).then_some(hashes)
    }

    fn skip_raw_string(&mut self, hashes: usize) {
        // The opening quote is known to be there: `raw_string_start` saw it.
        while !matches!(self.bump(), Some('"') | None) {}
        loop {
            match self.bump() {
                None => return,
                Some('"') if (0..hashes).all(|i| self.peek(i) == Some('#')) => {
                    self.pos += hashes;
                    return;
                }
                Some(_) => {}
            }
        }
    }

    /// Skips a literal delimited by `quote`, honouring backslash escapes.
    fn skip_quoted(&mut self, quote: char) {
        self.bump();
        while let Some(c) = self.bump() {
            if c == '\\' {
                self.bump();
            } else if c == quote {
                return;
            }
        }
    }

    /// `'a'`, `'\n'` and `'\u{1F600}'` are chars; `'a` and `'static` are lifetimes or labels.
    fn char_or_lifetime(&mut self) {
        if self.peek(1) == Some('\\') || self.peek(2) == Some('\'') {
            self.skip_quoted('\'');
        } else {
            self.bump();
            self.take_ident();
        }
    }

    fn take_ident(&mut self) -> String {
        let start = self.pos;
        while self.peek(0).is_some_and(is_ident_continue) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// Digits, suffixes and a decimal point followed by a digit (`1.5e3f64`, but `0..n`
    /// stays a range).
    fn skip_number(&mut self) {
        while let Some(c) = self.peek(0) {
            let decimal_point = c == '.' && self.peek(1).is_some_and(|d| d.is_ascii_digit());
            if is_ident_continue(c) || decimal_point {
                self.pos += 1;
            } else {
                return;
            }
        }
    }
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<(String, usize)> {
        tokenize(source)
            .into_iter()
            .filter_map(|token| token.ident().map(|ident| (ident.to_owned(), token.line)))
            .collect()
    }

    #[test]
    fn comments_and_literals_hide_their_text() {
        let source = r####"
// Allow in a comment
/* outer /* nested Allow */ still comment Allow */
/// doc Allow
let a = "Allow \" Allow";
let b = r#"Allow "quoted" Allow"#;
let c = br##"Allow"# Allow"##;
let d = b"Allow";
let e = c"Allow";
let f = 'A';
let g = '\'';
let h = b'"';
fn k<'a>(x: &'a str) -> &'static str { x }
"####;
        let names: Vec<String> = idents(source).into_iter().map(|(name, _)| name).collect();
        assert!(!names.contains(&"Allow".to_owned()), "{names:?}");
        assert_eq!(
            names,
            [
                "let", "a", "let", "b", "let", "c", "let", "d", "let", "e", "let", "f", "let", "g"
            ]
            .into_iter()
            .chain(["let", "h", "fn", "k", "x", "str", "str", "x"])
            .map(str::to_owned)
            .collect::<Vec<_>>()
        );
    }

    #[test]
    fn lines_count_newlines_inside_comments_and_strings() {
        let source = "/* one\ntwo */\nlet s = \"a\nb\";\nAllow";
        assert_eq!(idents(source).last(), Some(&("Allow".to_owned(), 5)));
    }

    #[test]
    fn paths_raw_identifiers_and_numbers() {
        let tokens = tokenize("r#D::Allow 1.5f64 0..n");
        let kinds: Vec<TokenKind> = tokens.into_iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            vec![
                TokenKind::Ident("D".to_owned()),
                TokenKind::PathSep,
                TokenKind::Ident("Allow".to_owned()),
                TokenKind::Opaque,
                TokenKind::Opaque,
                TokenKind::Punct('.'),
                TokenKind::Punct('.'),
                TokenKind::Ident("n".to_owned()),
            ]
        );
    }
}
