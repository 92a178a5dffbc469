//! Approval services: scripted answers for scenarios and tests, a channel for UIs, an
//! endpoint on a loopback address for answers over the network, and an interactive terminal. Every one is closed by default: nothing that cannot be asked is an
//! approval.

mod channel;
mod network;
mod scripted;
mod terminal;

pub use channel::{ApprovalInbox, ChannelApprovals, PendingApproval};
pub use network::{ApprovalEndpoint, EndpointError};
pub use scripted::ScriptedApprovals;
pub use terminal::{TerminalApprovals, approval_question, parse_reply};
