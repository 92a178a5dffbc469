//! Server-sent events, parsed incrementally from bytes as they arrive, after the WHATWG
//! rules: lines end in CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of
//! the next are one line end); `:` starts a comment; `data` lines join with `\n`; a blank line
//! dispatches the event; an event not ended by a blank line when the stream ends is dropped.
//! Bytes are kept until their line ends, so a character split between chunks is whole again
//! before it is decoded. Pure and panic-free: it is fuzzed.

/// One event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// The event's `data` lines, joined with `\n`; an event without one is never
    /// dispatched.
    pub data: String,
}

/// A stream that cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line, or an event's data, grew past the parser's limit (the bytes given).
    #[error("a server-sent event grew past {0} bytes")]
    TooLarge(usize),
}

/// The parser's state between chunks.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    /// The last chunk ended in CR: an LF first in the next one ends nothing more.
    after_cr: bool,
    /// Nothing has been read yet (a leading byte-order mark is skipped).
    at_start: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    limit: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new(16 << 20)
    }
}

const BOM: &[u8] = "\u{feff}".as_bytes();

impl SseParser {
    /// A parser refusing any line or event over `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            event: None,
            data: String::new(),
            has_data: false,
            limit,
        }
    }

    /// Parses `bytes`, appending every event they complete to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.at_start {
            // The mark may itself arrive split: wait until it can be told apart.
            self.line.extend_from_slice(bytes);
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                return Ok(());
            }
            self.at_start = false;
            let held = std::mem::take(&mut self.line);
            let held = held.strip_prefix(BOM).unwrap_or(&held).to_vec();
            return self.feed(&held, out);
        }
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if let Some(rest) = bytes.strip_prefix(b"\n") {
                    bytes = rest;
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.line
                        .extend_from_slice(bytes.get(..end).unwrap_or_default());
                    self.after_cr = bytes.get(end) == Some(&b'\r');
                    bytes = bytes.get(end + 1..).unwrap_or_default();
                    let line = std::mem::take(&mut self.line);
                    self.take_line(&line, out)?;
                }
                None => {
                    self.line.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
            if self.line.len() > self.limit {
                return Err(SseError::TooLarge(self.limit));
            }
        }
        Ok(())
    }

    fn take_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event = None;
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line.first() == Some(&b':') {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = line.get(colon + 1..).unwrap_or_default();
                (
                    line.get(..colon).unwrap_or_default(),
                    value.strip_prefix(b" ").unwrap_or(value),
                )
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
                if self.data.len() > self.limit {
                    return Err(SseError::TooLarge(self.limit));
                }
            }
            b"event" => self.event = Some(value.into_owned()),
            // `id` and `retry` matter for reconnecting, which a model stream never does.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{SseEvent, SseParser};

    fn parse(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out).unwrap();
        }
        out
    }

    fn event(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn every_line_ending_comments_fields_and_multiline_data() {
        let stream = b"\xef\xbb\xbf: keep-alive\r\nevent: delta\r\ndata: a\rdata:b\n\ndata\n\nretry: 5\nid: 7\n\nevent: end\ndata: {\"x\": 1}\n\n";
        assert_eq!(
            parse(&[stream]),
            [
                event(Some("delta"), "a\nb"),
                event(None, ""),
                event(Some("end"), "{\"x\": 1}")
            ]
        );
    }

    #[test]
    fn a_crlf_split_between_chunks_is_one_line_end_and_a_split_character_is_whole() {
        let text = "data: é\r\n\r\n".as_bytes();
        let split = text.iter().position(|&b| b == 0xc3).unwrap() + 1;
        assert_eq!(
            parse(&[&text[..split], &text[split..11], &text[11..]]),
            [event(None, "é")]
        );
        assert_eq!(
            parse(&[b"data: x\r", b"\ndata: y\r", b"\n\r", b"\n"]),
            [event(None, "x\ny")]
        );
    }

    #[test]
    fn an_event_the_stream_did_not_finish_is_not_dispatched() {
        assert_eq!(
            parse(&[b"data: whole\n\ndata: cut"]),
            [event(None, "whole")]
        );
    }

    #[test]
    fn an_oversized_line_is_an_error_not_unbounded_memory() {
        let mut parser = SseParser::new(8);
        let mut out = Vec::new();
        assert!(parser.feed(b"data: 0123456789", &mut out).is_err());
    }
}
