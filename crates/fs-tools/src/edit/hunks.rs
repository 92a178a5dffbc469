//! The unified diff of an edit, built while the edited file is written: each change is
//! diffed with the lines around it only (never the whole file against the whole file), so a
//! small change to a huge file costs memory for those lines. A hunk whose lines outgrow a cap
//! (a minified file's one line, say) is counted, not shown; the diff text itself is capped.

use std::collections::VecDeque;
use std::fmt::Write as _;

use similar::{ChangeTag, DiffOp, TextDiff};

/// Lines of context shown around a change.
const CONTEXT: usize = 3;
/// Bytes of one hunk's old (or new) text kept to diff.
const HUNK_BYTES: usize = 256 * 1024;
/// Bytes of diff text kept.
const DIFF_BYTES: usize = 256 * 1024;

/// Text kept up to a cap; past it, only that it overflowed.
#[derive(Default)]
struct Capped {
    bytes: Vec<u8>,
    overflow: bool,
}

impl Capped {
    fn push(&mut self, bytes: &[u8]) {
        if self.overflow || self.bytes.len() + bytes.len() > HUNK_BYTES {
            self.overflow = true;
            self.bytes.clear();
        } else {
            self.bytes.extend_from_slice(bytes);
        }
    }
}

/// The changes of one stretch of the file, with the lines around them.
struct Hunk {
    old: Capped,
    new: Capped,
    /// The line (from 1) `old` and `new` start at, in the old and the new file.
    old_start: u64,
    new_start: u64,
    /// Newlines of unchanged text still to take before the hunk closes.
    newlines_left: usize,
    /// For a hunk too long to diff: the old lines its changes touch, and how many lines
    /// they became.
    first_line: u64,
    last_line: u64,
    delta_at_start: i64,
}

/// The diff being built. Feed it the old text in order: unchanged bytes with
/// [`unchanged`](Self::unchanged), each replaced occurrence with [`replaced`](Self::replaced).
pub(super) struct Hunks {
    shown: String,
    /// The old line of the current position, from 1.
    line: u64,
    /// New line number − old line number at the current position.
    delta: i64,
    /// The last complete old lines, for the context before a change.
    recent: VecDeque<Capped>,
    /// The current old line so far.
    partial: Capped,
    open: Option<Hunk>,
    pub(super) diff: String,
    pub(super) added: u64,
    pub(super) removed: u64,
    /// Hunks not shown: too long to diff, or past the diff's cap.
    too_long: usize,
    cut: usize,
}

impl Hunks {
    pub(super) fn new(shown: &str) -> Self {
        Self {
            shown: shown.to_owned(),
            line: 1,
            delta: 0,
            recent: VecDeque::new(),
            partial: Capped::default(),
            open: None,
            diff: String::new(),
            added: 0,
            removed: 0,
            too_long: 0,
            cut: 0,
        }
    }

    pub(super) fn unchanged(&mut self, mut bytes: &[u8]) {
        while let Some(hunk) = self.open.as_mut() {
            if bytes.is_empty() {
                return;
            }
            let closing =
                memchr::memchr_iter(b'\n', bytes).nth(hunk.newlines_left.saturating_sub(1));
            let taken = closing.map_or(bytes.len(), |at| at + 1);
            let (taken, rest) = bytes.split_at(taken);
            hunk.old.push(taken);
            hunk.new.push(taken);
            hunk.newlines_left = hunk
                .newlines_left
                .saturating_sub(memchr::memchr_iter(b'\n', taken).count());
            self.track(taken);
            bytes = rest;
            if closing.is_some() {
                self.close();
            }
        }
        self.track(bytes);
    }

