//! `grep {pattern, path?, glob?, case_insensitive?, context?, output?}` with ripgrep's own
//! libraries, in-process: a parallel walk honouring `.gitignore`, binary files skipped,
//! matches grouped by file, capped with counts of what was left out. Paths hidden from tools
//! are left out (and counted), whether named directly, reached through a folder or through
//! a symlink. The walk only proposes names: each file is opened beneath its root (a regular
//! file, reached through no symlink) and searched through that descriptor.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolrail_tools_core::log::details::{self, SearchHits, SearchLine};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkState;
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::{
    CancellationToken, ClaimMode, Concurrency, ToolContext, ToolFailure, ToolKind, ToolOutput,
    ToolResult, ToolSpec, TypedTool, arguments::violations,
};

use crate::beneath::{self, Kind, Opened};
use crate::files::{FileTools, LOSSY_NAME_NOTE, blocking, looking, maybe_lossy};
use crate::glob::{hidden_note, path_glob, walker};
use crate::target::Target;

/// What `grep` returns.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GrepOutput {
    /// Matching lines with their numbers, grouped by file.
    #[default]
    Content,
    /// Only the files that match.
    Files,
    /// The number of matching lines per file.
    Count,
}

/// The arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A regular expression (Rust regex syntax, as ripgrep's).
    pub pattern: String,
    /// The folder or file to search (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files whose path relative to `path` matches this glob, e.g. `**/*.rs`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Match letters in either case (default false).
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines of context before and after each match (content output only).
    #[serde(default)]
    pub context: Option<usize>,
    /// `content` (default), `files` or `count`.
    #[serde(default)]
    pub output: GrepOutput,
}

/// `grep`: a regular-expression search of file contents with ripgrep's engine, in-process.
pub struct GrepTool {
    files: FileTools,
}

impl GrepTool {
    /// The tool's name, as the model calls it and rules match it.
    pub const NAME: &'static str = "grep";

    /// `grep` over `files`, whose result cap its description states.
    pub fn new(files: FileTools) -> Self {
        Self { files }
    }
}

fn matcher(pattern: &str, case_insensitive: bool) -> Result<RegexMatcher, String> {
    // The pattern as written is checked first, so an error names its place in what the
    // model wrote (the matcher reports it inside its own wrapping of the pattern).
    if let Err(error) = regex_syntax::Parser::new().parse(pattern) {
        let (span, kind) = match &error {
            regex_syntax::Error::Parse(error) => (Some(*error.span()), error.kind().to_string()),
            regex_syntax::Error::Translate(error) => {
                (Some(*error.span()), error.kind().to_string())
            }
            _ => (None, error.to_string()),
        };
        return Err(match span {
            Some(span) => format!(
                "not a valid regular expression: {kind} at character {} (`{}`)",
                span.start.column,
                pattern
                    .get(
                        span.start.offset
                            ..span
                                .end
                                .offset
                                .max(span.start.offset + 1)
                                .min(pattern.len())
                    )
                    .unwrap_or_default()
            ),
            None => format!("not a valid regular expression: {kind}"),
        });
    }
    RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|error| format!("not a valid regular expression: {error}"))
}

impl TypedTool for GrepTool {
    type Args = GrepArgs;

    fn spec(&self) -> ToolSpec {
        let description = format!(
            "Search file contents with a regular expression (ripgrep's engine and rules): files ignored by .gitignore, binary files and paths hidden from tools are skipped. `output` is content (matching lines with numbers, grouped by file; `context` adds lines around them), files (the matching files) or count (matching lines per file). At most {} results, with counts of what was left out.",
            self.files.limits.grep_results
        );
        looking(
            ToolSpec::for_args::<GrepArgs>(Self::NAME, description),
            ToolKind::Search,
            "the folder searched",
        )
    }

    fn concurrency(&self, args: &GrepArgs) -> Concurrency {
        self.files
            .claim(args.path.as_deref().unwrap_or("."), ClaimMode::Read)
    }

