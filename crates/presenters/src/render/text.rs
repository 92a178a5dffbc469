//! Cards as terminal text: plain, or with ANSI colours. One layout for both; colour only
//! paints it, so the plain text is the ANSI text with the escapes taken out.

use crate::card::{Card, CardBody, CardStatus, DiffLineKind, FactTone, TerminalFact};

/// Lines of a terminal output, diff or program shown before the rest is summarised.
const TAIL_LINES: usize = 12;
const DIFF_LINES: usize = 40;
const MATCH_LINES_PER_FILE: usize = 3;
/// Columns an error message is wrapped at.
const MESSAGE_WIDTH: usize = 100;

/// `text`'s lines, each long one broken at spaces to at most `width` characters (a word
/// longer than that stays whole).
fn wrapped(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut current = String::new();
        for word in line.split(' ') {
            let length = current.chars().count();
            if length > 0 && length + 1 + word.chars().count() > width {
                lines.push(std::mem::take(&mut current));
            } else if length > 0 {
                current.push(' ');
            }
            current.push_str(word);
        }
        lines.push(current);
    }
    lines
}

/// The card as plain text: what logs and pipes get.
pub fn render_plain(card: &Card) -> String {
    Text { colour: false }.card(&harmless(card))
}

/// The card with ANSI colours, for a terminal.
pub fn render_ansi(card: &Card) -> String {
    Text { colour: true }.card(&harmless(card))
}

/// The card with every control character in its text (but newlines and tabs) shown as an
/// escape: tool output and model text must not move a terminal's cursor, set its title or
/// write its clipboard, and plain output must carry no escape sequences.
fn harmless(card: &Card) -> Card {
    fn clean(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => {
                if needs_escapes(text, Newlines::Keep) {
                    *text = escape_controls(text, Newlines::Keep);
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(clean),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(clean),
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }
    // Cards are plain data: through JSON and back is the one walk over every string. Should
    // that ever fail, nothing of the card's text is shown rather than something unsafe.
    let cleaned = serde_json::to_value(card).and_then(|mut value| {
        clean(&mut value);
        serde_json::from_value(value)
    });
    cleaned.unwrap_or_else(|_| Card {
        kind: crate::card::CardKind::Generic,
        tool: String::new(),
        title: "(this card could not be shown safely)".to_owned(),
        status: card.status.clone(),
        body: CardBody::Generic {
            arguments: String::new(),
            output: None,
        },
        effects: Vec::new(),
        notes: Vec::new(),
        children: Vec::new(),
    })
}

/// Whether newlines and tabs stay as they are, or are escaped like every other control
/// character (text that must stay on one row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Newlines {
    /// Newlines and tabs stay: text shown on lines of its own.
    Keep,
    /// Newlines and tabs become `\n` and `\t`.
    Escape,
}

fn escaped(c: char, newlines: Newlines) -> bool {
    c.is_control() && (newlines == Newlines::Escape || (c != '\n' && c != '\t'))
}

fn needs_escapes(text: &str, newlines: Newlines) -> bool {
    text.chars().any(|c| escaped(c, newlines))
}

/// `text` with its control characters shown as escapes (`\u{1b}`, and `\n` with
/// [`Newlines::Escape`]): text a model or a tool controls must not move a terminal's cursor,
/// set its title or write its clipboard.
pub fn escape_controls(text: &str, newlines: Newlines) -> String {
    if !needs_escapes(text, newlines) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c, newlines) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether output to a stream should be coloured: it is a terminal and `NO_COLOR` is unset
/// or empty (<https://no-color.org>).
pub fn colour_wanted(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

#[derive(Clone, Copy)]
enum Paint {
    Bold,
    Dim,
    Red,
    Green,
    Yellow,
    Cyan,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Self::Bold => "1",
            Self::Dim => "2",
            Self::Red => "31",
            Self::Green => "32",
            Self::Yellow => "33",
            Self::Cyan => "36",
        }
    }
}

struct Text {
    colour: bool,
}

impl Text {
    fn paint(&self, paint: Paint, text: &str) -> String {
        if self.colour && !text.is_empty() {
            format!("\u{1b}[{}m{text}\u{1b}[0m", paint.code())
        } else {
            text.to_owned()
        }
    }

