//! Answers from a list, in order, for scenarios and tests. When the list runs out the
//! answer is `Unavailable`: a script that did not foresee a question never approves it. A
//! scripted `AllowedForSession` with an empty key stands for the key the request offers (or
//! for `AllowedOnce`, when it offers none).

use std::collections::VecDeque;

use parking_lot::Mutex;
use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

/// Answers approval requests from a list, in order, and keeps every request it was asked.
#[derive(Debug, Default)]
pub struct ScriptedApprovals {
    answers: Mutex<VecDeque<ApprovalAnswer>>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl ScriptedApprovals {
    /// A service giving `answers` in order; a request asked once the batch is cancelled is
    /// `Cancelled` and uses none.
    pub fn new(answers: impl IntoIterator<Item = ApprovalAnswer>) -> Self {
        Self {
            answers: Mutex::new(answers.into_iter().collect()),
            asked: Mutex::new(Vec::new()),
        }
    }

    /// Every request so far, in the order asked.
    pub fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().clone()
    }

    /// The answers not used yet.
    pub fn remaining(&self) -> usize {
        self.answers.lock().len()
    }
}

impl ApprovalService for ScriptedApprovals {
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalAnswer> {
        self.asked.lock().push(request.clone());
        let answer = if cancel.is_cancelled() {
            ApprovalAnswer::Cancelled
        } else {
            match self.answers.lock().pop_front() {
                Some(ApprovalAnswer::AllowedForSession { key }) if key.is_empty() => {
                    match &request.session_key {
                        Some(offered) => ApprovalAnswer::AllowedForSession {
                            key: offered.clone(),
                        },
                        // Nothing offered for the session: it is allowed once.
                        None => ApprovalAnswer::AllowedOnce,
                    }
                }
                Some(answer) => answer,
                None => ApprovalAnswer::Unavailable,
            }
        };
        Box::pin(std::future::ready(answer))
    }
}
