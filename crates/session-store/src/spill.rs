//! Large values beside the log: a result's `value` or `details` whose compact JSON is over
//! the store's cap is kept on a shelf (files, a table) under its SHA-256, and the stored event
//! carries a [`BlobRef`] instead. The whole blocks a result's content was cut from
//! ([`ElidedBlock`]) always go to the shelf, under the digest the cut content's marker names.
//! Reading a session puts every value and block back, checking its digest, so the events a
//! reader gets are the events that were appended.

use std::sync::Arc;

use serde_json::Value;
use toolrail_session_log::digest::digest_of;

use serde::Serialize;
use toolrail_session_log::ContentBlock;
use toolrail_session_log::details::Details;
use toolrail_session_log::elided::{ElidedBlock, stored_bytes};
use toolrail_session_log::{BlobRef, ToolResultRecord, json_len};
use toolrail_session_log::{Event, EventData};

/// Default cap: values up to 1 MiB stay in the line.
pub const DEFAULT_BLOB_CAP: usize = 1024 * 1024;

/// Where large values are kept.
pub(crate) trait BlobShelf {
    /// Stores `bytes` under `digest` (idempotent: the same digest is the same bytes) so that
    /// they are durable before the event that references them.
    fn put(&mut self, digest: &str, bytes: &[u8]) -> Result<(), String>;

    fn get(&self, digest: &str) -> Result<Vec<u8>, String>;
}

/// The large values one event moves to the shelf, collected by its appender for the writer,
/// which stores them before the group's lines.
#[derive(Default)]
pub(crate) struct Collected(pub Vec<(String, Vec<u8>)>);

impl BlobShelf for Collected {
    fn put(&mut self, digest: &str, bytes: &[u8]) -> Result<(), String> {
        if !self.0.iter().any(|(stored, _)| stored == digest) {
            self.0.push((digest.to_owned(), bytes.to_vec()));
        }
        Ok(())
    }

    fn get(&self, _digest: &str) -> Result<Vec<u8>, String> {
        Err("large values are read through the loading shelf".to_owned())
    }
}

/// Appends the stored form of `event` to `out` as compact JSON. Most lines are shorter than
/// the cap, and then no value in them can be over it: only a longer line, or a result that
/// carries whole blocks its content was cut from, is looked into.
pub(crate) fn encode_stored(
    event: &Event,
    cap: usize,
    shelf: &mut dyn BlobShelf,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    if carries_whole_blocks(event) {
        out.extend_from_slice(&stored_form(event, cap, shelf)?);
        return Ok(());
    }
    let start = out.len();
    serde_json::to_writer(&mut *out, event)
        .map_err(|error| format!("an event could not be encoded: {error}"))?;
    if out.len() - start <= cap {
        return Ok(());
    }
    out.truncate(start);
    out.extend_from_slice(&stored_form(event, cap, shelf)?);
    Ok(())
}

fn carries_whole_blocks(event: &Event) -> bool {
    let unshelved =
        |record: &ToolResultRecord| record.elided.iter().any(|elided| elided.whole.is_some());
    if let EventData::ToolResult(record) = &event.data {
        unshelved(record)
    } else if let EventData::CodeDispatch(dispatch) = &event.data {
        unshelved(&dispatch.result)
    } else {
        false
    }
}

/// Where a stored record's large values went: written into its stored line beside the
/// record's own fields (`value_blob`, `details_blob`), never part of the record itself.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ShelfRefs {
    #[serde(default)]
    value_blob: Option<BlobRef>,
    #[serde(default)]
    details_blob: Option<BlobRef>,
}

impl ShelfRefs {
    fn is_empty(&self) -> bool {
        self.value_blob.is_none() && self.details_blob.is_none()
    }
}