    fn check(&self, args: &GrepArgs) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if let Err(why) = matcher(&args.pattern, args.case_insensitive) {
            problems.push(format!("/pattern: {why}"));
        }
        if let Some(Err(why)) = args.glob.as_deref().map(path_glob) {
            problems.push(format!("/glob: {why}"));
        }
        violations(problems)
    }

    async fn run(&self, ctx: &ToolContext, args: GrepArgs) -> ToolResult {
        let base = self.files.target(args.path.as_deref().unwrap_or("."))?;
        if self.files.hides(&base) {
            return Ok(report(Vec::new(), &args, &base, &self.files, 1));
        }
        let hidden = Arc::new(AtomicUsize::new(0));
        let search = Search {
            matcher: matcher(&args.pattern, args.case_insensitive).map_err(ToolFailure::new)?,
            glob: args
                .glob
                .as_deref()
                .map(path_glob)
                .transpose()
                .map_err(ToolFailure::new)?,
            context: if args.output == GrepOutput::Content {
                args.context.unwrap_or(0).min(20)
            } else {
                0
            },
            output: args.output,
            base: base.clone(),
            files: self.files.clone(),
            cancel: ctx.cancellation().clone(),
            hidden: Arc::clone(&hidden),
        };
        let found = blocking("the search", move || search.run()).await?;
        if ctx.cancellation().is_cancelled() {
            return Err(ToolFailure::new("cancelled while searching"));
        }
        let hidden = hidden.load(Ordering::Relaxed);
        Ok(report(found, &args, &base, &self.files, hidden))
    }
}

/// One file's hits.
struct FileHits {
    path: String,
    /// `(line number, text, is a match)`, in file order.
    lines: Vec<(u64, String, bool)>,
    matches: usize,
}

struct Search {
    matcher: RegexMatcher,
    glob: Option<globset::GlobMatcher>,
    context: usize,
    output: GrepOutput,
    base: Target,
    files: FileTools,
    cancel: CancellationToken,
    /// Paths hidden from tools the walk left out.
    hidden: Arc<AtomicUsize>,
}

impl Search {
    fn run(self) -> Result<Vec<FileHits>, ToolFailure> {
        let root = self.base.open_root()?;
        let found = Mutex::new(Vec::new());
        let single_file = beneath::probe(root.as_fd(), &self.base.relative)
            .is_ok_and(|metadata| Kind::of(&metadata) != Kind::Folder);
        if single_file {
            let mut searcher = self.searcher();
            if let Some(hits) = self.search(&root, &self.base, &mut searcher) {
                found.lock().push(hits);
            }
            return Ok(found.into_inner());
        }
        walker(&self.base.real, &self.files, &self.hidden)
            .build_parallel()
            .run(|| {
                let mut searcher = self.searcher();
                let (found, this, root) = (&found, &self, &root);
                Box::new(move |entry| {
                    if this.cancel.is_cancelled() {
                        return WalkState::Quit;
                    }
                    let Ok(entry) = entry else {
                        return WalkState::Continue;
                    };
                    if !entry.file_type().is_some_and(|kind| kind.is_file()) {
                        return WalkState::Continue;
                    }
                    let Ok(relative) = entry.path().strip_prefix(&this.base.real) else {
                        return WalkState::Continue;
                    };
                    if this
                        .glob
                        .as_ref()
                        .is_some_and(|glob| !glob.is_match(relative))
                    {
                        return WalkState::Continue;
                    }
                    let file = this.base.child(relative, &this.files);
                    if let Some(hits) = this.search(root, &file, &mut searcher) {
                        found.lock().push(hits);
                    }
                    WalkState::Continue
                })
            });
        let mut found = found.into_inner();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(found)
    }

    fn searcher(&self) -> Searcher {
        SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .before_context(self.context)
            .after_context(self.context)
            .build()
    }

    /// Searches one file, opened beneath the root; anything but a regular file reached
    /// through no symlink is skipped silently.
    fn search(&self, root: &OwnedFd, file: &Target, searcher: &mut Searcher) -> Option<FileHits> {
        let Ok(Opened::File(opened, _)) = beneath::open_regular(root.as_fd(), &file.relative)
        else {
            return None;
        };
        let mut sink = Collect {
            lines: Vec::new(),
            matches: 0,
            keep_lines: self.output == GrepOutput::Content,
            first_only: self.output == GrepOutput::Files,
            line_chars: self.files.limits.line_chars,
        };
        let searched = searcher.search_file(&self.matcher, &opened, &mut sink);
        (searched.is_ok() && sink.matches > 0).then(|| FileHits {
            path: file.shown.clone(),
            lines: sink.lines,
            matches: sink.matches,
        })
    }
}

