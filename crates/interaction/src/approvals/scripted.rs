//! Answers from a list, in order, for scenarios and tests. When the list runs out the
//! answer is `Unavailable`: a script that did not foresee a question never approves it. A
//! scripted `AllowedForSession` with an empty key stands for the key the request offers (or
//! for `AllowedOnce`, when it offers none).

use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

use crate::script::{Cue, Script};

/// Answers approval requests from a list, in order, and keeps every request it was asked.
#[derive(Debug, Default)]
pub struct ScriptedApprovals {
    script: Script<ApprovalRequest, ApprovalAnswer>,
}

impl ScriptedApprovals {
    /// A service giving `answers` in order; a request asked once the batch is cancelled is
    /// `Cancelled` and uses none.
    pub fn new(answers: impl IntoIterator<Item = ApprovalAnswer>) -> Self {
        Self {
            script: Script::new(answers),
        }
    }

    /// Every request so far, in the order asked.
    pub fn asked(&self) -> Vec<ApprovalRequest> {
        self.script.asked()
    }

    /// The answers not used yet.
    pub fn remaining(&self) -> usize {
        self.script.remaining()
    }
}

impl ApprovalService for ScriptedApprovals {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        let answer = match self.script.cue(request, cancel) {
            Cue::Answer(ApprovalAnswer::AllowedForSession { key }) if key.is_empty() => {
                match &request.session_key {
                    Some(offered) => ApprovalAnswer::AllowedForSession {
                        key: offered.clone(),
                    },
                    // Nothing offered for the session: it is allowed once.
                    None => ApprovalAnswer::AllowedOnce,
                }
            }
            Cue::Answer(answer) => answer,
            Cue::Cancelled => ApprovalAnswer::Cancelled,
            Cue::RanOut => ApprovalAnswer::Unavailable,
        };
        Box::pin(std::future::ready(answer))
    }
}