    /// `old` (as it stands at the current position) replaced by `new`.
    pub(super) fn replaced(&mut self, old: &[u8], new: &[u8]) {
        if self.open.is_none() {
            let mut before = Capped::default();
            for line in self.recent.iter().chain(std::iter::once(&self.partial)) {
                before.overflow |= line.overflow;
                before.push(&line.bytes);
            }
            let old_start = self.line - self.recent.len() as u64;
            self.open = Some(Hunk {
                new: Capped {
                    bytes: before.bytes.clone(),
                    overflow: before.overflow,
                },
                old: before,
                old_start,
                new_start: old_start.saturating_add_signed(self.delta),
                newlines_left: 0,
                first_line: self.line,
                last_line: self.line,
                delta_at_start: self.delta,
            });
        }
        self.track(old);
        let lines = |bytes: &[u8]| memchr::memchr_iter(b'\n', bytes).count() as i64;
        self.delta += lines(new) - lines(old);
        if let Some(hunk) = self.open.as_mut() {
            hunk.old.push(old);
            hunk.new.push(new);
            // The change's own line, then twice the context: a change closer than that to
            // this one joins this hunk, so hunks never share lines.
            hunk.newlines_left = 1 + 2 * CONTEXT;
            hunk.last_line = self.line;
        }
    }

    /// The diff (empty when nothing changed) and a note on what it leaves out.
    pub(super) fn finish(mut self) -> Self {
        self.close();
        if self.too_long > 0 {
            let _ = writeln!(
                self.diff,
                "[{} changed stretch{} not shown: lines too long to diff]",
                self.too_long,
                if self.too_long == 1 { "" } else { "es" }
            );
        }
        if self.cut > 0 {
            let _ = writeln!(self.diff, "[diff cut: {} more hunks not shown]", self.cut);
        }
        self
    }

    /// Counts lines and keeps the last few, for the context of a later change.
    fn track(&mut self, bytes: &[u8]) {
        let newlines = memchr::memchr_iter(b'\n', bytes).count();
        if newlines == 0 {
            self.partial.push(bytes);
            return;
        }
        self.line += newlines as u64;
        let mut from_end = memchr::memrchr_iter(b'\n', bytes);
        let mut ends: Vec<usize> = from_end.by_ref().take(CONTEXT).collect();
        ends.reverse();
        let mut start = match from_end.next() {
            Some(before) => {
                self.recent.clear();
                self.partial = Capped::default();
                before + 1
            }
            None => 0,
        };
        for end in ends {
            self.partial
                .push(bytes.get(start..=end).unwrap_or_default());
            self.recent.push_back(std::mem::take(&mut self.partial));
            if self.recent.len() > CONTEXT {
                self.recent.pop_front();
            }
            start = end + 1;
        }
        self.partial.push(bytes.get(start..).unwrap_or_default());
    }

    fn close(&mut self) {
        let Some(hunk) = self.open.take() else {
            return;
        };
        if hunk.old.overflow || hunk.new.overflow {
            let removed = hunk.last_line - hunk.first_line + 1;
            self.removed += removed;
            self.added += removed.saturating_add_signed(self.delta - hunk.delta_at_start);
            self.too_long += 1;
            return;
        }
        let old = String::from_utf8_lossy(&hunk.old.bytes);
        let new = String::from_utf8_lossy(&hunk.new.bytes);
        let diff = TextDiff::from_lines(old.as_ref(), new.as_ref());
        for change in diff.iter_all_changes() {
            match change.tag() {
                ChangeTag::Insert => self.added += 1,
                ChangeTag::Delete => self.removed += 1,
                ChangeTag::Equal => {}
            }
        }
        for group in diff.grouped_ops(CONTEXT) {
            if self.diff.len() > DIFF_BYTES {
                self.cut += 1;
                continue;
            }
            if self.diff.is_empty() {
                let _ = write!(self.diff, "--- {0}\n+++ {0}\n", self.shown);
            }
            let (Some(first), Some(last)) = (group.first(), group.last()) else {
                continue;
            };
            let _ = writeln!(
                self.diff,
                "@@ -{} +{} @@",
                range(
                    hunk.old_start,
                    first.old_range().start,
                    last.old_range().end
                ),
                range(
                    hunk.new_start,
                    first.new_range().start,
                    last.new_range().end
                ),
            );
            for op in &group {
                render(&diff, op, &mut self.diff);
            }
        }
    }
}

