//! "Approve for session": an `AllowedForSession {key}` answer is remembered, so calls the key
//! covers do not ask again in this session. A key is written like a rule's pattern
//! (`bash(git push*)`, `write`). The memory is rebuilt from the log on resume.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use toolrail_policy_guards::{CallPattern, CallSubject, Reading};
use toolrail_tools_core::log::{BoxFuture, Event, EventData};
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CallView, CancellationToken,
    command_line::SimpleCommand,
};

/// The keys approved for this session. Clones share the memory.
#[derive(Clone, Debug, Default)]
pub struct SessionApprovals {
    keys: Arc<RwLock<Vec<(String, CallPattern)>>>,
}

impl SessionApprovals {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// The keys of every `approval/decided` event that allowed for the session, in order.
    pub fn from_events(events: &[Event]) -> Self {
        let approvals = Self::new();
        for event in events {
            if let EventData::ApprovalDecided(decided) = &event.data
                && let ApprovalAnswer::AllowedForSession { key } = &decided.answer
            {
                approvals.remember(key);
            }
        }
        approvals
    }

    /// Remembers `key`. A key that is not a valid pattern covers nothing and is only
    /// reported: an approver's typo must not widen what runs.
    pub fn remember(&self, key: &str) -> bool {
        match CallPattern::parse(key) {
            Ok(pattern) => {
                let mut keys = self.keys.write();
                if !keys.iter().any(|(known, _)| known == key) {
                    keys.push((key.to_owned(), pattern));
                }
                true
            }
            Err(error) => {
                tracing::warn!("an approval for the session has an unusable key: {error}");
                false
            }
        }
    }

    /// The first remembered key covering the call (every command of a command line).
    pub fn covering(&self, call: &CallView<'_>, roots: &[PathBuf]) -> Option<String> {
        self.keys
            .read()
            .iter()
            .find(|(_, pattern)| pattern.matches(call, roots, Reading::Permit))
            .map(|(key, _)| key.clone())
    }

    /// The first remembered key covering one simple command of a call's command line: a key
    /// without a subject covers every command of its tool, one with a subject must name the
    /// command whole, in a line with no file redirections.
    pub fn covering_command(
        &self,
        tool: &str,
        subject: &CallSubject<'_>,
        command: &SimpleCommand,
    ) -> Option<String> {
        self.keys
            .read()
            .iter()
            .find(|(_, pattern)| pattern.matches_command(tool, subject, command, Reading::Permit))
            .map(|(key, _)| key.clone())
    }

    /// The remembered keys, in the order they were first approved.
    pub fn keys(&self) -> Vec<String> {
        self.keys
            .read()
            .iter()
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// An approval service that remembers "approve for session" answers of the service it wraps.
pub struct RememberApprovals<S> {
    inner: S,
    session: SessionApprovals,
}

impl<S> RememberApprovals<S> {
    /// Wraps `inner`, remembering the keys it approves in `session` (the memory
    /// [`Permissions::with_session`](crate::Permissions::with_session) consults). An
    /// `AllowedForSession` answer to a request that offered no key is passed on as `AllowedOnce`.
    pub fn new(inner: S, session: SessionApprovals) -> Self {
        Self { inner, session }
    }
}

impl<S: ApprovalService> ApprovalService for RememberApprovals<S> {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            let answer = self.inner.request(request, cancel).await;
            match answer {
                // Remembered only where the request offered it: what may never be approved
                // for the session (leaving plan mode) is approved once.
                ApprovalAnswer::AllowedForSession { key } if request.session_key.is_some() => {
                    self.session.remember(&key);
                    ApprovalAnswer::AllowedForSession { key }
                }
                ApprovalAnswer::AllowedForSession { .. } => ApprovalAnswer::AllowedOnce,
                other @ (ApprovalAnswer::AllowedOnce
                | ApprovalAnswer::Rejected { .. }
                | ApprovalAnswer::Cancelled
                | ApprovalAnswer::Expired
                | ApprovalAnswer::Unavailable) => other,
            }
        })
    }
}
