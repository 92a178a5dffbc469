//! From text to simple commands: `brush-parser` builds the syntax tree, this walks it. The
//! parser recurses once per nesting level with large frames, so every parse runs on a stack
//! sized from a bound on its nesting that is computed before parsing; it backtracks without
//! memoizing, so every parse is first priced against the line's budget (`budget/`). What is
//! too long, too nested or too costly to parse safely is an unknown command, never a crash
//! nor a hang.

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast;
use brush_parser::{ParserOptions, parse_tokens, uncached_tokenize_str};

use super::budget::{Budget, line_cost, tokenizer_cost};
use super::words::Word;
use super::{CommandLine, SimpleCommand, UnknownProgram};

/// How a `<(…)` argument is written: a path whose content a command in the line makes.
pub(super) const READ_SUBSTITUTION: &str = "<(…)";

/// Strings parsed in strings (`bash -c`, `eval`, substitutions) are followed this deep.
pub(super) const MAX_NESTING: usize = 8;
/// Longer lines are not parsed (their commands are unknown).
const MAX_TEXT: usize = 512 * 1024;
/// At most this many constructs that may nest (a bound, see [`nesting_bound`]) per parse.
const MAX_OPENERS: usize = 2048;

/// Stack per nesting level the parser may use: about 21 KiB measured in a debug build (a
/// function body), 8 KiB in release; doubled to be safe.
const STACK_PER_LEVEL: usize = 32 * 1024;
/// Stack for the walk, word parsing and nested parses of a level that stay small.
const STACK_BASE: usize = 256 * 1024;

pub(super) fn parse(text: &str) -> CommandLine {
    let mut collector = Collector::default();
    collector.commands_in(text, 0);
    CommandLine {
        commands: collector.commands,
        file_redirections: collector.file_redirections,
    }
}

/// What the walk has found so far.
#[derive(Default)]
pub(super) struct Collector {
    pub(super) commands: Vec<SimpleCommand>,
    pub(super) file_redirections: Vec<String>,
    /// How deep in nested strings the walk is.
    pub(super) depth: usize,
    /// The parsing work left to the line and every string in it.
    pub(super) budget: Budget,
}

pub(super) fn options() -> ParserOptions {
    ParserOptions::default()
}

/// An upper bound on how deep the parser can recurse on `text`: every construct that may open
/// a nesting level counted wherever it stands, quoted or not (`(`, `{`, `$[` and the compound
/// commands' keywords). Counting, never matching, keeps it an upper bound whatever the text.
fn nesting_bound(text: &str) -> usize {
    const KEYWORDS: [&str; 9] = [
        "if", "elif", "while", "until", "for", "select", "case", "coproc", "function",
    ];
    let brackets = text
        .bytes()
        .filter(|byte| matches!(byte, b'(' | b'{'))
        .count();
    let old_arithmetic = text.matches("$[").count();
    let keywords = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| KEYWORDS.contains(word))
        .count();
    brackets + old_arithmetic + keywords
}

/// Whether a run of digits that does not fit an `i32` stands right before `<` or `>`:
/// brush-parser 0.4 unwraps the parse of such a descriptor number and panics, which a
/// program built with `panic = "abort"` could not survive (fuzzed: `2222222222<<EOF`).
/// Flagging more runs than the parser would read as descriptors only makes more lines
/// unknown, the safe side.
fn has_oversized_descriptor(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut start = None;
    for (at, &byte) in bytes.iter().enumerate() {
        if byte.is_ascii_digit() {
            start.get_or_insert(at);
            continue;
        }
        if let Some(from) = start.take()
            && matches!(byte, b'<' | b'>')
            && text
                .get(from..at)
                .is_some_and(|digits| digits.parse::<i32>().is_err())
        {
            return true;
        }
    }
    false
}