    fn card(&self, card: &Card) -> String {
        let mut out = String::new();
        let (mark, paint) = match &card.status {
            CardStatus::Pending => ("·", Paint::Dim),
            CardStatus::Succeeded => ("✓", Paint::Green),
            CardStatus::Failed { .. } => ("✗", Paint::Red),
        };
        out.push_str(&format!(
            "{} {}",
            self.paint(paint, mark),
            self.paint(Paint::Bold, &card.title)
        ));
        if let Some(state) = card.body.shell_state() {
            out.push_str(&format!("  {}", self.fact(state)));
        }
        if let CardStatus::Failed {
            code,
            message,
            synthetic,
        } = &card.status
        {
            let by = if *synthetic { " (by the runtime)" } else { "" };
            out.push_str(&format!("  {}{by}", self.paint(Paint::Red, code)));
            // The whole message: a violation list or a hint is often past its first line.
            for line in wrapped(message, MESSAGE_WIDTH) {
                out.push_str(&format!("\n  {}", self.paint(Paint::Red, &line)));
            }
        }
        out.push('\n');
        for note in &card.notes {
            out.push_str(&format!("  {} {}\n", self.paint(Paint::Cyan, "⚑"), note));
        }
        self.body(&card.body, &card.children, &mut out);
        if !matches!(card.body, CardBody::CodeRun { .. }) {
            self.children(&card.children, &mut out);
        }
        for effect in &card.effects {
            out.push_str(&format!("  {} {effect}\n", self.paint(Paint::Yellow, "⇒")));
        }
        out
    }

    /// Each call a call made, as a card of its own, indented below it.
    fn children(&self, children: &[Card], out: &mut String) {
        for child in children {
            let shown = self.card(child);
            for (n, line) in shown.lines().enumerate() {
                let lead = if n == 0 { "  ↳ " } else { "    " };
                out.push_str(&format!("{lead}{line}\n"));
            }
        }
    }

