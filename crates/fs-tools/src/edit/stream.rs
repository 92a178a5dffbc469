//! The text edits are matched against, streamed: the file read in pieces as its normal form
//! (no BOM; `\r\n` read as `\n` in a CRLF file), and the exact occurrences of several
//! strings found in it with `memchr::memmem`, a piece at a time with an overlap as long as
//! the longest string, so memory stays one piece plus the strings whatever the file's size.

use std::io::{self, Read};

use memchr::memmem::Finder;

use super::shape::{Shape, read_some};

/// The normal form of a file's text, read piece by piece.
pub(super) struct Normalized<R> {
    source: R,
    raw: Vec<u8>,
    crlf: bool,
    /// Bytes of the BOM still to leave out.
    bom_left: usize,
    /// A `\r` that ended the last piece: dropped if a `\n` follows.
    pending_cr: bool,
}

impl<R: Read> Normalized<R> {
    pub(super) fn new(source: R, shape: &Shape, chunk: usize) -> Self {
        Self {
            source,
            raw: vec![0u8; chunk.max(1)],
            crlf: shape.crlf,
            bom_left: if shape.bom { 3 } else { 0 },
            pending_cr: false,
        }
    }

    /// Appends the next piece of text to `out`; `false` once the text has ended.
    pub(super) fn next_into(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
        let read = read_some(&mut self.source, &mut self.raw)?;
        let mut bytes = self.raw.get(..read).unwrap_or_default();
        if bytes.is_empty() {
            if self.pending_cr {
                out.push(b'\r');
                self.pending_cr = false;
            }
            return Ok(false);
        }
        let skipped = self.bom_left.min(bytes.len());
        bytes = bytes.get(skipped..).unwrap_or_default();
        self.bom_left -= skipped;
        if !self.crlf {
            out.extend_from_slice(bytes);
            return Ok(true);
        }
        if self.pending_cr && !bytes.is_empty() {
            if bytes.first() != Some(&b'\n') {
                out.push(b'\r');
            }
            self.pending_cr = false;
        }
        let (body, ends_cr) = match bytes.split_last() {
            Some((b'\r', body)) => (body, true),
            _ => (bytes, false),
        };
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', body) {
            let line = body.get(start..end).unwrap_or_default();
            out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
            out.push(b'\n');
            start = end + 1;
        }
        out.extend_from_slice(body.get(start..).unwrap_or_default());
        self.pending_cr |= ends_cr;
        Ok(true)
    }
}

/// What a scan reports, in text order: every byte once as `Text`, and each occurrence as a
/// `Match` just before the text it starts.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event<'a> {
    Text(&'a [u8]),
    /// `patterns[edit]` occurs at byte `start` of the text.
    Match {
        edit: usize,
        start: u64,
    },
}

/// Scans `text` for the non-overlapping, leftmost occurrences of each pattern (as
/// `str::match_indices` finds them), reporting every byte and every occurrence in order.
/// Occurrences of different patterns may overlap; each is reported where it starts.
pub(super) fn scan<R: Read, E: From<io::Error>>(
    text: &mut Normalized<R>,
    patterns: &[Vec<u8>],
    mut on: impl FnMut(Event<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let finders: Vec<Finder<'_>> = patterns.iter().map(Finder::new).collect();
    // Bytes at the end of a piece that may start an occurrence its next piece completes.
    let overlap = patterns
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(1)
        .saturating_sub(1) as u64;
    let mut buffer: Vec<u8> = Vec::new();
    let mut buffer_start = 0u64;
    let mut next = vec![0u64; patterns.len()];
    let mut found: Vec<(u64, usize)> = Vec::new();
    loop {
        let more = text.next_into(&mut buffer)?;
        let end = buffer_start + buffer.len() as u64;
        // Occurrences starting before the horizon lie whole in the buffer.
        let horizon = if more {
            end.saturating_sub(overlap).max(buffer_start)
        } else {
            end
        };
        if more && horizon == buffer_start {
            continue;
        }
        found.clear();
        for (edit, finder) in finders.iter().enumerate() {
            let length = patterns.get(edit).map_or(1, Vec::len) as u64;
            let mut from = next[edit].max(buffer_start);
            while from < horizon {
                let Some(at) = buffer
                    .get((from - buffer_start) as usize..)
                    .and_then(|rest| finder.find(rest))
                else {
                    break;
                };
                let start = from + at as u64;
                if start >= horizon {
                    break;
                }
                found.push((start, edit));
                from = start + length;
            }
            next[edit] = from.max(horizon);
        }
        found.sort_unstable();
        let mut emitted = buffer_start;
        let slice = |from: u64, to: u64| {
            buffer
                .get((from - buffer_start) as usize..(to - buffer_start) as usize)
                .unwrap_or_default()
        };
        for &(start, edit) in &found {
            if start > emitted {
                on(Event::Text(slice(emitted, start)))?;
                emitted = start;
            }
            on(Event::Match { edit, start })?;
        }
        if horizon > emitted {
            on(Event::Text(slice(emitted, horizon)))?;
        }
        buffer.drain(..(horizon - buffer_start) as usize);
        buffer_start = horizon;
        if !more {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn shape(bom: bool, crlf: bool) -> Shape {
        Shape {
            digest: String::new(),
            bom,
            crlf,
        }
    }

    fn normalized(text: &str, shape: &Shape, chunk: usize) -> String {
        let mut reader = Normalized::new(text.as_bytes(), shape, chunk);
        let mut out = Vec::new();
        while reader.next_into(&mut out).unwrap() {}
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_normal_form_is_the_same_in_any_pieces() {
        let text = "\u{feff}one\r\ntwo\r\r\nthree\rfour\r\n";
        for chunk in [1, 2, 3, 4, 7, 100] {
            assert_eq!(
                normalized(text, &shape(true, true), chunk),
                "one\ntwo\r\nthree\rfour\n",
                "pieces of {chunk}"
            );
            assert_eq!(normalized(text, &shape(false, false), chunk), text);
        }
        assert_eq!(normalized("a\r", &shape(false, true), 1), "a\r");
    }

    /// Every occurrence `match_indices` finds, at the same places, whatever the pieces.
    #[test]
    fn occurrences_are_those_of_match_indices_in_any_pieces() {
        let text = "aaaa ab aba abab\nxyz aaa\n";
        let patterns = ["aa", "ab", "b\nx", "aaa", "zzz", text];
        for chunk in [1, 2, 3, 5, 8, 1000] {
            let mut reader = Normalized::new(text.as_bytes(), &shape(false, false), chunk);
            let bytes: Vec<Vec<u8>> = patterns.iter().map(|p| p.as_bytes().to_vec()).collect();
            let mut seen = String::new();
            let mut found: Vec<(usize, u64)> = Vec::new();
            scan(&mut reader, &bytes, |event| -> io::Result<()> {
                match event {
                    Event::Text(piece) => seen.push_str(std::str::from_utf8(piece).unwrap()),
                    Event::Match { edit, start } => {
                        assert_eq!(start as usize, seen.len(), "reported where it starts");
                        found.push((edit, start));
                    }
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, text);
            for (edit, pattern) in patterns.iter().enumerate() {
                let mut expected: Vec<u64> = text
                    .match_indices(pattern)
                    .map(|(at, _)| at as u64)
                    .collect();
                let mut got: Vec<u64> = found
                    .iter()
                    .filter(|(which, _)| *which == edit)
                    .map(|(_, start)| *start)
                    .collect();
                expected.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, expected, "`{pattern}` in pieces of {chunk}");
            }
        }
    }
}