/// The refs `line` holds for `event`, decoded from it, if any: a `tool/result`'s own, or a
/// code-mode dispatch's result's. Only a record that lacks its value or its details can have
/// one, and only a line that names one is parsed again.
pub(crate) fn refs_in(event: &Event, line: &[u8]) -> Result<Option<ShelfRefs>, String> {
    let record = if let EventData::ToolResult(record) = &event.data {
        record.as_ref()
    } else if let EventData::CodeDispatch(dispatch) = &event.data {
        &dispatch.result
    } else {
        return Ok(None);
    };
    if (record.value.is_some() && record.details.is_some()) || find(line, b"_blob\":", 0).is_none()
    {
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct Line {
        data: Data,
    }
    #[derive(serde::Deserialize)]
    struct Data {
        #[serde(flatten)]
        own: ShelfRefs,
        #[serde(default)]
        result: Option<ShelfRefs>,
    }
    let parsed: Line = serde_json::from_slice(line).map_err(|error| {
        format!("the line's references to large values are not readable: {error}")
    })?;
    let refs = match parsed.data.result {
        Some(result) if parsed.data.own.is_empty() => result,
        _ => parsed.data.own,
    };
    Ok((!refs.is_empty()).then_some(refs))
}

/// The event as it is stored: large values and whole blocks moved to the shelf, the
/// references to them written first in the record's object of the line (the envelope keeps
/// its order: a stored line reads like any other).
fn stored_form(event: &Event, cap: usize, shelf: &mut dyn BlobShelf) -> Result<Vec<u8>, String> {
    let encode = |event: &Event| {
        serde_json::to_vec(event).map_err(|error| format!("an event could not be encoded: {error}"))
    };
    let (stored, refs, record_key): (Event, ShelfRefs, &[u8]) =
        if let EventData::ToolResult(record) = &event.data {
            match spill_record(record, cap, shelf)? {
                Some((record, refs)) => (
                    Event {
                        data: EventData::ToolResult(Arc::new(record)),
                        ..event.clone()
                    },
                    refs,
                    b"\"data\":{",
                ),
                None => return encode(event),
            }
        } else if let EventData::CodeDispatch(dispatch) = &event.data {
            match spill_record(&dispatch.result, cap, shelf)? {
                Some((result, refs)) => {
                    let mut dispatch = dispatch.as_ref().clone();
                    dispatch.result = result;
                    (
                        Event {
                            data: EventData::CodeDispatch(Box::new(dispatch)),
                            ..event.clone()
                        },
                        refs,
                        b"\"result\":{",
                    )
                }
                None => return encode(event),
            }
        } else {
            return encode(event);
        };
    let mut line = encode(&stored)?;
    if refs.is_empty() {
        return Ok(line);
    }
    // Quotes inside strings are escaped, so the first bare `"data":{` (or, after it,
    // `"result":{`) is the record's own object; a record always has `content` after it.
    let data_at = find(&line, b"\"data\":{", 0).ok_or("a stored event has no data")?;
    let open =
        find(&line, record_key, data_at).ok_or("a stored record has no object")? + record_key.len();
    let mut inserted = Vec::new();
    for (key, blob) in [
        ("value_blob", &refs.value_blob),
        ("details_blob", &refs.details_blob),
    ] {
        if let Some(blob) = blob {
            inserted.extend_from_slice(format!("\"{key}\":").as_bytes());
            serde_json::to_writer(&mut inserted, blob)
                .map_err(|error| format!("a blob reference could not be encoded: {error}"))?;
            inserted.push(b',');
        }
    }
    line.splice(open..open, inserted);
    Ok(line)
}

/// Where `needle` first stands in `bytes` at or after `from`.
fn find(bytes: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    memchr::memmem::find(bytes.get(from..)?, needle).map(|at| at + from)
}

/// The stored record, with what went to the shelf taken out, and where it went; `None`
/// when nothing had to go.
fn spill_record(
    record: &ToolResultRecord,
    cap: usize,
    shelf: &mut dyn BlobShelf,
) -> Result<Option<(ToolResultRecord, ShelfRefs)>, String> {
    let large_value = record
        .value
        .as_ref()
        .is_some_and(|value| json_len(value) > cap);
    let large_details = record
        .details
        .as_ref()
        .is_some_and(|details| json_len(details) > cap);
    let whole_blocks = record.elided.iter().any(|elided| elided.whole.is_some());
    if !large_value && !large_details && !whole_blocks {
        return Ok(None);
    }
    // Field by field, so what goes to the shelf is never copied (and a new field cannot be
    // forgotten here).
    let ToolResultRecord {
        content,
        value,
        details,
        effects,
        error,
        timing,
        synthetic,
        concludes_turn,
        elided,
    } = record;
    let mut refs = ShelfRefs::default();
    let value = match value {
        Some(value) if large_value => {
            refs.value_blob = Some(shelve(value, shelf)?);
            None
        }
        _ => value.clone(),
    };
    let details = match details {
        Some(details) if large_details => {
            refs.details_blob = Some(shelve(details, shelf)?);
            None
        }
        _ => details.clone(),
    };
    let elided = elided
        .iter()
        .map(|elided| shelve_block(elided, shelf))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Some((
        ToolResultRecord {
            content: content.clone(),
            value,
            details,
            effects: effects.clone(),
            error: error.clone(),
            timing: *timing,
            synthetic: *synthetic,
            concludes_turn: *concludes_turn,
            elided,
        },
        refs,
    )))
}

