//! The word grammar's reading of a word or a here-document's body, and what it costs: each
//! construct it nests, with the factor by which a failure inside it multiplies the work.

/// What a word-level parse reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum WordKind {
    /// A word of a command, or text read as one (the inside of `${…}`, an arithmetic
    /// expression).
    Word,
    /// A here-document's body: quotes are text.
    HereDocument,
}

/// The constructs the word grammar nests, with what reads them again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Frame {
    /// The word itself: parentheses and braces are text.
    Word,
    /// A here-document's body, where only `$`, backquotes and `\` are special; text before an
    /// expansion is read by looking ahead for the expansion (2×).
    HereDocument,
    /// `"…"`, read like a here-document (2×).
    Double,
    /// `$"…"`: tried as a translated string, then as `$` and `"…"` (4×).
    Gettext,
    /// `$(…)`, and `(…)` or an extended glob's `@(…)` inside one: on failure, `$` and `(`
    /// are read as text and a subshell (3×).
    Command,
    /// `${name…}` after its name: a word up to `}`, tried by each operator sharing a prefix
    /// (`%%` and `%`, `:-` and `:`; 2×).
    Parameter,
    /// `${name:offset}`: arithmetic up to `}`.
    Offset,
    /// `${name[…]}`: the index, arithmetic up to `]`, parsed again by each of the twenty
    /// alternatives of `${…}` that begin with a name (20×).
    Index,
    /// `$((…))`: tried as arithmetic, which ends only at `))`, then as `$(` and a subshell
    /// (6× for both levels).
    Arithmetic,
    /// `$[…]`, or an array's index inside arithmetic: up to `]` (2×).
    Bracket,
    /// `(…)` inside arithmetic (2×).
    Group,
}

impl Frame {
    fn weight(self) -> u64 {
        match self {
            Self::Word => 1,
            Self::HereDocument | Self::Double => 2,
            Self::Gettext
            | Self::Command
            | Self::Parameter
            | Self::Offset
            | Self::Bracket
            | Self::Group => 4,
            Self::Arithmetic => 16,
            Self::Index => 32,
        }
    }

    /// Whether `'`, `"` and `\` quote as they do in a word.
    fn quotes(self) -> bool {
        !matches!(self, Self::HereDocument | Self::Double | Self::Gettext)
    }

    /// Whether `(` opens a group and `[` an index.
    fn arithmetic(self) -> bool {
        matches!(
            self,
            Self::Offset | Self::Index | Self::Arithmetic | Self::Bracket | Self::Group
        )
    }
}

/// The estimated work of parsing `text` with the word grammar.
///
/// A text that reads cleanly — every construct closed where the grammar closes it — is
/// charged along that reading. One that does not makes the grammar fall back (`$(` read as
/// text, say), and a fallback may read the rest differently: `'` quotes inside `$(…)` but is
/// text in the here-document or `"…"` around it. Such a text is charged as if every opener
/// in it stayed open to its end, however it is quoted or closed: no reading nests deeper.
pub(crate) fn word_cost(text: &str, kind: WordKind) -> u64 {
    let top = match kind {
        WordKind::Word => Frame::Word,
        WordKind::HereDocument => Frame::HereDocument,
    };
    reading_cost(text.as_bytes(), top, None)
}

/// The work of reading what follows a name in `name[index]=value`, from its `[`: the index
/// is arithmetic up to `]`; the rest (`=value`) is read as a word, which prices the plain
/// bytes the grammar reads there no lower.
pub(crate) fn index_cost(bytes: &[u8]) -> u64 {
    reading_cost(bytes, Frame::Word, Some(Frame::Bracket))
}

/// Where the line that `bytes` starts on ends for the tokenizer: the first newline that no
/// quote, substitution or expansion holds, or `None` when that is not clear (the line may
/// then run to the end). A newline read as held when the tokenizer ends the line there only
/// makes the line longer.
pub(crate) fn line_end(bytes: &[u8]) -> Option<usize> {
    let mut scan = Scan::new(bytes, Frame::Word);
    scan.braces_as_tokenized = true;
    while let Some(byte) = scan.byte(scan.at) {
        if byte == b'\n' && scan.open.len() == 1 {
            return Some(scan.at);
        }
        scan.advance()?;
    }
    None
}

/// The cost of reading `bytes` in `top`, its first byte opening `first` when given.
fn reading_cost(bytes: &[u8], top: Frame, first: Option<Frame>) -> u64 {
    let mut scan = Scan::new(bytes, top);
    if let Some(frame) = first {
        scan.cost = top.weight();
        scan.at = 1;
        scan.push(frame);
    }
    scan.clean_cost()
        .unwrap_or_else(|| every_opener_open(bytes, top))
}

