//! The deny-list guard: entries of (tool pattern, subject pattern, reason) that no call may
//! match. `permissions` installs its deny rules here too, so a deny holds even if a
//! pre-execute hook, an approval or a session cache would let the call through.

use std::path::PathBuf;

use toolrail_tools_core::{CallView, Guard, GuardVerdict};

use crate::pattern::{SubjectPattern, ToolPattern};

/// One entry: calls of tools matching `tool` (and, when given, whose subject matches
/// `subject`) are refused with `reason`.
#[derive(Clone, Debug)]
pub struct DenyEntry {
    pub tool: ToolPattern,
    pub subject: Option<SubjectPattern>,
    pub reason: String,
}

impl DenyEntry {
    /// Whether the entry covers the call. An entry with a subject pattern covers only calls
    /// that have a subject; a call whose tool declares none is not matched by it.
    pub fn matches(&self, call: &CallView<'_>, roots: &[PathBuf]) -> bool {
        if !self.tool.matches(call.spec.name()) {
            return false;
        }
        match (&self.subject, call.subject()) {
            (None, _) => true,
            (Some(pattern), Some(subject)) => pattern.matches(&subject, roots),
            (Some(_), None) => false,
        }
    }

    /// `tool(subject)` or `tool`, as rules are written.
    pub fn rule_text(&self) -> String {
        match &self.subject {
            Some(subject) => format!("{}({subject})", self.tool),
            None => self.tool.to_string(),
        }
    }
}

/// Refuses every call an entry matches; the first matching entry gives the reason.
#[derive(Clone, Debug, Default)]
pub struct DenyListGuard {
    entries: Vec<DenyEntry>,
    /// Canonical workspace roots, so absolute and symlinked paths match relative patterns.
    roots: Vec<PathBuf>,
}

impl DenyListGuard {
    pub fn new(entries: Vec<DenyEntry>, roots: Vec<PathBuf>) -> Self {
        Self { entries, roots }
    }

    pub fn entries(&self) -> &[DenyEntry] {
        &self.entries
    }
}

impl Guard for DenyListGuard {
    fn name(&self) -> &str {
        "deny-list"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        match self
            .entries
            .iter()
            .find(|entry| entry.matches(call, &self.roots))
        {
            Some(entry) => GuardVerdict::Deny {
                reason: format!("denied by `deny {}`: {}", entry.rule_text(), entry.reason),
            },
            None => GuardVerdict::Abstain,
        }
    }
}
