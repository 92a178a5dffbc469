//! What a scenario expects of its run: the sequence of event kinds, and per call the error
//! code of its result (`ok` for a success). Each difference is reported, not just the first.

use std::collections::BTreeMap;

use serde::Deserialize;
use toolrail_session_log::{Event, EventData};

/// A scenario's `expect`: what its run must produce. Each part left out is not checked.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// Every event kind of the log, in order (`session/start` first).
    pub event_kinds: Option<Vec<String>>,
    /// Call id → `ok` or the error code of its result.
    #[serde(default)]
    pub results: BTreeMap<String, String>,
}

impl Expectations {
    /// The differences between a session's events and what is expected.
    pub fn check(&self, events: &[Event]) -> Vec<String> {
        let mut mismatches = Vec::new();
        if let Some(expected) = &self.event_kinds {
            let kinds: Vec<&str> = events.iter().map(|event| event.data.kind()).collect();
            if kinds != expected.iter().map(String::as_str).collect::<Vec<_>>() {
                mismatches.push(format!(
                    "event kinds differ:\n  expected {expected:?}\n  found    {kinds:?}"
                ));
            }
        }
        let mut outcomes: BTreeMap<String, String> = BTreeMap::new();
        for event in events {
            if let (EventData::ToolResult(record), Some(call_id)) = (&event.data, &event.call_id) {
                let outcome = record
                    .error_code()
                    .map_or_else(|| "ok".to_owned(), ToString::to_string);
                outcomes.insert(call_id.to_string(), outcome);
            }
        }
        for (call_id, expected) in &self.results {
            match outcomes.get(call_id) {
                Some(found) if found == expected => {}
                Some(found) => mismatches.push(format!(
                    "call `{call_id}`: expected {expected}, found {found}"
                )),
                None => mismatches.push(format!(
                    "call `{call_id}`: expected {expected}, but it has no result"
                )),
            }
        }
        mismatches
    }
}