/// A hunk header's range: `start,length` from 1, as `diff -u` writes it.
fn range(offset: u64, start: usize, end: usize) -> String {
    let length = end.saturating_sub(start);
    let first = offset + start as u64;
    match length {
        1 => first.to_string(),
        0 => format!("{},0", first.saturating_sub(1)),
        _ => format!("{first},{length}"),
    }
}

fn render(diff: &TextDiff<'_, '_, str>, op: &DiffOp, out: &mut String) {
    for change in diff.iter_changes(op) {
        out.push(match change.tag() {
            ChangeTag::Equal => ' ',
            ChangeTag::Delete => '-',
            ChangeTag::Insert => '+',
        });
        let value = change.value();
        out.push_str(value);
        if !value.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// Feeds `text` with each `(old, new)` replaced where it first occurs after the last.
    fn hunks(text: &str, edits: &[(&str, &str)], chunk: usize) -> Hunks {
        let mut hunks = Hunks::new("f.txt");
        let mut at = 0;
        let feed = |hunks: &mut Hunks, bytes: &[u8]| {
            for piece in bytes.chunks(chunk.max(1)) {
                hunks.unchanged(piece);
            }
        };
        for (old, new) in edits {
            let start = at + text[at..].find(old).unwrap();
            feed(&mut hunks, &text.as_bytes()[at..start]);
            hunks.replaced(old.as_bytes(), new.as_bytes());
            at = start + old.len();
        }
        feed(&mut hunks, &text.as_bytes()[at..]);
        hunks.finish()
    }

    /// Local diffs give what `diff -u` of the whole files gives.
    #[test]
    fn local_hunks_match_the_whole_file_diff() {
        let text: String = (1..=40).map(|n| format!("line {n}\n")).collect();
        let cases: [&[(&str, &str)]; 4] = [
            &[("line 1\n", "first\n")],
            &[("line 5\n", "five\nand a half\n"), ("line 9\n", "")],
            &[
                ("line 5\n", "5\n"),
                ("line 20\n", "20\n"),
                ("line 40\n", "forty"),
            ],
            &[("line 12\nline 13\n", "twelve-thirteen\n")],
        ];
        for edits in cases {
            let mut edited = text.clone();
            for (old, new) in edits {
                edited = edited.replacen(old, new, 1);
            }
            let whole = TextDiff::from_lines(text.as_str(), edited.as_str());
            let expected = whole
                .unified_diff()
                .context_radius(3)
                .header("f.txt", "f.txt")
                .to_string();
            for chunk in [1, 3, 1000] {
                let built = hunks(&text, edits, chunk);
                assert_eq!(built.diff, expected, "{edits:?} in pieces of {chunk}");
                let changes = whole.iter_all_changes();
                let (added, removed) =
                    changes.fold((0, 0), |(added, removed), change| match change.tag() {
                        ChangeTag::Insert => (added + 1, removed),
                        ChangeTag::Delete => (added, removed + 1),
                        ChangeTag::Equal => (added, removed),
                    });
                assert_eq!((built.added, built.removed), (added, removed), "{edits:?}");
            }
        }
    }

    #[test]
    fn a_change_in_a_huge_line_is_counted_not_shown() {
        let line = "x".repeat(HUNK_BYTES + 10);
        let text = format!("a\n{line}NEEDLE{line}\nb\n");
        let built = hunks(&text, &[("NEEDLE", "PIN\n")], 4096);
        assert_eq!((built.added, built.removed), (2, 1));
        assert_eq!(
            built.diff,
            "[1 changed stretch not shown: lines too long to diff]\n"
        );
    }
}
