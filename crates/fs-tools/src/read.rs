//! `read {path, offset?, limit?}`: a window of numbered lines. The file is streamed once:
//! its digest (the version the session then has observed), its line count and the window
//! come from the same pass, so a huge file costs memory only for the lines shown.

use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read};
use std::sync::Arc;
use toolrail_tools_core::log::details;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::{
    ClaimMode, Concurrency, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool,
};

use crate::files::{BINARY, FileTools, blocking, looking};
use crate::target::{Existing, Target};
use crate::version::VersionDigest;

/// Bytes looked at for a NUL to tell a binary file.
const SNIFF: usize = 8 * 1024;

/// The arguments of `read`.
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

/// `read`: a window of a text file's numbered lines. What it shows becomes the version
/// `write` and `edit` may change.
pub struct ReadTool {
    files: FileTools,
}

impl ReadTool {
    /// The tool's name, as the model calls it and rules match it.
    pub const NAME: &'static str = "read";

    /// `read` over `files`, whose limits its description states.
    pub fn new(files: FileTools) -> Self {
        Self { files }
    }
}

impl TypedTool for ReadTool {
    type Args = ReadArgs;

    fn spec(&self) -> ToolSpec {
        let limits = &self.files.limits;
        let description = format!(
            "Read a text file as numbered lines (`number<TAB>line`, from 1). Shows {} lines from `offset` (default 1) unless `limit` says otherwise; lines over {} characters are cut, and at most {} KiB are returned. The result says how many lines the file has and how to read on. Binary files are refused, and so are FIFOs, sockets, devices and paths hidden from tools. Reading a file is what allows editing or overwriting it later.",
            limits.read_lines,
            limits.line_chars,
            limits.read_bytes / 1024
        );
        looking(
            ToolSpec::for_args::<ReadArgs>(Self::NAME, description),
            ToolKind::Read,
            "the file",
        )
    }

    fn concurrency(&self, args: &ReadArgs) -> Concurrency {
        self.files.claim(&args.path, ClaimMode::Read)
    }

    async fn run(&self, ctx: &ToolContext, args: ReadArgs) -> ToolResult {
        let target = self.files.target_to_read(&args.path)?;
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(self.files.limits.read_lines).max(1);
        // Reading and hashing block: off the scheduler's thread.
        let (shared, files) = (target.clone(), self.files.clone());
        let window = blocking("reading", move || {
            let (file, metadata) = match shared.open_existing()? {
                Existing::File(file, metadata) => (file, metadata),
                Existing::Folder => {
                    return Err(ToolFailure::new(format!(
                        "`{}` is a folder; list it with glob",
                        shared.shown
                    )));
                }
                Existing::Missing => {
                    let missing = std::io::Error::from(ErrorKind::NotFound);
                    return Err(shared.io_failure("opening", &missing));
                }
            };
            read_window(file, &metadata, &shared, offset, limit, &files)
        })
        .await?;
        self.files.observe(ctx, &target, &window.digest).await?;
        Ok(window.into_output(&target, offset))
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

/// Files larger than this are hashed on a second thread while the first one scans lines.
const HASH_ASIDE: u64 = 1 << 20;

fn read_window(
    mut file: File,
    metadata: &Metadata,
    target: &Target,
    offset: usize,
    limit: usize,
    files: &FileTools,
) -> Result<Window, ToolFailure> {
    let mut scanner = Scanner::new(offset, limit, files);
    let mut read_next = |buffer: &mut Vec<u8>| -> Result<bool, ToolFailure> {
        buffer.resize(256 * 1024, 0);
        loop {
            match file.read(buffer) {
                Ok(read) => {
                    buffer.truncate(read);
                    return Ok(read > 0);
                }
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => return Err(target.io_failure("reading", &error)),
            }
        }
    };
    let binary = || {
        ToolFailure::with_code(
            BINARY,
            format!(
                "`{}` looks binary (a NUL byte in its first 8 KiB; {} bytes in all); read shows text files only",
                target.shown,
                metadata.len()
            ),
        )
    };
    let digest = if metadata.len() > HASH_ASIDE {
        // The hash (the slowest part) runs beside the scan; chunks are shared, not copied.
        std::thread::scope(|scope| {
            let (chunks, received) = std::sync::mpsc::sync_channel::<Arc<Vec<u8>>>(8);
            let hasher = scope.spawn(move || {
                let mut digest = VersionDigest::new();
                for chunk in received {
                    digest.update(&chunk);
                }
                digest.finish()
            });
            let scanned = (|| {
                loop {
                    let mut buffer = Vec::new();
                    if !read_next(&mut buffer)? {
                        return Ok(());
                    }
                    let chunk = Arc::new(buffer);
                    let _ = chunks.send(Arc::clone(&chunk));
                    scanner.feed(&chunk).map_err(|()| binary())?;
                }
            })();
            drop(chunks);
            let digest = hasher
                .join()
                .map_err(|_| ToolFailure::new("hashing the file failed"));
            scanned.and(digest)
        })?
    } else {
        let mut digest = VersionDigest::new();
        let mut buffer = Vec::new();
        while read_next(&mut buffer)? {
            digest.update(&buffer);
            scanner.feed(&buffer).map_err(|()| binary())?;
        }
        digest.finish()
    };
    Ok(scanner.finish(digest))
}

/// Counts lines and keeps the window's, fed chunk by chunk.
struct Scanner {
    offset: usize,
    /// One past the last line of the window.
    last: usize,
    line_chars: usize,
    byte_cap: usize,
    sniffed: usize,
    /// The number of the line being read.
    line: usize,
    /// The window's current line, as far as it is kept.
    current: Vec<u8>,
    /// Characters of the current line past what is kept.
    dropped_chars: usize,
    /// Whether the current line's last byte so far is `\r` (of a CRLF ending).
    ends_cr: bool,
    lines: Vec<(usize, String)>,
    shown_bytes: usize,
    cut_by_bytes: bool,
    ends_with_newline: bool,
}

impl Scanner {
    fn new(offset: usize, limit: usize, files: &FileTools) -> Self {
        Self {
            offset,
            last: offset.saturating_add(limit),
            line_chars: files.limits.line_chars,
            byte_cap: files.limits.read_bytes,
            sniffed: 0,
            line: 1,
            current: Vec::new(),
            dropped_chars: 0,
            ends_cr: false,
            lines: Vec::new(),
            shown_bytes: 0,
            cut_by_bytes: false,
            ends_with_newline: true,
        }
    }

    fn in_window(&self) -> bool {
        (self.offset..self.last).contains(&self.line) && !self.cut_by_bytes
    }

    /// `Err` when the content looks binary.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), ()> {
        if chunk.is_empty() {
            return Ok(());
        }
        self.ends_with_newline = chunk.last() == Some(&b'\n');
        if self.sniffed < SNIFF {
            let look = chunk
                .get(..(SNIFF - self.sniffed).min(chunk.len()))
                .unwrap_or_default();
            if memchr::memchr(0, look).is_some() {
                return Err(());
            }
            self.sniffed += look.len();
        }
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            if self.in_window() {
                self.take(chunk.get(start..end).unwrap_or_default());
                self.keep_line();
            }
            self.line += 1;
            start = end + 1;
            // Past the window only the count matters: count the rest at full speed.
            if self.line >= self.last || self.cut_by_bytes {
                let rest = chunk.get(start..).unwrap_or_default();
                self.line += memchr::memchr_iter(b'\n', rest).count();
                return Ok(());
            }
        }
        if self.in_window() {
            self.take(chunk.get(start..).unwrap_or_default());
        }
        Ok(())
    }

