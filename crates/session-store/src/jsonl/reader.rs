//! Reading a session file back: every line an event, `seq` dense from 1, a torn last line
//! (a crash mid-write) cut off and reported, anything else that is wrong an error naming the
//! line — never a panic. A last line that lost only its newline is whole, and kept.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::StoreError;
use toolrail_session_log::Event;

use crate::spill::{ShelfRefs, refs_in};

/// What reading a file found.
pub(crate) struct ReadLog {
    pub events: Vec<Event>,
    /// For the events whose lines refer to values kept beside the log: the event's index
    /// and the references.
    pub shelf_refs: Vec<(usize, ShelfRefs)>,
    /// Byte length of the good prefix (where the next append goes).
    pub good_len: u64,
    /// Bytes of a torn last line, if there was one.
    pub torn_bytes: u64,
    /// The last event was kept although its line has no newline: the next append must
    /// write one first.
    pub unterminated: bool,
}

/// Reads every event of `path`. A last line that does not parse as the next event (cut short
/// or damaged, with or without its newline) is torn: it is reported, not returned. A last line
/// that is a whole event in `seq` order but lacks its newline is kept (`unterminated`). Any
/// other line that does not parse, or breaks the `seq` order, is corruption.
pub(crate) fn read_log(path: &Path) -> Result<ReadLog, StoreError> {
    let file = File::open(path).map_err(|source| StoreError::io("opening", path, source))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut events = Vec::new();
    let mut shelf_refs = Vec::new();
    let mut line = Vec::new();
    let mut good_len = 0u64;
    let mut number = 0usize;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| StoreError::io("reading", path, source))?;
        if read == 0 {
            return Ok(ReadLog {
                events,
                shelf_refs,
                good_len,
                torn_bytes: 0,
                unterminated: false,
            });
        }
        number += 1;
        if line.last() != Some(&b'\n') {
            // Our writer ends every line with its newline in the same write, so a crash cut
            // this one. Cut short, it cannot parse (an event's JSON closes on its last byte)
            // and was never acknowledged: torn. Whole, it is the event that was appended (a
            // crash between the line's last byte and its newline, or a file that went
            // through a tool that strips the final newline): dropping it would turn a
            // committed result into an unknown outcome, so it is kept.
            let whole = serde_json::from_slice::<Event>(&line)
                .ok()
                .filter(|event| event.seq == events.len() as u64 + 1);
            return Ok(match whole {
                Some(event) => {
                    note_refs(&event, &line, events.len(), &mut shelf_refs, path, number)?;
                    events.push(event);
                    ReadLog {
                        events,
                        shelf_refs,
                        good_len: good_len + read as u64,
                        torn_bytes: 0,
                        unterminated: true,
                    }
                }
                None => ReadLog {
                    events,
                    shelf_refs,
                    good_len,
                    torn_bytes: read as u64,
                    unterminated: false,
                },
            });
        }
        let event = match serde_json::from_slice::<Event>(trim_newline(&line)) {
            Ok(event) => event,
            Err(error) => {
                // A damaged last line (a power loss can bring back unsynced blocks as garbage,
                // newline and all) was never acknowledged either: torn. Anything before the
                // last line is corruption.
                let last = reader
                    .fill_buf()
                    .map_err(|source| StoreError::io("reading", path, source))?
                    .is_empty();
                if last {
                    return Ok(ReadLog {
                        events,
                        shelf_refs,
                        good_len,
                        torn_bytes: read as u64,
                        unterminated: false,
                    });
                }
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    line: number,
                    why: error.to_string(),
                });
            }
        };
        let expected = events.len() as u64 + 1;
        if event.seq != expected {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                line: number,
                why: format!(
                    "seq {} where {expected} was expected (a gap or a repeat)",
                    event.seq
                ),
            });
        }
        note_refs(&event, &line, events.len(), &mut shelf_refs, path, number)?;
        events.push(event);
        good_len += read as u64;
    }
}

/// Keeps what `line` (the event at `index`) refers to on the shelf, if anything.
fn note_refs(
    event: &Event,
    line: &[u8],
    index: usize,
    shelf_refs: &mut Vec<(usize, ShelfRefs)>,
    path: &Path,
    number: usize,
) -> Result<(), StoreError> {
    let refs = refs_in(event, trim_newline(line)).map_err(|why| StoreError::Corrupt {
        path: path.to_path_buf(),
        line: number,
        why,
    })?;
    if let Some(refs) = refs {
        shelf_refs.push((index, refs));
    }
    Ok(())
}

fn trim_newline(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}
