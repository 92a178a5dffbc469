//! Approvals asked through the MCP client that made the call: an elicitation form with one
//! choice. On revisions with a handshake (up to 2025-11-25) the server asks mid-call
//! (`elicitation/create`); on the stateless 2026-07-28 revision, which forbids requests
//! from the server, the question goes back as the call's `input_required` result and the
//! client's retry carries the answer (see `parked.rs`). Closed by default: no elicitation
//! capability, a declined or cancelled form, an answer outside the form, a broken
//! connection or a client that never comes back is never a yes.

use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::{RoleServer, service::Peer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
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
/// let approvals = ElicitedApprovals::shared();
/// # let _ = approvals;
/// ```
#[derive(Default)]
pub struct ElicitedApprovals {
    client: Mutex<Option<Asking>>,
}

/// How the running call's client is asked.
#[derive(Clone)]
pub(crate) enum Asking {
    /// A `elicitation/create` request on the connection (revisions with a handshake).
    Request(Peer<RoleServer>),
    /// Handed to the call's driver, which returns it as an `input_required` result.
    Returned(mpsc::UnboundedSender<Question>),
    /// The client declared no elicitation: it cannot be asked.
    Nobody,
}

/// A question the call's driver returns to the client, and where its answer goes.
pub(crate) struct Question {
    pub(crate) form: ElicitRequestParams,
    pub(crate) session_key: Option<String>,
    pub(crate) answer: oneshot::Sender<ApprovalAnswer>,
}

impl std::fmt::Debug for ElicitedApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElicitedApprovals")
            .field("client", &self.client.lock().is_some())
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

/// The client's answer to the form, however it came (a response or a retry's input).
pub(crate) fn answer_of(
    action: &ElicitationAction,
    content: Option<&Value>,
    session_key: Option<&String>,
) -> ApprovalAnswer {
    let decision = content
        .and_then(|content| content.get("decision"))
        .and_then(Value::as_str);
    match (action, decision) {
        (ElicitationAction::Accept, Some("allow_once")) => ApprovalAnswer::AllowedOnce,
        (ElicitationAction::Accept, Some("allow_for_session")) => match session_key {
            Some(key) => ApprovalAnswer::AllowedForSession { key: key.clone() },
            None => ApprovalAnswer::AllowedOnce,
        },
        (ElicitationAction::Accept, Some("reject")) => ApprovalAnswer::Rejected { reason: None },
        (ElicitationAction::Decline, _) => ApprovalAnswer::Rejected {
            reason: Some("declined in the MCP client".to_owned()),
        },
        (ElicitationAction::Cancel, _) => ApprovalAnswer::Cancelled,
        // An answer outside the form's choices, or an action this version does not know,
        // is no yes.
        #[allow(clippy::wildcard_enum_match_arm)]
        _ => ApprovalAnswer::Rejected {
            reason: Some("the MCP client's answer was none of the form's choices".to_owned()),
        },
    }
}

impl ElicitedApprovals {
    /// A new service, shared.
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// How to ask from now on (the client whose call runs next).
    pub(crate) fn asking(&self, asking: Asking) {
        *self.client.lock() = Some(asking);
    }

    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let Some(asking) = self.client.lock().clone() else {
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
        match asking {
            Asking::Nobody => ApprovalAnswer::Unavailable,
            Asking::Request(peer) => match peer.create_elicitation(form).await {
                Ok(answered) => answer_of(
                    &answered.action,
                    answered.content.as_ref(),
                    request.session_key.as_ref(),
                ),
                Err(error) => {
                    // No elicitation capability, a broken connection: no one could be asked.
                    tracing::warn!("the MCP client could not be asked for an approval: {error}");
                    ApprovalAnswer::Unavailable
                }
            },
            Asking::Returned(questions) => {
                let (answer, answered) = oneshot::channel();
                let question = Question {
                    form,
                    session_key: request.session_key.clone(),
                    answer,
                };
                if questions.send(question).is_err() {
                    return ApprovalAnswer::Unavailable;
                }
                // The driver answers, or drops the question when the client never came
                // back within its time.
                answered.await.unwrap_or(ApprovalAnswer::Expired)
            }
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