/// The cost of a text read as if no construct in it ever closed.
fn every_opener_open(bytes: &[u8], top: Frame) -> u64 {
    let mut product = top.weight();
    let mut cost = 0u64;
    let mut parameter_seen = false;
    let mut previous = 0u8;
    for &byte in bytes {
        cost = cost.saturating_add(product);
        let weight = match byte {
            b'(' | b'{' => Frame::Command.weight(),
            b'[' if parameter_seen => Frame::Index.weight(),
            b'[' => Frame::Bracket.weight(),
            b'"' if previous == b'$' => Frame::Gettext.weight(),
            b'"' => Frame::Double.weight(),
            _ => 1,
        };
        parameter_seen |= byte == b'{' && previous == b'$';
        product = product.saturating_mul(weight);
        previous = byte;
    }
    cost
}

/// A reading of a text as the word grammar reads it when nothing fails.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The constructs open at `at`, each with the product of the weights up to it.
    open: Vec<(Frame, u64)>,
    cost: u64,
    /// Whether `${` opens whatever follows, as the tokenizer reads it (to its `}`), rather
    /// than only before a name, as the word grammar does.
    braces_as_tokenized: bool,
}

/// What one step of the reading found.
enum Step {
    /// Read this many bytes at the current weight.
    Read(usize),
    /// Read this many bytes, after which the construct is open.
    Open(usize, Frame),
    /// Read this many bytes, after which `${name` and its index are open.
    OpenIndex(usize),
    /// Read this many bytes, which close the innermost construct.
    Close(usize),
    /// Read the `]` of an index, after which the parameter is an offset (`${a[1]:2}`).
    CloseIndexIntoOffset,
    /// The grammar would fail here.
    Fails,
}

impl<'a> Scan<'a> {
    fn new(bytes: &'a [u8], top: Frame) -> Self {
        Self {
            bytes,
            at: 0,
            open: vec![(top, top.weight())],
            cost: 0,
            braces_as_tokenized: false,
        }
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.bytes.get(at).copied()
    }

    fn product(&self) -> u64 {
        self.open.last().map_or(1, |&(_, product)| product)
    }

    fn push(&mut self, frame: Frame) {
        let product = self.product().saturating_mul(frame.weight());
        self.open.push((frame, product));
    }

    /// The cost of a clean reading, or `None` when the text does not read cleanly.
    fn clean_cost(mut self) -> Option<u64> {
        while self.at < self.bytes.len() {
            self.advance()?;
        }
        (self.open.len() == 1).then_some(self.cost)
    }

    /// Reads one step; `None` where the grammar would fail.
    fn advance(&mut self) -> Option<()> {
        let &(frame, product) = self.open.last()?;
        let len = match self.step(frame) {
            Step::Read(len) => len,
            Step::Open(len, frame) => {
                self.push(frame);
                len
            }
            Step::OpenIndex(len) => {
                self.push(Frame::Parameter);
                self.push(Frame::Index);
                len
            }
            Step::Close(len) => {
                self.open.pop();
                len
            }
            Step::CloseIndexIntoOffset => {
                self.open.pop();
                if let Some(parameter) = self.open.last_mut() {
                    parameter.0 = Frame::Offset;
                }
                1
            }
            Step::Fails => return None,
        };
        let charged = u64::try_from(len).unwrap_or(u64::MAX);
        self.cost = self.cost.saturating_add(product.saturating_mul(charged));
        self.at += len;
        // The top frame is never closed: a stray closer is text in it.
        (!self.open.is_empty()).then_some(())
    }

    fn step(&self, frame: Frame) -> Step {
        let at = self.at;
        let Some(byte) = self.byte(at) else {
            return Step::Read(1);
        };
        let next = self.byte(at + 1);
        match byte {
            b'$' => self.dollar(frame),
            b'`' => match self.backquote_end(at + 1) {
                Some(end) => Step::Read(end + 1 - at),
                // Inside `$(…)` and `"…"` a lone backquote is text; elsewhere the word fails.
                None if matches!(frame, Frame::Command | Frame::Double | Frame::Gettext) => {
                    Step::Read(1)
                }
                None => Step::Fails,
            },
            b'\\' => {
                let escapes = match frame {
                    Frame::Double | Frame::Gettext => {
                        matches!(next, Some(b'$' | b'`' | b'"' | b'\\'))
                    }
                    Frame::HereDocument => matches!(next, Some(b'$' | b'`' | b'\\')),
                    Frame::Word
                    | Frame::Command
                    | Frame::Parameter
                    | Frame::Offset
                    | Frame::Index
                    | Frame::Arithmetic
                    | Frame::Bracket
                    | Frame::Group => next.is_some(),
                };
                Step::Read(if escapes { 2 } else { 1 })
            }
            b'\'' if frame.quotes() => match self.find(at + 1, b'\'') {
                Some(end) => Step::Read(end + 1 - at),
                // `$(…)` reads a lone `'` as text.
                None if frame == Frame::Command => Step::Read(1),
                None => Step::Fails,
            },
            b'"' if frame.quotes() => Step::Open(1, Frame::Double),
            b'"' if matches!(frame, Frame::Double | Frame::Gettext) => Step::Close(1),
            b'(' if frame == Frame::Command => Step::Open(1, Frame::Command),
            b'(' if frame.arithmetic() => Step::Open(1, Frame::Group),
            b'[' if frame.arithmetic() => Step::Open(1, Frame::Bracket),
            b')' if matches!(frame, Frame::Command | Frame::Group) => Step::Close(1),
            // `$((…))` ends at `))`; a lone `)` in it is text to the arithmetic reading, and
            // the reading as `$(` and a subshell nests no deeper.
            b')' if frame == Frame::Arithmetic && next == Some(b')') => Step::Close(2),
            b']' if frame == Frame::Bracket => Step::Close(1),
            b']' if frame == Frame::Index => match self.operator(at + 1) {
                Some(Frame::Parameter) => Step::Close(1),
                Some(Frame::Offset) => Step::CloseIndexIntoOffset,
                // A second index, or what may not follow a name.
                Some(_) | None => Step::Fails,
            },
            b'}' if matches!(frame, Frame::Parameter | Frame::Offset) => Step::Close(1),
            _ => Step::Read(1),
        }
    }