/// The stored form of an elided block: its whole block on the shelf under its digest, which
/// is checked (the marker in the content names it).
fn shelve_block(elided: &ElidedBlock, shelf: &mut dyn BlobShelf) -> Result<ElidedBlock, String> {
    let Some(whole) = &elided.whole else {
        return Ok(elided.clone());
    };
    let bytes = stored_bytes(whole);
    if digest_of(&bytes) != elided.digest {
        return Err(format!(
            "the whole of content block {} does not match its digest {}",
            elided.index, elided.digest
        ));
    }
    shelf.put(&elided.digest, &bytes)?;
    Ok(ElidedBlock {
        index: elided.index,
        bytes: elided.bytes,
        digest: elided.digest.clone(),
        whole: None,
    })
}

fn shelve(value: &impl Serialize, shelf: &mut dyn BlobShelf) -> Result<BlobRef, String> {
    let bytes = serde_json::to_vec(value)
        .map_err(|error| format!("a large value could not be encoded: {error}"))?;
    let digest = digest_of(&bytes);
    shelf.put(&digest, &bytes)?;
    Ok(BlobRef {
        digest,
        bytes: bytes.len() as u64,
    })
}

/// Puts shelved values back into a stored event, checking their digests: those its line
/// referred to (`refs`, from [`refs_in`]) and the whole blocks its content was cut from.
pub(crate) fn load_form(
    event: &mut Event,
    refs: Option<ShelfRefs>,
    shelf: &dyn BlobShelf,
) -> Result<(), String> {
    let refs = refs.unwrap_or_default();
    if let EventData::ToolResult(record) = &mut event.data
        && (!refs.is_empty() || has_blobs(record))
    {
        let mut loaded = record.as_ref().clone();
        unshelve_record(&mut loaded, refs, shelf)?;
        *record = Arc::new(loaded);
    } else if let EventData::CodeDispatch(dispatch) = &mut event.data
        && (!refs.is_empty() || has_blobs(&dispatch.result))
    {
        unshelve_record(&mut dispatch.result, refs, shelf)?;
    }
    Ok(())
}

/// Decodes one stored line (a JSONL line, a database row) and puts back what it keeps on the
/// shelf.
pub(crate) fn decode_stored(line: &[u8], shelf: &dyn BlobShelf) -> Result<Event, String> {
    let mut event: Event = serde_json::from_slice(line).map_err(|error| error.to_string())?;
    load_stored(&mut event, line, shelf)?;
    Ok(event)
}

/// [`load_form`] for an event decoded from `line`, with the refs the line holds.
pub(crate) fn load_stored(
    event: &mut Event,
    line: &[u8],
    shelf: &dyn BlobShelf,
) -> Result<(), String> {
    let refs = refs_in(event, line)?;
    load_form(event, refs, shelf)
}

fn has_blobs(record: &ToolResultRecord) -> bool {
    record.elided.iter().any(|elided| elided.whole.is_none())
}

fn unshelve_record(
    record: &mut ToolResultRecord,
    refs: ShelfRefs,
    shelf: &dyn BlobShelf,
) -> Result<(), String> {
    if let Some(blob) = refs.value_blob {
        record.value = Some(unshelve(&blob, shelf)?);
    }
    if let Some(blob) = refs.details_blob {
        record.details = Some(Details::from_value(unshelve(&blob, shelf)?));
    }
    for elided in &mut record.elided {
        if elided.whole.is_none() {
            let bytes = checked_bytes(&elided.digest, shelf)?;
            let whole = serde_json::from_slice::<ContentBlock>(&bytes).map_err(|error| {
                format!(
                    "the whole of content block {} ({}) is not a content block: {error}",
                    elided.index, elided.digest
                )
            })?;
            elided.whole = Some(whole);
        }
    }
    Ok(())
}

fn checked_bytes(digest: &str, shelf: &dyn BlobShelf) -> Result<Vec<u8>, String> {
    let bytes = shelf.get(digest)?;
    if digest_of(&bytes) != digest {
        return Err(format!(
            "the large value {digest} does not match its digest"
        ));
    }
    Ok(bytes)
}

fn unshelve(blob: &BlobRef, shelf: &dyn BlobShelf) -> Result<Value, String> {
    let bytes = checked_bytes(&blob.digest, shelf)?;
    serde_json::from_slice(&bytes)
        .map_err(|error| format!("the large value {} is not JSON: {error}", blob.digest))
}
