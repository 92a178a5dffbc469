//! Stage 5: guards. A guard can refuse; it cannot allow — its verdict type has no such
//! variant, and `cargo xtask check-guards` keeps guard crates away from the hook decision.

use crate::view::CallView;

/// A guard's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardVerdict {
    /// Refuse the call: `GUARD_DENIED`.
    Deny {
        /// Why, for the model; the pipeline appends the guard's name.
        reason: String,
    },
    /// No objection.
    Abstain,
}

/// A deny-only check that runs after the hooks and any approval allowed a call.
///
/// Implementors guarantee: `check` is quick, has no side effects, and looks only at the
/// call's effective arguments. A panic is caught and fails the call closed (`HOOK_FAILED`).
pub trait Guard: Send + Sync {
    /// A stable name, given in the refusals and failure messages the model reads.
    fn name(&self) -> &str;

    /// Judges `call`, with its arguments as they stand after any rewrite.
    fn check(&self, call: &CallView<'_>) -> GuardVerdict;
}