    /// `$` and what follows it.
    fn dollar(&self, frame: Frame) -> Step {
        let at = self.at;
        match (self.byte(at + 1), self.byte(at + 2)) {
            (Some(b'('), Some(b'(')) => Step::Open(3, Frame::Arithmetic),
            (Some(b'('), _) => Step::Open(2, Frame::Command),
            (Some(b'['), _) => Step::Open(2, Frame::Bracket),
            (Some(b'{'), _) if self.braces_as_tokenized => Step::Open(2, Frame::Parameter),
            (Some(b'{'), _) => self.parameter(),
            (Some(b'\''), _) if frame.quotes() => match self.ansi_c_end(at + 2) {
                Some(end) => Step::Read(end + 1 - at),
                None => Step::Fails,
            },
            (Some(b'"'), _) if frame.quotes() => Step::Open(2, Frame::Gettext),
            _ => Step::Read(1),
        }
    }

    /// `${`: a parameter's name, then `}`, an index or an operator. What cannot start a name
    /// makes `${` text to the grammar; a name followed by anything else fails.
    fn parameter(&self) -> Step {
        let start = self.at + 2;
        let is_special = |byte: u8| b"@*#?-$!".contains(&byte);
        let is_name = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_';
        let Some(first) = self.byte(start) else {
            return Step::Read(1);
        };
        if !(is_name(first) || is_special(first)) {
            return Step::Read(1);
        }
        // `${#x}` and `${!x}`; in `${#}` and `${!}` the sign is the name.
        let mut name = start;
        if matches!(first, b'#' | b'!')
            && self
                .byte(start + 1)
                .is_some_and(|byte| is_name(byte) || is_special(byte))
        {
            name += 1;
        }
        let end = match self.byte(name) {
            Some(byte) if byte.is_ascii_digit() => self.skip(name, |b| b.is_ascii_digit()),
            Some(byte) if is_name(byte) => self.skip(name, is_name),
            Some(_) => name + 1,
            None => return Step::Fails,
        };
        match self.operator(end) {
            // The `[` is read with the index open.
            Some(Frame::Index) => Step::OpenIndex(end + 1 - self.at),
            Some(frame) => Step::Open(end - self.at, frame),
            None => Step::Fails,
        }
    }

    /// What follows a parameter's name (or its index) at `at`: `}` or an operator start a
    /// word (`Parameter`), `:` not followed by `-=?+` an offset, `[` an index; anything else
    /// fails.
    fn operator(&self, at: usize) -> Option<Frame> {
        match self.byte(at)? {
            b'[' => Some(Frame::Index),
            b':' if !matches!(self.byte(at + 1), Some(b'-' | b'=' | b'?' | b'+')) => {
                Some(Frame::Offset)
            }
            b'}' | b':' | b'-' | b'=' | b'?' | b'+' | b'%' | b'#' | b'/' | b'^' | b',' | b'@'
            | b'*' => Some(Frame::Parameter),
            _ => None,
        }
    }

    fn skip(&self, from: usize, keep: impl Fn(u8) -> bool) -> usize {
        let mut at = from;
        while self.byte(at).is_some_and(&keep) {
            at += 1;
        }
        at
    }

    fn find(&self, from: usize, byte: u8) -> Option<usize> {
        let rest = self.bytes.get(from..)?;
        rest.iter()
            .position(|&b| b == byte)
            .map(|offset| from + offset)
    }

    /// The closing backquote of a substitution whose body starts at `from` (`` \` `` and
    /// `\\` are escapes in it).
    fn backquote_end(&self, from: usize) -> Option<usize> {
        let mut at = from;
        loop {
            match self.byte(at)? {
                b'`' => return Some(at),
                b'\\' if matches!(self.byte(at + 1), Some(b'`' | b'\\')) => at += 2,
                _ => at += 1,
            }
        }
    }

    /// The closing quote of `$'…'` whose inside starts at `from` (`\'` and `\\` are escapes).
    fn ansi_c_end(&self, from: usize) -> Option<usize> {
        let mut at = from;
        loop {
            match self.byte(at)? {
                b'\'' => return Some(at),
                b'\\' if matches!(self.byte(at + 1), Some(b'\'' | b'\\')) => at += 2,
                _ => at += 1,
            }
        }
    }
}