    /// Adds to the current line at most what a cut line shows (4 bytes per character), and
    /// counts the characters of the rest.
    fn take(&mut self, piece: &[u8]) {
        let room = (self.line_chars * 4 + 4).saturating_sub(self.current.len());
        let (kept, dropped) = piece.split_at(piece.len().min(room));
        self.current.extend_from_slice(kept);
        // UTF-8 continuation bytes are 0b10xx_xxxx; every other byte starts a character.
        self.dropped_chars += dropped.iter().filter(|byte| **byte & 0xC0 != 0x80).count();
        if let Some(last) = piece.last() {
            self.ends_cr = *last == b'\r';
        }
    }

    fn keep_line(&mut self) {
        // A CRLF ending's `\r` is not part of the line, kept or dropped.
        let dropped = self.dropped_chars - usize::from(self.dropped_chars > 0 && self.ends_cr);
        let text = show_line(&self.current, self.line_chars, dropped);
        self.current.clear();
        self.dropped_chars = 0;
        self.ends_cr = false;
        if self.shown_bytes + text.len() > self.byte_cap {
            self.cut_by_bytes = true;
        } else {
            self.shown_bytes += text.len() + 8;
            self.lines.push((self.line, text));
        }
    }

    fn finish(mut self, digest: String) -> Window {
        // A last line without a newline is a line too.
        let total_lines = if self.ends_with_newline {
            self.line - 1
        } else {
            if self.in_window() {
                self.keep_line();
            }
            self.line
        };
        Window {
            digest,
            total_lines,
            lines: self.lines,
            cut_by_bytes: self.cut_by_bytes,
        }
    }
}

/// The line as text (invalid UTF-8 shown lossily, a trailing `\r` dropped), cut to
/// `max_chars` with a marker saying how much was left out (`dropped` characters were never
/// kept at all).
fn show_line(bytes: &[u8], max_chars: usize, dropped: usize) -> String {
    let bytes = if dropped == 0 {
        bytes.strip_suffix(b"\r").unwrap_or(bytes)
    } else {
        bytes
    };
    let text = String::from_utf8_lossy(bytes);
    let count = text.chars().count() + dropped;
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
        ToolOutput {
            value: Some(window),
            ..ToolOutput::text(text)
        }
        .with_details(details::Read {
            path: target.shown.clone(),
            start_line: first.map(|line| line as u64),
            end_line: end.map(|line| line as u64),
            total_lines: total as u64,
            truncated,
        })
    }
}
