//! Large values beside the log: a result's `value` or `details` whose compact JSON is over
//! the store's cap is kept on a shelf (files, a table) under its SHA-256, and the stored event
//! carries a [`BlobRef`] instead. Reading a session puts every value back, checking its
//! digest, so the events a reader gets are the events that were appended.

use std::borrow::Cow;
use std::sync::Arc;

use crate::digest::digest_of;
use serde_json::Value;

use crate::event::{Event, EventData};
use crate::result::{BlobRef, ToolResultRecord, json_len};

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
/// the cap, and then no value in them can be over it: only a longer line is looked into.
pub(crate) fn encode_stored(
    event: &Event,
    cap: usize,
    shelf: &mut dyn BlobShelf,
    out: &mut Vec<u8>,
) -> Result<(), String> {
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

/// The event as it is stored: large values moved to the shelf.
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
    let large = |value: &Option<Value>| value.as_ref().is_some_and(|value| json_len(value) > cap);
    let (large_value, large_details) = (large(&record.value), large(&record.details));
    if !large_value && !large_details {
        return Ok(None);
    }
    let mut stored = record.clone();
    if large_value && let Some(value) = stored.value.take() {
        stored.value_blob = Some(shelve(&value, shelf)?);
    }
    if large_details && let Some(details) = stored.details.take() {
        stored.details_blob = Some(shelve(&details, shelf)?);
    }
    Ok(Some(stored))
}

fn shelve(value: &Value, shelf: &mut dyn BlobShelf) -> Result<BlobRef, String> {
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
    record.value_blob.is_some() || record.details_blob.is_some()
}

fn unshelve_record(record: &mut ToolResultRecord, shelf: &dyn BlobShelf) -> Result<(), String> {
    if let Some(blob) = record.value_blob.take() {
        record.value = Some(unshelve(&blob, shelf)?);
    }
    if let Some(blob) = record.details_blob.take() {
        record.details = Some(unshelve(&blob, shelf)?);
    }
    Ok(())
}

fn unshelve(blob: &BlobRef, shelf: &dyn BlobShelf) -> Result<Value, String> {
    let bytes = shelf.get(&blob.digest)?;
    if digest_of(&bytes) != blob.digest {
        return Err(format!(
            "the large value {} does not match its digest",
            blob.digest
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|error| format!("the large value {} is not JSON: {error}", blob.digest))
}
