//! Stage 4: the approval seam. Closed by default: no service, a timeout, a dropped channel or
//! a cancelled batch is never an approval.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::BoxFuture;
pub use toolrail_session_log::event::ApprovalAnswer;

use crate::context::CallIdentity;

/// What the approver is shown.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalRequest {
    /// The call asking: its id, its tool's name, its turn and step.
    pub identity: CallIdentity,
    /// The tool's [`ToolKind`](crate::ToolKind) as cards and configuration write it (`execute`,
    /// `edit`).
    pub tool_kind: &'static str,
    /// The call's subject (the command, the path), when its tool declares one.
    pub subject: Option<String>,
    /// The effective arguments (after any rewrite), shared with the call.
    pub arguments: Arc<Value>,
    /// Why the call needs an approval: the reason of the pre-execute hook that asked, or of the
    /// tool that must ask (both, joined by `; `, when both do).
    pub reason: String,
    /// What an "approve for session" answer would cover (`bash(git status)`). `None` when no
    /// session approval may cover the call: an `AllowedForSession` answer then counts once.
    pub session_key: Option<String>,
    /// What the call would change, computed from its arguments and the world as it is when
    /// asked (a unified diff for a file edit), for tools that can say ([`Tool::preview`]).
    ///
    /// [`Tool::preview`]: crate::Tool::preview
    pub preview: Option<String>,
}

/// Asks a person (or a policy service) whether a call may run.
///
/// Implementors guarantee: the returned future resolves; it answers `Cancelled` promptly
/// when `cancel` fires; it never answers an allowed variant without an actual approval.
pub trait ApprovalService: Send + Sync {
    /// Asks whether the call `request` describes may run. `cancel` fires when the batch is
    /// cancelled; the pipeline also stops waiting after its approval timeout (`Expired`).
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer>;
}

/// A shared service is a service: the same approver can sit behind several wrappers.
impl<T: ApprovalService + ?Sized> ApprovalService for std::sync::Arc<T> {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        (**self).request(request, cancel)
    }
}