impl Collector {
    /// Adds the commands of `text` (a line, or a string a command runs as one), one level
    /// deeper than the current one.
    pub(super) fn commands_in(&mut self, text: &str, depth: usize) {
        if depth > MAX_NESTING || text.len() > MAX_TEXT {
            self.unknown(text, UnknownProgram::TooComplex);
            return;
        }
        if has_oversized_descriptor(text) {
            self.unknown(
                text,
                UnknownProgram::Unparsable {
                    error: "a redirection names a descriptor number past 2^31".to_owned(),
                },
            );
            return;
        }
        let bound = nesting_bound(text);
        if bound > MAX_OPENERS {
            self.unknown(text, UnknownProgram::TooComplex);
            return;
        }
        let needed = STACK_BASE + bound * STACK_PER_LEVEL;
        let outer = std::mem::replace(&mut self.depth, depth);
        // The tree is walked and dropped on the same stack: both recurse like the parser.
        stacker::maybe_grow(needed, needed + STACK_BASE, || {
            match catch_unwind(AssertUnwindSafe(|| self.parse_within_budget(text))) {
                Ok(Ok(program)) => self.program(&program),
                Ok(Err(why)) => self.unknown(text, why),
                Err(_) => self.unknown(
                    text,
                    UnknownProgram::Unparsable {
                        error: "the parser failed".to_owned(),
                    },
                ),
            }
        });
        self.depth = outer;
    }

    /// Tokenizes `text`, then parses its tokens, each if the work it may cost is left in the
    /// budget.
    fn parse_within_budget(&mut self, text: &str) -> Result<ast::Program, UnknownProgram> {
        if !self.budget.take(tokenizer_cost(text)) {
            return Err(UnknownProgram::TooComplex);
        }
        let options = options();
        let unparsable = |error: String| UnknownProgram::Unparsable { error };
        let tokens = uncached_tokenize_str(text, &options.tokenizer_options())
            .map_err(|error| unparsable(error.to_string()))?;
        if !self.budget.take(line_cost(&tokens)) {
            return Err(UnknownProgram::TooComplex);
        }
        parse_tokens(&tokens, &options).map_err(|error| unparsable(error.to_string()))
    }

    /// A command whose program cannot be known, standing for all of `text`.
    pub(super) fn unknown(&mut self, text: &str, why: UnknownProgram) {
        self.commands.push(SimpleCommand::unknown(text.trim(), why));
    }

    fn program(&mut self, program: &ast::Program) {
        for list in &program.complete_commands {
            self.list(list);
        }
    }

