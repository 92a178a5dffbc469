//! Approvals answered by the ACP client: each question is a `session/request_permission`
//! request with the options allow once, allow for the session (when a session approval
//! could cover the call) and reject. Only a selected allow option is a yes: a client that
//! answers `cancelled`, an error, an option toolrail did not offer, or that goes away is
//! never one.

use std::path::PathBuf;

use serde_json::{Value, json};
use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

use super::updates::{self, Announced};
use super::wire::{Peer, RequestFailed};

/// The option ids toolrail offers.
const ALLOW_ONCE: &str = "allow_once";
const ALLOW_FOR_SESSION: &str = "allow_for_session";
const REJECT: &str = "reject";

/// Asks one ACP session's client.
pub(crate) struct ClientApprovals {
    peer: Peer,
    session: String,
    /// The workspace, for the calls' locations.
    root: PathBuf,
    /// The running turn's calls the client knows of.
    announced: Announced,
}

impl ClientApprovals {
    pub(crate) fn new(peer: Peer, session: String, root: PathBuf, announced: Announced) -> Self {
        Self {
            peer,
            session,
            root,
            announced,
        }
    }

    /// Tells the client of the call first (`tool_call`, pending), as ACP's flow has it, and
    /// gives back the same update for the permission request.
    fn announce(&self, request: &ApprovalRequest) -> Value {
        let identity = &request.identity;
        let update = updates::call(
            &identity.call_id,
            &identity.name,
            request.tool_kind,
            &request.arguments,
            &self.root,
        );
        if self.announced.lock().insert(identity.call_id.clone()) {
            self.peer.notify(
                "session/update",
                json!({"sessionId": self.session, "update": update.clone()}),
            );
        }
        update
    }

    /// The request's parameters: the call as a tool call update (`tool_call`, as
    /// announced), and the options.
    fn params(&self, request: &ApprovalRequest, mut tool_call: Value) -> Value {
        if let Some(object) = tool_call.as_object_mut() {
            object.remove("sessionUpdate");
            let mut shown = vec![json!({
                "type": "content",
                "content": {"type": "text", "text": request.reason},
            })];
            if let Some(preview) = &request.preview {
                shown.push(json!({
                    "type": "content",
                    "content": {"type": "text", "text": format!("```diff\n{}\n```", preview.trim_end())},
                }));
            }
            object.insert("content".to_owned(), Value::Array(shown));
        }
        let mut options =
            vec![json!({"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"})];
        if let Some(key) = &request.session_key {
            options.push(json!({
                "optionId": ALLOW_FOR_SESSION,
                "name": format!("Allow {key} for this session"),
                "kind": "allow_always",
            }));
        }
        options.push(json!({"optionId": REJECT, "name": "Reject", "kind": "reject_once"}));
        json!({"sessionId": self.session, "toolCall": tool_call, "options": options})
    }
}

impl ApprovalService for ClientApprovals {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            let announced = self.announce(request);
            let params = self.params(request, announced);
            tokio::select! {
                () = cancel.cancelled() => ApprovalAnswer::Cancelled,
                answer = self.peer.request("session/request_permission", params) => {
                    answer_of(answer, request.session_key.as_deref())
                }
            }
        })
    }
}

/// What the client's answer means.
fn answer_of(answer: Result<Value, RequestFailed>, session_key: Option<&str>) -> ApprovalAnswer {
    let response = match answer {
        Ok(response) => response,
        Err(RequestFailed::Refused(_) | RequestFailed::Gone) => return ApprovalAnswer::Unavailable,
    };
    let outcome = &response["outcome"];
    match outcome["outcome"].as_str() {
        Some("cancelled") => ApprovalAnswer::Cancelled,
        Some("selected") => match (outcome["optionId"].as_str(), session_key) {
            (Some(ALLOW_ONCE), _) => ApprovalAnswer::AllowedOnce,
            (Some(ALLOW_FOR_SESSION), Some(key)) => ApprovalAnswer::AllowedForSession {
                key: key.to_owned(),
            },
            (Some(REJECT), _) => ApprovalAnswer::Rejected {
                reason: Some("rejected in the editor".to_owned()),
            },
            (other, _) => ApprovalAnswer::Rejected {
                reason: Some(format!(
                    "the editor chose option {}, which toolrail did not offer",
                    other.unwrap_or("(none)")
                )),
            },
        },
        _ => ApprovalAnswer::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::acp::wire::{RpcError, code};

    fn selected(option: &str) -> Result<Value, RequestFailed> {
        Ok(json!({"outcome": {"outcome": "selected", "optionId": option}}))
    }

    #[test]
    fn only_an_offered_allow_option_is_a_yes() {
        let key = Some("bash(touch a)");
        let answers = [
            answer_of(selected(ALLOW_ONCE), key),
            answer_of(selected(ALLOW_FOR_SESSION), key),
            answer_of(selected(ALLOW_FOR_SESSION), None),
            answer_of(selected(REJECT), key),
            answer_of(Ok(json!({"outcome": {"outcome": "cancelled"}})), key),
            answer_of(Ok(json!({})), key),
            answer_of(
                Err(RequestFailed::Refused(RpcError::new(
                    code::INTERNAL_ERROR,
                    "x",
                ))),
                key,
            ),
            answer_of(Err(RequestFailed::Gone), key),
        ];
        assert_eq!(
            answers,
            [
                ApprovalAnswer::AllowedOnce,
                ApprovalAnswer::AllowedForSession {
                    key: "bash(touch a)".to_owned()
                },
                ApprovalAnswer::Rejected {
                    reason: Some(
                        "the editor chose option allow_for_session, which toolrail did not offer"
                            .to_owned()
                    )
                },
                ApprovalAnswer::Rejected {
                    reason: Some("rejected in the editor".to_owned())
                },
                ApprovalAnswer::Cancelled,
                ApprovalAnswer::Unavailable,
                ApprovalAnswer::Unavailable,
                ApprovalAnswer::Unavailable,
            ]
        );
    }
}
