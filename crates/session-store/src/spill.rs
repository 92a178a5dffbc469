//! Large values beside the log: a result's `value` or `details` whose compact JSON is over
//! the store's cap is kept on a shelf (files, a table) under its SHA-256, and the stored event
//! carries a [`BlobRef`] instead. The whole blocks a result's content was cut from
//! ([`ElidedBlock`]) always go to the shelf, under the digest the cut content's marker names.
//! Reading a session puts every value and block back, checking its digest, so the events a
//! reader gets are the events that were appended.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;
use toolrail_session_log::digest_of;

use serde::Serialize;
use toolrail_session_log::ContentBlock;
use toolrail_session_log::details::Details;
use toolrail_session_log::{BlobRef, ToolResultRecord, json_len};
use toolrail_session_log::{ElidedBlock, stored_bytes};
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
        let stored = stored_form(event, cap, shelf)?;
        return serde_json::to_writer(&mut *out, stored.as_ref())
            .map_err(|error| format!("an event could not be encoded: {error}"));
    }
    let start = out.len();
    serde_json::to_writer(&mut *out, event)
        .map_err(|error| format!("an event could not be encoded: {error}"))?;
    if out.len() - start <= cap {
        return Ok(());
    }
    out.truncate(start);
    let stored = stored_form(event, cap, shelf)?;
    serde_json::to_writer(&mut *out, stored.as_ref())
        .map_err(|error| format!("an event could not be encoded: {error}"))
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

/// The event as it is stored: large values and whole blocks moved to the shelf.
fn stored_form<'a>(
    event: &'a Event,
    cap: usize,
    shelf: &mut dyn BlobShelf,
) -> Result<Cow<'a, Event>, String> {
    let replaced = if let EventData::ToolResult(record) = &event.data {
        spill_record(record, cap, shelf)?.map(|record| EventData::ToolResult(Arc::new(record)))
    } else if let EventData::CodeDispatch(dispatch) = &event.data {
        spill_record(&dispatch.result, cap, shelf)?.map(|result| {
            let mut dispatch = dispatch.as_ref().clone();
            dispatch.result = result;
            EventData::CodeDispatch(Box::new(dispatch))
        })
    } else {
        None
    };
    Ok(match replaced {
        None => Cow::Borrowed(event),
        Some(data) => Cow::Owned(Event {
            data,
            ..event.clone()
        }),
    })
}

fn spill_record(
    record: &ToolResultRecord,
    cap: usize,
    shelf: &mut dyn BlobShelf,
) -> Result<Option<ToolResultRecord>, String> {
    let large_value = record
        .value
        .as_ref()
        .is_some_and(|value| json_len(value) > cap);
    let large_details = record
        .details
        .as_ref()
        .is_some_and(|details| encoded_len(details) > cap);
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
        value_blob,
        details_blob,
    } = record;
    let (value, value_blob) = match value {
        Some(value) if large_value => (None, Some(shelve(value, shelf)?)),
        _ => (value.clone(), value_blob.clone()),
    };
    let (details, details_blob) = match details {
        Some(details) if large_details => (None, Some(shelve(details, shelf)?)),
        _ => (details.clone(), details_blob.clone()),
    };
    let elided = elided
        .iter()
        .map(|elided| shelve_block(elided, shelf))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Some(ToolResultRecord {
        content: content.clone(),
        value,
        details,
        effects: effects.clone(),
        error: error.clone(),
        timing: *timing,
        synthetic: *synthetic,
        concludes_turn: *concludes_turn,
        elided,
        value_blob,
        details_blob,
    }))
}

/// The length of a value's compact JSON text.
fn encoded_len(details: &Details) -> usize {
    serde_json::to_value(details).map_or(usize::MAX, |value| json_len(&value))
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

/// Puts shelved values back into a stored event, checking their digests.
pub(crate) fn load_form(event: &mut Event, shelf: &dyn BlobShelf) -> Result<(), String> {
    if let EventData::ToolResult(record) = &mut event.data
        && has_blobs(record)
    {
        let mut loaded = record.as_ref().clone();
        unshelve_record(&mut loaded, shelf)?;
        *record = Arc::new(loaded);
    } else if let EventData::CodeDispatch(dispatch) = &mut event.data
        && has_blobs(&dispatch.result)
    {
        unshelve_record(&mut dispatch.result, shelf)?;
    }
    Ok(())
}

fn has_blobs(record: &ToolResultRecord) -> bool {
    record.value_blob.is_some()
        || record.details_blob.is_some()
        || record.elided.iter().any(|elided| elided.whole.is_none())
}

fn unshelve_record(record: &mut ToolResultRecord, shelf: &dyn BlobShelf) -> Result<(), String> {
    if let Some(blob) = record.value_blob.take() {
        record.value = Some(unshelve(&blob, shelf)?);
    }
    if let Some(blob) = record.details_blob.take() {
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
