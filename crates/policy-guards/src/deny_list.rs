//! The deny-list guard: entries of (tool pattern, subject pattern, reason) that no call may
//! match. `permissions` installs its deny rules here too, so a deny holds even if a
//! pre-execute hook, an approval or a session cache would let the call through.

use std::path::PathBuf;

use toolrail_tools_core::{CallView, Guard, GuardVerdict};

use crate::pattern::{CallPattern, Reading};
use crate::subject::CallSubject;

/// One entry: calls its pattern matches are refused with `reason`.
#[derive(Clone, Debug)]
pub struct DenyEntry {
    /// The calls the entry refuses, read as [`Reading::Restrict`] reads a command line.
    pub pattern: CallPattern,
    /// Why, for the model; the refusal quotes the pattern, then this.
    pub reason: String,
}

/// Refuses every call an entry matches; the first matching entry gives the reason.
#[derive(Clone, Debug, Default)]
pub struct DenyListGuard {
    entries: Vec<DenyEntry>,
    /// Canonical workspace roots, so absolute and symlinked paths match relative patterns.
    roots: Vec<PathBuf>,
}

impl DenyListGuard {
    /// A guard over `entries`, checked in order. `roots` are the canonical workspace roots
    /// ([`WorkspaceRoots::as_slice`](crate::WorkspaceRoots::as_slice)), so absolute and symlinked
    /// paths match relative patterns.
    pub fn new(entries: Vec<DenyEntry>, roots: Vec<PathBuf>) -> Self {
        Self { entries, roots }
    }

    /// The entries, in the order they are checked.
    pub fn entries(&self) -> &[DenyEntry] {
        &self.entries
    }
}

impl Guard for DenyListGuard {
    fn name(&self) -> &str {
        "deny-list"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        // Read once: a command subject is parsed at most once for all entries.
        let subject = CallSubject::of(call);
        let tool = call.spec.name();
        match self.entries.iter().find(|entry| {
            entry
                .pattern
                .matches_subject(tool, subject.as_ref(), &self.roots, Reading::Restrict)
        }) {
            Some(entry) => GuardVerdict::Deny {
                reason: format!("denied by `deny {}`: {}", entry.pattern, entry.reason),
            },
            None => GuardVerdict::Abstain,
        }
    }
}