    fn list(&mut self, list: &ast::CompoundList) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(pipeline) | ast::AndOr::Or(pipeline) => self.pipeline(pipeline),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) {
        // `!` and `time` only change the status or add a report: looked through.
        for command in &pipeline.seq {
            self.command(command);
        }
    }

    fn command(&mut self, command: &ast::Command) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound);
                self.redirect_list(redirects.as_ref());
            }
            ast::Command::Function(function) => {
                self.word(&function.fname.value);
                self.compound(&function.body.0);
                self.redirect_list(function.body.1.as_ref());
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr);
                self.redirect_list(redirects.as_ref());
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand) {
        match compound {
            ast::CompoundCommand::Arithmetic(arithmetic) => self.scan(&arithmetic.expr.value),
            ast::CompoundCommand::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater]
                    .into_iter()
                    .flatten()
                {
                    self.scan(&expr.value);
                }
                self.list(&clause.body.list);
            }
            ast::CompoundCommand::BraceGroup(group) => self.list(&group.list),
            ast::CompoundCommand::Subshell(subshell) => self.list(&subshell.list),
            ast::CompoundCommand::ForClause(clause) => {
                for value in clause.values.iter().flatten() {
                    self.word(&value.value);
                }
                self.list(&clause.body.list);
            }
            ast::CompoundCommand::CaseClause(clause) => {
                self.word(&clause.value.value);
                for case in &clause.cases {
                    for pattern in &case.patterns {
                        self.word(&pattern.value);
                    }
                    if let Some(list) = &case.cmd {
                        self.list(list);
                    }
                }
            }
            ast::CompoundCommand::IfClause(clause) => {
                self.list(&clause.condition);
                self.list(&clause.then);
                for branch in clause.elses.iter().flatten() {
                    if let Some(condition) = &branch.condition {
                        self.list(condition);
                    }
                    self.list(&branch.body);
                }
            }
            ast::CompoundCommand::WhileClause(clause)
            | ast::CompoundCommand::UntilClause(clause) => {
                self.list(&clause.0);
                self.list(&clause.1.list);
            }
            ast::CompoundCommand::Coprocess(coprocess) => {
                if let Some(name) = &coprocess.name {
                    self.word(&name.value);
                }
                self.command(&coprocess.body);
            }
        }
    }

    /// `[[ … ]]`: its words may hold substitutions. Walked with a work list, not recursion:
    /// `!` may nest without anything the nesting bound counts.
    fn extended_test(&mut self, expr: &ast::ExtendedTestExpr) {
        let mut pending = vec![expr];
        while let Some(expr) = pending.pop() {
            match expr {
                ast::ExtendedTestExpr::And(left, right)
                | ast::ExtendedTestExpr::Or(left, right) => {
                    pending.push(right);
                    pending.push(left);
                }
                ast::ExtendedTestExpr::Not(inner) | ast::ExtendedTestExpr::Parenthesized(inner) => {
                    pending.push(inner)
                }
                ast::ExtendedTestExpr::UnaryTest(_, operand) => {
                    self.word(&operand.value);
                }
                ast::ExtendedTestExpr::BinaryTest(_, left, right) => {
                    self.word(&left.value);
                    self.word(&right.value);
                }
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand) {
        let mut words = Vec::new();
        let mut sets_environment = false;
        for item in simple.prefix.iter().flat_map(|prefix| &prefix.0) {
            match item {
                ast::CommandPrefixOrSuffixItem::AssignmentWord(assignment, _) => {
                    sets_environment = true;
                    self.assignment(assignment);
                }
                ast::CommandPrefixOrSuffixItem::Word(word) => words.push(self.word(&word.value)),
                ast::CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.redirect(redirect),
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(kind, subshell) => {
                    words.push(self.process_substitution(kind, subshell));
                }
            }
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word(&name.value));
        }
        for item in simple.suffix.iter().flat_map(|suffix| &suffix.0) {
            match item {
                // `export X=$(…)`, `declare -a a=(…)`: an argument, whose value may run commands.
                ast::CommandPrefixOrSuffixItem::AssignmentWord(assignment, word) => {
                    self.assignment(assignment);
                    words.push(self.word_quietly(&word.value));
                }
                ast::CommandPrefixOrSuffixItem::Word(word) => words.push(self.word(&word.value)),
                ast::CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.redirect(redirect),
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(kind, subshell) => {
                    words.push(self.process_substitution(kind, subshell));
                }
            }
        }
        // Only assignments and redirections: no program runs.
        if !words.is_empty() {
            self.invocation(words, sets_environment);
        }
    }

    fn assignment(&mut self, assignment: &ast::Assignment) {
        if let ast::AssignmentName::ArrayElementName(_, index) = &assignment.name {
            self.scan(index);
        }
        match &assignment.value {
            ast::AssignmentValue::Scalar(value) => {
                self.word(&value.value);
            }
            ast::AssignmentValue::Array(elements) => {
                for (index, value) in elements {
                    if let Some(index) = index {
                        self.word(&index.value);
                    }
                    self.word(&value.value);
                }
            }
        }
    }

    fn process_substitution(
        &mut self,
        kind: &ast::ProcessSubstitutionKind,
        subshell: &ast::SubshellCommand,
    ) -> Word {
        self.list(&subshell.list);
        // The argument is a `/dev/fd/N` path: known in kind, never a program's name.
        Word::known(match kind {
            ast::ProcessSubstitutionKind::Read => READ_SUBSTITUTION,
            ast::ProcessSubstitutionKind::Write => ">(…)",
        })
    }

    fn redirect_list(&mut self, redirects: Option<&ast::RedirectList>) {
        for redirect in redirects.iter().flat_map(|list| &list.0) {
            self.redirect(redirect);
        }
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect) {
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(file) => {
                    let word = self.word(&file.value);
                    let duplicates = matches!(
                        kind,
                        ast::IoFileRedirectKind::DuplicateInput
                            | ast::IoFileRedirectKind::DuplicateOutput
                    ) && word.is_descriptor();
                    if !duplicates {
                        self.file_redirection(&word);
                    }
                }
                ast::IoFileRedirectTarget::Fd(_) => {}
                ast::IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                    self.list(&subshell.list)
                }
                ast::IoFileRedirectTarget::Duplicate(target) => {
                    let word = self.word(&target.value);
                    if !word.is_descriptor() {
                        self.file_redirection(&word);
                    }
                }
            },
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    self.heredoc(&doc.doc.value);
                }
            }
            ast::IoRedirect::HereString(_, word) => {
                self.word(&word.value);
            }
            ast::IoRedirect::OutputAndError(file, _) => {
                let word = self.word(&file.value);
                self.file_redirection(&word);
            }
        }
    }

    fn file_redirection(&mut self, target: &Word) {
        if !(target.known && target.text == "/dev/null") {
            self.file_redirections.push(target.text.clone());
        }
    }
}
