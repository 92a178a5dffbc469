//! The first pass over a file to edit: its version, whether it is UTF-8 text, and how it
//! spells its text — a UTF-8 BOM, and CRLF line endings when every line ends that way. The
//! passes after it read the text in that spelling's normal form (see `stream`).

use std::io::{self, Read};

use crate::version::VersionDigest;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// How a file spells its text, and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) digest: String,
    pub(super) bom: bool,
    pub(super) crlf: bool,
}

#[derive(Debug)]
pub(super) enum ShapeError {
    NotUtf8,
    Io(io::Error),
}

impl From<io::Error> for ShapeError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// Reads `source` to its end once, in pieces of `chunk` bytes.
pub(super) fn shape_of(mut source: impl Read, chunk: usize) -> Result<Shape, ShapeError> {
    let mut digest = VersionDigest::new();
    let mut utf8 = Utf8Check::default();
    let mut head = Vec::with_capacity(BOM.len());
    let (mut newlines, mut crlf_endings, mut after_cr) = (0u64, 0u64, false);
    let mut buffer = vec![0u8; chunk.max(1)];
    loop {
        let read = read_some(&mut source, &mut buffer)?;
        let Some(bytes) = buffer.get(..read).filter(|bytes| !bytes.is_empty()) else {
            break;
        };
        digest.update(bytes);
        if head.len() < BOM.len() {
            let wanted = (BOM.len() - head.len()).min(bytes.len());
            head.extend_from_slice(bytes.get(..wanted).unwrap_or_default());
        }
        utf8.feed(bytes)?;
        for at in memchr::memchr_iter(b'\n', bytes) {
            newlines += 1;
            let cr = match at.checked_sub(1) {
                Some(before) => bytes.get(before) == Some(&b'\r'),
                None => after_cr,
            };
            crlf_endings += u64::from(cr);
        }
        after_cr = bytes.last() == Some(&b'\r');
    }
    utf8.finish()?;
    Ok(Shape {
        digest: digest.finish(),
        bom: head == BOM,
        crlf: newlines > 0 && crlf_endings == newlines,
    })
}

/// One `read`, retried when interrupted.
pub(super) fn read_some(source: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    loop {
        match source.read(buffer) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            read => return read,
        }
    }
}

/// UTF-8 validation fed piece by piece: a character cut between two pieces is carried over.
#[derive(Default)]
struct Utf8Check {
    carry: [u8; 4],
    carried: usize,
}

impl Utf8Check {
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), ShapeError> {
        if self.carried > 0 {
            let needed = match self.carry[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => return Err(ShapeError::NotUtf8),
            };
            let taken = (needed - self.carried).min(bytes.len());
            let (completing, rest) = bytes.split_at(taken);
            if let Some(slot) = self.carry.get_mut(self.carried..self.carried + taken) {
                slot.copy_from_slice(completing);
            }
            self.carried += taken;
            bytes = rest;
            if self.carried < needed {
                return Ok(());
            }
            let character = self.carry.get(..needed).unwrap_or_default();
            std::str::from_utf8(character).map_err(|_| ShapeError::NotUtf8)?;
            self.carried = 0;
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => Ok(()),
            // Cut short at the end of the piece: the rest comes with the next one.
            Err(error) if error.error_len().is_none() => {
                let rest = bytes.get(error.valid_up_to()..).unwrap_or_default();
                if let Some(slot) = self.carry.get_mut(..rest.len()) {
                    slot.copy_from_slice(rest);
                }
                self.carried = rest.len();
                Ok(())
            }
            Err(_) => Err(ShapeError::NotUtf8),
        }
    }

    fn finish(&self) -> Result<(), ShapeError> {
        if self.carried > 0 {
            return Err(ShapeError::NotUtf8);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::version::version_of;

    fn shape(text: &[u8], chunk: usize) -> Result<Shape, ShapeError> {
        shape_of(text, chunk)
    }

    #[test]
    fn the_shape_does_not_depend_on_where_pieces_end() {
        let cases: [(&[u8], bool, bool); 6] = [
            ("\u{feff}one\r\ntwo\r\n".as_bytes(), true, true),
            (b"a\r\nb\n", false, false),
            (b"a\r\nb", false, true),
            (b"no newline", false, false),
            ("é€𝄞\n".as_bytes(), false, false),
            (b"", false, false),
        ];
        for (text, bom, crlf) in cases {
            for chunk in [1, 2, 3, 5, 64] {
                let found = shape(text, chunk).unwrap();
                assert_eq!(
                    found,
                    Shape {
                        digest: version_of(text),
                        bom,
                        crlf
                    },
                    "{text:?} in pieces of {chunk}"
                );
            }
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_told_wherever_it_is_cut() {
        for text in [&b"ok \xff"[..], b"\xe2\x82", b"\xe2(\xa1", b"a\xc3"] {
            for chunk in [1, 2, 3, 64] {
                assert!(
                    matches!(shape(text, chunk), Err(ShapeError::NotUtf8)),
                    "{text:?} in pieces of {chunk}"
                );
            }
        }
    }
}
