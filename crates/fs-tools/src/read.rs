//! `read {path, offset?, limit?}`: a window of numbered lines. The file is streamed once:
//! its digest (the version the session then has observed), its line count and the window
//! come from the same pass, so a huge file costs memory only for the lines shown.

use std::fs::File;
use std::io::{ErrorKind, Read};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolrail_tools_core::log::{BoxFuture, DigestBuilder};
use toolrail_tools_core::{
    ClaimMode, Concurrency, SubjectKind, Tool, ToolContext, ToolFailure, ToolKind, ToolOutput,
    ToolResult, ToolSpec,
};

use crate::files::{BINARY, FileTools, Target, failure, io_failure};

/// Bytes looked at for a NUL to tell a binary file.
const SNIFF: usize = 8 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file, relative to the workspace root (or absolute, inside it).
    pub path: String,
    /// The first line to show, counting from 1.
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many lines to show.
    #[serde(default)]
    pub limit: Option<usize>,
}

pub struct ReadTool {
    spec: ToolSpec,
    files: FileTools,
}

impl ReadTool {
    pub const NAME: &'static str = "read";

    pub fn new(files: FileTools) -> Self {
        let limits = &files.limits;
        let description = format!(
            "Read a text file as numbered lines (`number<TAB>line`, from 1). Shows {} lines from `offset` (default 1) unless `limit` says otherwise; lines over {} characters are cut, and at most {} KiB are returned. The result says how many lines the file has and how to read on. Binary files are refused. Reading a file is what allows editing or overwriting it later.",
            limits.read_lines,
            limits.line_chars,
            limits.read_bytes / 1024
        );
        let spec = ToolSpec::for_args::<ReadArgs>(Self::NAME, description)
            .kind(ToolKind::Read)
            .read_only()
            .idempotent()
            .subject("path", SubjectKind::Path);
        Self { spec, files }
    }
}

impl Tool for ReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, args: &Value) -> Concurrency {
        self.files.claim(args, "path", ClaimMode::Read)
    }

    fn execute<'a>(&'a self, ctx: &'a ToolContext, args: &'a Value) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let args: ReadArgs = serde_json::from_value(args.clone())
                .map_err(|error| ToolFailure::new(format!("invalid arguments: {error}")))?;
            let target = self.files.target(&args.path)?;
            let offset = args.offset.unwrap_or(1).max(1);
            let limit = args.limit.unwrap_or(self.files.limits.read_lines).max(1);
            let window = read_window(&target, offset, limit, &self.files)?;
            self.files.observe(ctx, &target, &window.digest).await?;
            Ok(window.into_output(&target, offset))
        })
    }
}

/// One pass over a file.
struct Window {
    digest: String,
    total_lines: usize,
    /// `(number, text)` of the lines shown.
    lines: Vec<(usize, String)>,
    /// Lines of the window left out by the byte cap.
    cut_by_bytes: bool,
}