struct Collect {
    lines: Vec<(u64, String, bool)>,
    matches: usize,
    keep_lines: bool,
    first_only: bool,
    line_chars: usize,
}

impl Collect {
    fn keep(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) {
        if !self.keep_lines {
            return;
        }
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let text = if text.chars().count() > self.line_chars {
            let kept: String = text.chars().take(self.line_chars).collect();
            format!("{kept}… [line cut]")
        } else {
            text.to_owned()
        };
        self.lines.push((number.unwrap_or(0), text, is_match));
    }
}

impl Sink for Collect {
    type Error = io::Error;

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.matches += 1;
        self.keep(found.line_number(), found.bytes(), true);
        Ok(!self.first_only)
    }

    fn context(
        &mut self,
        _searcher: &Searcher,
        context: &SinkContext<'_>,
    ) -> Result<bool, io::Error> {
        self.keep(context.line_number(), context.bytes(), false);
        Ok(true)
    }
}

fn report(
    found: Vec<FileHits>,
    args: &GrepArgs,
    base: &Target,
    files: &FileTools,
    hidden: usize,
) -> ToolOutput {
    let cap = files.limits.grep_results;
    let total_files = found.len();
    let total_matches: usize = found.iter().map(|hits| hits.matches).sum();
    let mut text = String::new();
    let mut shown_files = Vec::new();
    let (mut budget, mut omitted_matches, mut omitted_files) = (cap, 0usize, 0usize);
    let mut lossy_shown = false;
    for hits in &found {
        if budget == 0 {
            omitted_files += 1;
            omitted_matches += hits.matches;
            continue;
        }
        lossy_shown |= maybe_lossy(&hits.path);
        match args.output {
            GrepOutput::Files => {
                text.push_str(&format!("{}\n", hits.path));
                budget -= 1;
                shown_files.push(SearchHits {
                    path: hits.path.clone(),
                    ..SearchHits::default()
                });
            }
            GrepOutput::Count => {
                text.push_str(&format!("{}: {}\n", hits.path, hits.matches));
                budget -= 1;
                shown_files.push(SearchHits {
                    path: hits.path.clone(),
                    count: Some(hits.matches as u64),
                    ..SearchHits::default()
                });
            }
            GrepOutput::Content => {
                text.push_str(&format!("{}\n", hits.path));
                let mut lines = Vec::new();
                let mut kept_matches = 0;
                for (number, line, is_match) in &hits.lines {
                    if *is_match {
                        if budget == 0 {
                            break;
                        }
                        budget -= 1;
                        kept_matches += 1;
                    }
                    let mark = if *is_match { ':' } else { '-' };
                    text.push_str(&format!("{number:>6}{mark} {line}\n"));
                    lines.push(SearchLine {
                        line: *number,
                        text: line.clone(),
                        is_match: *is_match,
                    });
                }
                omitted_matches += hits.matches - kept_matches;
                shown_files.push(SearchHits {
                    path: hits.path.clone(),
                    count: None,
                    lines,
                });
            }
        }
    }
    if found.is_empty() {
        text = format!("No matches for `{}` under `{}`.", args.pattern, base.shown);
    }
    if omitted_files > 0 || omitted_matches > 0 {
        text.push_str(&format!(
            "[{omitted_matches} more matching lines in {omitted_files} more files not shown; narrow the search]\n"
        ));
    }
    if lossy_shown {
        text.push_str(&format!("[{LOSSY_NAME_NOTE}]\n"));
    }
    if let Some(note) = hidden_note(hidden) {
        if found.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("{note}\n"));
    }
    ToolOutput {
        value: Some(json!({
            "files": total_files, "matches": total_matches,
            "omitted_files": omitted_files, "omitted_matches": omitted_matches,
            "hidden": hidden,
        })),
        ..ToolOutput::text(text.trim_end().to_owned())
    }
    .with_details(details::Search {
        pattern: args.pattern.clone(),
        files: shown_files,
        omitted_files: omitted_files as u64,
        omitted_matches: omitted_matches as u64,
    })
}
