//! Approvals asked through the MCP client that made the call (elicitation, a form with one
//! choice). Closed by default: a client that cannot be asked — no elicitation capability,
//! a protocol revision that forbids server-to-client requests (2026-07-28), a declined or
//! cancelled form, a broken connection — is never a yes.

use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::{RoleServer, service::Peer};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService};

/// An [`ApprovalService`] that asks the MCP client whose call is running.
///
/// Give the same value to the session (its approval service) and to
/// [`McpServe::asking_through`](super::McpServe::asking_through), which points it at each
/// call's client before the call runs.
///
/// ```
/// use toolrail_mcp::serve::ElicitedApprovals;
/// let approvals = std::sync::Arc::new(ElicitedApprovals::default());
/// # let _ = approvals;
/// ```
#[derive(Default)]
pub struct ElicitedApprovals {
    peer: Mutex<Option<Peer<RoleServer>>>,
}

impl std::fmt::Debug for ElicitedApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElicitedApprovals")
            .field("client", &self.peer.lock().is_some())
            .finish()
    }
}

/// The form: one required choice.
fn decision_form(message: String) -> Option<ElicitRequestParams> {
    serde_json::from_value(json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "description": "allow_once runs this call; allow_for_session also covers later calls like it in this session; reject refuses it",
                    "enum": ["allow_once", "allow_for_session", "reject"],
                    "enumNames": ["Allow once", "Allow for this session", "Reject"],
                },
            },
            "required": ["decision"],
        },
    }))
    .ok()
}

impl ElicitedApprovals {
    /// The client to ask from now on (the one whose call runs next).
    pub(crate) fn asking(&self, peer: Peer<RoleServer>) {
        *self.peer.lock() = Some(peer);
    }

    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let Some(peer) = self.peer.lock().clone() else {
            return ApprovalAnswer::Unavailable;
        };
        let mut message = format!(
            "toolrail: `{}` needs your approval ({})",
            request.identity.name, request.reason
        );
        if let Some(subject) = &request.subject {
            message.push_str(&format!("\n\n{subject}"));
        }
        if let Some(preview) = &request.preview {
            message.push_str(&format!("\n\n{preview}"));
        }
        let Some(form) = decision_form(message) else {
            return ApprovalAnswer::Unavailable;
        };
        let answered = match peer.create_elicitation(form).await {
            Ok(answered) => answered,
            Err(error) => {
                // No elicitation capability, a revision without server requests, a broken
                // connection: no one could be asked.
                tracing::warn!("the MCP client could not be asked for an approval: {error}");
                return ApprovalAnswer::Unavailable;
            }
        };
        let decision = answered
            .content
            .as_ref()
            .and_then(|content| content.get("decision"))
            .and_then(serde_json::Value::as_str);
        match (answered.action, decision) {
            (ElicitationAction::Accept, Some("allow_once")) => ApprovalAnswer::AllowedOnce,
            (ElicitationAction::Accept, Some("allow_for_session")) => match &request.session_key {
                Some(key) => ApprovalAnswer::AllowedForSession { key: key.clone() },
                None => ApprovalAnswer::AllowedOnce,
            },
            (ElicitationAction::Accept, Some("reject")) => {
                ApprovalAnswer::Rejected { reason: None }
            }
            (ElicitationAction::Decline, _) => ApprovalAnswer::Rejected {
                reason: Some("declined in the MCP client".to_owned()),
            },
            (ElicitationAction::Cancel, _) => ApprovalAnswer::Cancelled,
            // An answer outside the form's choices, or an action this version does not
            // know, is no yes.
            #[allow(clippy::wildcard_enum_match_arm)]
            _ => ApprovalAnswer::Rejected {
                reason: Some("the MCP client's answer was none of the form's choices".to_owned()),
            },
        }
    }
}

impl ApprovalService for ElicitedApprovals {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            tokio::select! {
                biased;
                () = cancel.cancelled() => ApprovalAnswer::Cancelled,
                answer = self.ask(request) => answer,
            }
        })
    }
}

/// Kept for callers that hold the service behind an `Arc` of their own.
impl ElicitedApprovals {
    /// A new service, shared.
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::default())
    }
}
