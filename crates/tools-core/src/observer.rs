//! Stage 10: result observers, notified before `tool/result` is appended. An observer's
//! error or panic is logged and isolated; it never changes the outcome.

use toolrail_session_log::ToolResultRecord;

use crate::context::CallIdentity;

/// An observer's failure (logged, never propagated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ObserverError(pub String);

/// Watches committed results (metrics, UIs, audit mirrors).
///
/// Implementors guarantee: `observe` is quick and does not block.
pub trait ResultObserver: Send + Sync {
    /// A stable name, given in the warning logged when the observer fails or panics.
    fn name(&self) -> &str;

    /// Sees `result`, the record about to be committed for `identity`'s call, before its
    /// `tool/result` is appended. An `Err` is logged and changes nothing.
    fn observe(
        &self,
        identity: &CallIdentity,
        result: &ToolResultRecord,
    ) -> Result<(), ObserverError>;
}