    /// The body; a program's body shows the calls it made (`children`) between the program
    /// and what it printed.
    fn body(&self, body: &CardBody, children: &[Card], out: &mut String) {
        match body {
            CardBody::Generic { arguments, output } => {
                out.push_str(&format!("  {}\n", self.paint(Paint::Dim, "arguments:")));
                self.lines(out, "    ", arguments, 8, Paint::Dim);
                if let Some(output) = output {
                    self.lines(out, "  │ ", output, TAIL_LINES, Paint::Dim);
                }
            }
            CardBody::Terminal {
                description,
                output,
                ..
            } => {
                if let Some(description) = description {
                    out.push_str(&format!("  {}\n", self.paint(Paint::Dim, description)));
                }
                if let Some(output) = output {
                    self.tail(out, "  │ ", output, TAIL_LINES);
                }
                let facts: Vec<String> = body
                    .terminal_facts()
                    .into_iter()
                    .map(|fact| self.fact(fact))
                    .collect();
                if !facts.is_empty() {
                    out.push_str(&format!("  {}\n", facts.join(" · ")));
                }
            }
            CardBody::Diff { files } => {
                for file in files {
                    out.push_str(&format!(
                        "  {} {} {}\n",
                        file.path,
                        self.paint(Paint::Green, &format!("+{}", file.added)),
                        self.paint(Paint::Red, &format!("−{}", file.removed))
                    ));
                    for line in file.lines.iter().take(DIFF_LINES) {
                        let shown = match line.kind {
                            DiffLineKind::Hunk => self.paint(Paint::Cyan, &line.text),
                            DiffLineKind::Added => {
                                self.paint(Paint::Green, &format!("+ {}", line.text))
                            }
                            DiffLineKind::Removed => {
                                self.paint(Paint::Red, &format!("- {}", line.text))
                            }
                            DiffLineKind::Context => format!("  {}", line.text),
                        };
                        out.push_str(&format!("    {shown}\n"));
                    }
                    if file.lines.len() > DIFF_LINES {
                        out.push_str(&format!(
                            "    {}\n",
                            self.paint(
                                Paint::Dim,
                                &format!("… {} more lines", file.lines.len() - DIFF_LINES)
                            )
                        ));
                    }
                }
            }
            CardBody::Search {
                files,
                omitted_files,
                omitted_matches,
                ..
            } => {
                for file in files {
                    match file.count {
                        Some(count) => out.push_str(&format!("  {} ({count})\n", file.path)),
                        None => out.push_str(&format!("  {}\n", file.path)),
                    }
                    let matches = file.lines.iter().filter(|line| line.is_match);
                    for line in matches.take(MATCH_LINES_PER_FILE) {
                        out.push_str(&format!(
                            "    {} {}\n",
                            self.paint(Paint::Dim, &format!("{}:", line.line)),
                            line.text
                        ));
                    }
                }
                if *omitted_files > 0 || *omitted_matches > 0 {
                    out.push_str(&format!(
                        "  {}\n",
                        self.paint(
                            Paint::Dim,
                            &format!(
                                "… {omitted_files} more files, {omitted_matches} more matches not shown"
                            )
                        )
                    ));
                }
            }
            CardBody::Read { .. } => {
                let words = body.window_words();
                out.push_str(&format!("  {}\n", self.paint(Paint::Dim, &words)));
            }
            CardBody::Web {
                status,
                title,
                excerpt,
                ..
            } => {
                let mut head = Vec::new();
                if let Some(status) = status {
                    head.push(format!("HTTP {status}"));
                }
                if let Some(title) = title {
                    head.push(title.clone());
                }
                if !head.is_empty() {
                    out.push_str(&format!("  {}\n", head.join(" · ")));
                }
                if let Some(excerpt) = excerpt {
                    self.lines(out, "  │ ", excerpt, 4, Paint::Dim);
                }
            }
            CardBody::Todo { items } => {
                for item in items {
                    let (mark, paint) = match item.status.as_str() {
                        "completed" => ("[x]", Paint::Green),
                        "in_progress" => ("[>]", Paint::Yellow),
                        _ => ("[ ]", Paint::Dim),
                    };
                    out.push_str(&format!("  {} {}\n", self.paint(paint, mark), item.content));
                }
            }
            CardBody::Question { questions } => {
                for question in questions {
                    out.push_str(&format!("  ? {}\n", question.question));
                    if !question.options.is_empty() {
                        out.push_str(&format!(
                            "    {}\n",
                            self.paint(Paint::Dim, &question.options.join(" | "))
                        ));
                    }
                    match (&question.state, &question.answer) {
                        (_, Some(answer)) => out
                            .push_str(&format!("    {} {answer}\n", self.paint(Paint::Green, "→"))),
                        (Some(state), None) => out.push_str(&format!(
                            "    {}\n",
                            self.paint(Paint::Yellow, &format!("({state})"))
                        )),
                        (None, None) => {}
                    }
                }
            }
            CardBody::CodeRun {
                program,
                sub_calls,
                logs,
                result,
                ..
            } => {
                self.lines(out, "  │ ", program, TAIL_LINES, Paint::Dim);
                self.children(children, out);
                for call in sub_calls {
                    let outcome = match &call.error {
                        None => self.paint(Paint::Green, "✓"),
                        Some(code) => self.paint(Paint::Red, &format!("✗ {code}")),
                    };
                    out.push_str(&format!("  ↳ {} {} {outcome}\n", call.call_id, call.tool));
                }
                if let Some(logs) = logs {
                    self.tail(out, "  log ", logs, TAIL_LINES);
                }
                if let Some(result) = result {
                    out.push_str(&format!("  = {}\n", first_line(result)));
                }
            }
        }
    }

    /// A terminal fact in words, coloured by its tone.
    fn fact(&self, fact: TerminalFact) -> String {
        let paint = match fact.tone() {
            FactTone::Note => Paint::Yellow,
            FactTone::Bad => Paint::Red,
            FactTone::Good => Paint::Green,
            FactTone::Quiet => Paint::Dim,
        };
        self.paint(paint, &fact.words())
    }

    /// The first `max` lines of `text`, then how many more there were.
    fn lines(&self, out: &mut String, prefix: &str, text: &str, max: usize, paint: Paint) {
        let total = text.lines().count();
        for line in text.lines().take(max) {
            out.push_str(&format!("{prefix}{}\n", self.paint(paint, line)));
        }
        if total > max {
            out.push_str(&format!(
                "{prefix}{}\n",
                self.paint(Paint::Dim, &format!("… {} more lines", total - max))
            ));
        }
    }

    /// The last `max` lines of `text`, after how many earlier ones were left out.
    fn tail(&self, out: &mut String, prefix: &str, text: &str, max: usize) {
        let lines: Vec<&str> = text.lines().collect();
        let skip = lines.len().saturating_sub(max);
        if skip > 0 {
            out.push_str(&format!(
                "{prefix}{}\n",
                self.paint(Paint::Dim, &format!("… {skip} earlier lines"))
            ));
        }
        for line in lines.iter().skip(skip) {
            out.push_str(&format!("{prefix}{line}\n"));
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
