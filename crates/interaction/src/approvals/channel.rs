//! Approvals for UIs: each request arrives in an inbox as a pending item with an id and is
//! answered through it. A deadline makes it `Expired`, dropping it unanswered makes it
//! `Cancelled`, a cancelled batch withdraws it (`Cancelled`), and with no inbox left the
//! answer is `Unavailable`.

use std::time::Duration;

use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

use crate::pending::{Inbox, Outbox, Pending, Waited};

/// A request for approval waiting in a UI.
pub type PendingApproval = Pending<ApprovalRequest, ApprovalAnswer>;
/// Where a UI receives approval requests.
pub type ApprovalInbox = Inbox<ApprovalRequest, ApprovalAnswer>;

/// An approval service for UIs: each request waits in an [`ApprovalInbox`] until it is
/// answered, withdrawn or expires.
#[derive(Debug)]
pub struct ChannelApprovals {
    outbox: Outbox<ApprovalRequest, ApprovalAnswer>,
}

impl ChannelApprovals {
    /// A service and the inbox its requests arrive in; `deadline` bounds each wait.
    pub fn new(deadline: Option<Duration>) -> (Self, ApprovalInbox) {
        let (outbox, inbox) = Outbox::channel(deadline);
        (Self { outbox }, inbox)
    }
}

impl ApprovalService for ChannelApprovals {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            match self.outbox.ask(request.clone(), cancel).await {
                Waited::Answered(answer) => answer,
                Waited::Dropped | Waited::Cancelled => ApprovalAnswer::Cancelled,
                Waited::Expired => ApprovalAnswer::Expired,
                Waited::NoListener => ApprovalAnswer::Unavailable,
            }
        })
    }
}
