//! A background shell's output as the runtime keeps it in memory: the first and the last
//! bytes (head and tail, a fixed budget however long the shell runs), the count of every
//! byte it wrote, and the part between them read back as "dropped". Positions are byte
//! offsets from the shell's first byte, so a cursor stays valid however much is dropped.
//! The whole output goes to a file as it arrives (the watcher writes it); this is only what
//! a read can answer from memory.

use std::collections::VecDeque;

/// The output kept in memory.
#[derive(Debug)]
pub(crate) struct Transcript {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    half: usize,
}

/// The output between a cursor and the end, as far as memory holds it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    /// Bytes from the cursor up to where memory stopped keeping them (only when the
    /// cursor lies in the head).
    pub before: Vec<u8>,
    /// Bytes after `before` that memory no longer holds (they are in the output file).
    pub dropped: u64,
    /// The kept bytes after the gap, up to the end.
    pub after: Vec<u8>,
    /// The offset just past the last byte: the next cursor.
    pub end: u64,
}

impl Transcript {
    /// A transcript keeping at most `keep` bytes: half from the start, half from the end.
    pub(crate) fn new(keep: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            half: (keep / 2).max(1),
        }
    }

    /// Bytes the shell wrote in all.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.half.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(bytes.len().min(room));
        self.head.extend_from_slice(to_head);
        bytes = rest;
        if bytes.len() >= self.half {
            self.tail.clear();
            bytes = bytes.get(bytes.len() - self.half..).unwrap_or_default();
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.half);
        self.tail.drain(..overflow.min(self.tail.len()));
        self.tail.extend(bytes);
    }

    /// Where the kept tail starts.
    fn tail_start(&self) -> u64 {
        self.total - self.tail.len() as u64
    }

    /// The output from `since` to the end (a cursor past the end reads nothing).
    pub(crate) fn since(&self, since: u64) -> Delta {
        let end = self.total;
        let since = since.min(end);
        let head_end = self.head.len() as u64;
        let tail_start = self.tail_start().max(head_end);
        let mut delta = Delta {
            end,
            ..Delta::default()
        };
        if since < head_end {
            delta.before = self
                .head
                .get(usize::try_from(since).unwrap_or(usize::MAX)..)
                .unwrap_or_default()
                .to_vec();
        }
        let from = since.max(head_end);
        if from < tail_start {
            delta.dropped = tail_start - from;
        }
        let skip = since.max(tail_start) - self.tail_start();
        delta.after = self
            .tail
            .iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .copied()
            .collect();
        delta
    }
}

/// Output as the model reads it from a terminal: escape sequences (colours, cursor
/// movement, titles) removed, and carriage returns turned into line ends.
pub(crate) fn plain_terminal_text(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            0x1b => at = skip_escape(bytes, at),
            b'\r' => {
                if bytes.get(at + 1) != Some(&b'\n') {
                    out.push(b'\n');
                }
                at += 1;
            }
            // Other control characters but tab and newline say nothing to a reader.
            0x00..=0x08 | 0x0b..=0x0c | 0x0e..=0x1a | 0x1c..=0x1f | 0x7f => at += 1,
            _ => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The index just past the escape sequence starting at `at` (CSI, OSC, or a two-byte one).
fn skip_escape(bytes: &[u8], at: usize) -> usize {
    match bytes.get(at + 1) {
        Some(b'[') => {
            // Parameters and intermediates, then one final byte in 0x40..=0x7e.
            let mut end = at + 2;
            while let Some(&byte) = bytes.get(end) {
                end += 1;
                if (0x40..=0x7e).contains(&byte) {
                    break;
                }
            }
            end
        }
        Some(b']') => {
            // Up to BEL or ESC \.
            let mut end = at + 2;
            while let Some(&byte) = bytes.get(end) {
                if byte == 0x07 {
                    return end + 1;
                }
                if byte == 0x1b && bytes.get(end + 1) == Some(&b'\\') {
                    return end + 2;
                }
                end += 1;
            }
            end
        }
        Some(_) => at + 2,
        None => at + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_what_came_after_it_whatever_was_dropped() {
        let mut transcript = Transcript::new(8);
        transcript.push(b"0123");
        assert_eq!(
            transcript.since(1),
            Delta {
                before: b"123".to_vec(),
                dropped: 0,
                after: Vec::new(),
                end: 4
            }
        );
        transcript.push(b"456789ab");
        // Head 0123, tail 89ab, 4567 dropped.
        assert_eq!(
            transcript.since(2),
            Delta {
                before: b"23".to_vec(),
                dropped: 4,
                after: b"89ab".to_vec(),
                end: 12
            }
        );
        assert_eq!(
            transcript.since(5),
            Delta {
                before: Vec::new(),
                dropped: 3,
                after: b"89ab".to_vec(),
                end: 12
            }
        );
        assert_eq!(transcript.since(10).after, b"ab".to_vec());
        assert_eq!(
            transcript.since(99),
            Delta {
                end: 12,
                ..Delta::default()
            }
        );
        transcript.push(&[b'x'; 100]);
        assert_eq!(transcript.total(), 112);
        assert_eq!(transcript.since(0).dropped, 104);
        assert_eq!(transcript.since(0).after, b"xxxx".to_vec());
    }

    #[test]
    fn terminal_text_loses_escapes_and_carriage_returns() {
        let raw = b"\x1b[1;32mok\x1b[0m\r\n>>> \x1b]0;title\x07done\rredo\x08";
        assert_eq!(plain_terminal_text(raw), "ok\n>>> done\nredo");
    }
}
