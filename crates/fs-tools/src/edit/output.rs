//! The third pass: the edited file written out in a stream — the text with each occurrence
//! replaced, spelled back as the file spells it (CRLF, BOM) — hashed as it goes, with the
//! diff built beside it.

use std::io::{self, Read, Write};

use super::hunks::Hunks;
use super::shape::Shape;
use super::stream::{Event, Normalized, scan};
use crate::version::VersionDigest;

/// What writing the edited file gave.
pub(super) struct Written {
    pub(super) digest: String,
    pub(super) hunks: Hunks,
}

/// Writes the text of `text` to `out` with every occurrence of `patterns[i]` replaced by
/// `replacements[i]` (both in the normal form). The occurrences must not overlap: the
/// survey refused edits that do.
pub(super) fn write_edited<R: Read>(
    text: &mut Normalized<R>,
    shape: &Shape,
    patterns: &[Vec<u8>],
    replacements: &[Vec<u8>],
    shown: &str,
    out: impl Write,
) -> io::Result<Written> {
    let mut spelled = Spelled {
        out: io::BufWriter::with_capacity(256 * 1024, out),
        crlf: shape.crlf,
        digest: VersionDigest::new(),
    };
    if shape.bom {
        spelled.raw("\u{feff}".as_bytes())?;
    }
    let mut hunks = Hunks::new(shown);
    // The position in the text, and the end of the occurrence being replaced.
    let (mut position, mut skip_until) = (0u64, 0u64);
    scan(text, patterns, |event| -> io::Result<()> {
        match event {
            Event::Text(bytes) => {
                let skipped = skip_until.saturating_sub(position).min(bytes.len() as u64);
                let kept = bytes.get(skipped as usize..).unwrap_or_default();
                spelled.text(kept)?;
                hunks.unchanged(kept);
                position += bytes.len() as u64;
            }
            Event::Match { edit, start } => {
                if start < skip_until {
                    return Err(io::Error::other(
                        "the file changed while it was being edited (edits overlap now)",
                    ));
                }
                let (old, new) = match (patterns.get(edit), replacements.get(edit)) {
                    (Some(old), Some(new)) => (old, new),
                    _ => return Err(io::Error::other("an occurrence of no edit")),
                };
                spelled.text(new)?;
                hunks.replaced(old, new);
                skip_until = start + old.len() as u64;
            }
        }
        Ok(())
    })?;
    spelled.out.flush()?;
    Ok(Written {
        digest: spelled.digest.finish(),
        hunks: hunks.finish(),
    })
}

/// Text in the normal form written as the file spells it, hashed as written.
struct Spelled<W: Write> {
    out: io::BufWriter<W>,
    crlf: bool,
    digest: VersionDigest,
}

impl<W: Write> Spelled<W> {
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.digest.update(bytes);
        self.out.write_all(bytes)
    }

    fn text(&mut self, bytes: &[u8]) -> io::Result<()> {
        if !self.crlf {
            return self.raw(bytes);
        }
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', bytes) {
            self.raw(bytes.get(start..end).unwrap_or_default())?;
            self.raw(b"\r\n")?;
            start = end + 1;
        }
        self.raw(bytes.get(start..).unwrap_or_default())
    }
}