fn read_window(
    target: &Target,
    offset: usize,
    limit: usize,
    files: &FileTools,
) -> Result<Window, ToolFailure> {
    let mut file =
        File::open(&target.real).map_err(|error| io_failure("opening", target, &error))?;
    let metadata = file
        .metadata()
        .map_err(|error| io_failure("reading", target, &error))?;
    if metadata.is_dir() {
        return Err(ToolFailure::new(format!(
            "`{}` is a folder; list it with glob",
            target.shown
        )));
    }
    let last = offset.saturating_add(limit);
    let (line_chars, byte_cap) = (files.limits.line_chars, files.limits.read_bytes);
    let mut digest = DigestBuilder::new();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut sniffed = 0usize;
    let mut line = 1usize;
    let mut current: Vec<u8> = Vec::new();
    let mut lines = Vec::new();
    let (mut shown_bytes, mut cut_by_bytes) = (0usize, false);
    let mut ends_with_newline = true;
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) => return Err(io_failure("reading", target, &error)),
        };
        let chunk = buffer.get(..read).unwrap_or_default();
        digest.update(chunk);
        ends_with_newline = chunk.last() == Some(&b'\n');
        if sniffed < SNIFF {
            let look = chunk
                .get(..(SNIFF - sniffed).min(chunk.len()))
                .unwrap_or_default();
            if memchr::memchr(0, look).is_some() {
                return Err(failure(
                    BINARY,
                    format!(
                        "`{}` looks binary (a NUL byte in its first 8 KiB; {} bytes in all); read shows text files only",
                        target.shown,
                        metadata.len()
                    ),
                ));
            }
            sniffed += look.len();
        }
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk).chain(std::iter::once(chunk.len())) {
            let piece = chunk.get(start..end).unwrap_or_default();
            let complete = end < chunk.len();
            if (offset..last).contains(&line) && !cut_by_bytes {
                // Keep at most what a cut line shows (4 bytes per character at most).
                let room = (line_chars * 4 + 4).saturating_sub(current.len());
                current.extend_from_slice(piece.get(..piece.len().min(room)).unwrap_or_default());
            }
            if complete {
                if (offset..last).contains(&line) && !cut_by_bytes {
                    let text = show_line(&current, line_chars);
                    if shown_bytes + text.len() > byte_cap {
                        cut_by_bytes = true;
                    } else {
                        shown_bytes += text.len() + 8;
                        lines.push((line, text));
                    }
                }
                current.clear();
                line += 1;
                start = end + 1;
            }
        }
    }
    // A last line without a newline is a line too.
    let total_lines = if !ends_with_newline {
        if (offset..last).contains(&line) && !cut_by_bytes {
            let text = show_line(&current, line_chars);
            if shown_bytes + text.len() > byte_cap {
                cut_by_bytes = true;
            } else {
                lines.push((line, text));
            }
        }
        line
    } else {
        line - 1
    };
    Ok(Window {
        digest: digest.finish(),
        total_lines,
        lines,
        cut_by_bytes,
    })
}

/// The line as text (invalid UTF-8 shown lossily, a trailing `\r` dropped), cut to
/// `max_chars` with a marker saying how much was left out.
fn show_line(bytes: &[u8], max_chars: usize) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    let count = text.chars().count();
    if count <= max_chars {
        return text.into_owned();
    }
    let kept: String = text.chars().take(max_chars).collect();
    format!("{kept}… [line cut: {} more characters]", count - max_chars)
}

impl Window {
    fn into_output(self, target: &Target, offset: usize) -> ToolOutput {
        let total = self.total_lines;
        let first = self.lines.first().map(|(number, _)| *number);
        let end = self.lines.last().map(|(number, _)| *number);
        let mut text = String::new();
        for (number, line) in &self.lines {
            text.push_str(&format!("{number:>6}\t{line}\n"));
        }
        let truncated = self.cut_by_bytes || end.is_some_and(|end| end < total);
        match (first, end) {
            _ if total == 0 => text.push_str(&format!("(`{}` is empty)\n", target.shown)),
            (Some(first), Some(end)) if truncated || first > 1 => {
                text.push_str(&format!("[lines {first}–{end} of {total}"));
                if end < total {
                    text.push_str(&format!("; read on with offset={}", end + 1));
                }
                text.push_str("]\n");
            }
            (None, _) | (_, None) => text.push_str(&format!(
                "[`{}` has {total} lines; offset {offset} is past the end]\n",
                target.shown
            )),
            _ => {}
        }
        let window = json!({
            "path": target.shown,
            "start_line": first,
            "end_line": end,
            "total_lines": total,
            "truncated": truncated,
        });
        let mut details = window.clone();
        if let Some(object) = details.as_object_mut() {
            object.insert("type".to_owned(), json!("read"));
        }
        ToolOutput {
            value: Some(window),
            ..ToolOutput::text(text)
        }
        .with_details(details)
    }
}
