//! Stages 8–10: post-execute hooks, normalization and finalize, commit. Effects reported by
//! the body are carried through every branch: no hook or later failure can drop them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::details::Details;
use toolrail_session_log::{
    AppendFuture, AppendUrgency, ContentBlock, Effect, ErrorCode, EventData, Timing, ToolErrorInfo,
    ToolResultRecord, elided::ElidedBlock, event::ContextMessage,
};

use super::content_cap::{cap_content, cut_text};
use super::prepare::{info, info_by, micros};
use super::{CommittedResult, Pipeline, PipelineError, SettledCall, Settlement};
use crate::arguments::{ArgumentError, check_schema};
use crate::context::CallIdentity;
use crate::post_hook::{PostExecuteAction, ResultView};
use crate::registry::ToolEntry;
use crate::tool::FinalizeView;
use crate::unwind::{CatchUnwind, catch};
use crate::view::{CallView, HookError};

/// The result while stages 8–9 may still change what the model sees.
struct Candidate {
    content: Vec<ContentBlock>,
    value: Option<Value>,
    details: Option<Details>,
    error: Option<ToolErrorInfo>,
    /// The body asked to end the turn (honoured only for a successful result).
    concludes: bool,
}

impl Candidate {
    fn from_error(error: ToolErrorInfo) -> Self {
        Self {
            content: error_content(&error),
            value: None,
            details: None,
            error: Some(error),
            concludes: false,
        }
    }

    /// Turns the candidate into a failure; details stay (the UI may still show them).
    fn fail(&mut self, error: ToolErrorInfo) {
        self.content = error_content(&error);
        self.value = None;
        self.error = Some(error);
    }

    /// Cuts the model-facing text to `cap` bytes; returns the whole blocks that were cut. An
    /// error's `Error: <message>` block cut this way cuts the message with it, so the
    /// record's message is the text the model reads (and the log line stays small).
    fn cap_content(&mut self, cap: usize) -> Vec<ElidedBlock> {
        let message_block = self.error.as_ref().and_then(|error| {
            self.content.iter().position(|block| {
                block
                    .as_text()
                    .and_then(|text| text.strip_prefix("Error: "))
                    .is_some_and(|message| message == error.message)
            })
        });
        let elided = cap_content(&mut self.content, cap);
        if let Some(error) = &mut self.error {
            let cut = message_block
                .filter(|index| elided.iter().any(|elided| elided.index == *index))
                .and_then(|index| self.content.get(index))
                .and_then(ContentBlock::as_text);
            if let Some(text) = cut {
                error.message = text.strip_prefix("Error: ").unwrap_or(text).to_owned();
            } else if error.message.len() > cap {
                // `finalize_content` replaced the error's own text: its message is cut on its
                // own, and its whole is not kept (no shipped tool does this).
                error.message = cut_text(&error.message, cap, None);
            }
        }
        elided
    }
}

fn error_content(error: &ToolErrorInfo) -> Vec<ContentBlock> {
    vec![ContentBlock::text(format!("Error: {}", error.message))]
}

/// A result whose `tool/result` event has its place in the log (its `seq` order is fixed)
/// but may not be durable yet: await it for the committed result. Commits of later calls may
/// be appended meanwhile, so one sync of the log can cover several commits of a batch.
#[must_use = "a commit is only done when its pending future has been awaited"]
pub struct PendingCommit<'a> {
    appended: AppendFuture<'a>,
    /// Taken when the append is answered.
    parts: Option<(
        Arc<CallIdentity>,
        Arc<ToolResultRecord>,
        Vec<ContextMessage>,
    )>,
}

impl Future for PendingCommit<'_> {
    type Output = Result<CommittedResult, PipelineError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = std::task::ready!(Pin::new(&mut self.appended).poll(cx));
        let Some((identity, record, context)) = self.parts.take() else {
            return Poll::Ready(Err(PipelineError::Internal(
                "a pending commit was polled after it completed".to_owned(),
            )));
        };
        Poll::Ready(match answer {
            Ok(seq) => Ok(CommittedResult {
                identity,
                seq,
                record,
                context,
            }),
            Err(source) => Err(PipelineError::Log {
                call_id: identity.call_id.clone(),
                kind: "tool/result",
                source,
            }),
        })
    }
}

impl Pipeline {
    /// Stages 8–10: commit the call's result and wait until it is as durable as the log's
    /// mode promises. Call in model order.
    pub async fn finish(&self, settled: SettledCall) -> Result<CommittedResult, PipelineError> {
        self.begin_commit(settled).await.await
    }

    /// Stages 8–10 up to the moment the `tool/result` event is handed to the log. The next
    /// call's commit may begin as soon as this returns; the result is committed when the
    /// returned future resolves. Call in model order.
    pub async fn begin_commit(&self, settled: SettledCall) -> PendingCommit<'_> {
        let SettledCall { core, settlement } = settled;
        let (mut candidate, effects, synthetic, ran) = match settlement {
            Settlement::Refused { error, synthetic } => {
                (Candidate::from_error(error), Vec::new(), synthetic, false)
            }
            Settlement::Ran {
                outcome,
                effects,
                synthetic,
            } => {
                let candidate = match outcome {
                    Ok(output) => Candidate {
                        content: output.content,
                        value: output.value,
                        details: output.details,
                        error: None,
                        concludes: output.concludes_turn,
                    },
                    Err(error) => Candidate::from_error(error),
                };
                (candidate, effects, synthetic, true)
            }
        };

        // Stage 8: post-execute hooks see every call that ran.
        let mut context = Vec::new();
        if let (true, Some(entry)) = (ran, core.entry.as_ref()) {
            let view = core.view(entry);
            self.post_execute(&view, &mut candidate, &effects, &mut context, &core.cancel)
                .await;
        }

        // Stage 9: normalize, then finalize once.
        if let (None, Some(entry)) = (&candidate.error, core.entry.as_ref())
            && let Err(error) = self.normalize(entry, &candidate)
        {
            candidate.fail(error);
        }
        if let Some(entry) = &core.entry {
            let view = FinalizeView {
                arguments: &core.arguments,
                error: candidate.error.as_ref(),
            };
            let tool = entry.tool();
            if let Err(panic) = catch(|| tool.finalize_content(&mut candidate.content, &view)) {
                tracing::warn!(call_id = %core.identity.call_id, tool = %entry.name(), "finalize_content panicked: {panic}");
            }
        }
        // Last in stage 9, so nothing after it can grow what the model reads again.
        let pipeline_cap = self.config.max_content_text_bytes;
        let cap = core
            .entry
            .as_ref()
            .and_then(|entry| entry.spec().max_content_text_bytes())
            .map_or(pipeline_cap, |own| own.min(pipeline_cap));
        let elided = candidate.cap_content(cap);

        // Stage 10: observers, then the one record.
        let committed_at = Instant::now();
        let marks = core.marks;
        let timing = Timing {
            // Waiting for a slot (or, for a call that never started, until it was stopped).
            queued_us: marks.started.or(marks.settled).map_or(0, |until| {
                micros(until.saturating_duration_since(marks.prepared))
            }),
            policy_us: micros(marks.prepared.saturating_duration_since(marks.recorded)),
            approval_us: micros(marks.approval),
            run_us: match (marks.body_started, marks.settled) {
                (Some(started), Some(settled)) => {
                    micros(settled.saturating_duration_since(started))
                }
                _ => 0,
            },
            total_us: micros(committed_at.saturating_duration_since(marks.recorded)),
        };
        let concludes_turn = candidate.concludes && candidate.error.is_none();
        let record = Arc::new(ToolResultRecord {
            content: candidate.content,
            value: candidate.value,
            details: candidate.details,
            effects,
            error: candidate.error,
            timing,
            synthetic,
            concludes_turn,
            elided,
        });
        for observer in &self.observers {
            match catch(|| observer.observe(&core.identity, &record)) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(call_id = %core.identity.call_id, observer = observer.name(), "result observer failed: {error}")
                }
                Err(panic) => {
                    tracing::warn!(call_id = %core.identity.call_id, observer = observer.name(), "result observer panicked: {panic}")
                }
            }
        }
        let appended = self.append_now(
            &core.identity,
            committed_at,
            EventData::ToolResult(Arc::clone(&record)),
            AppendUrgency::Durable,
        );
        PendingCommit {
            appended,
            parts: Some((core.identity, record, context)),
        }
    }

    async fn post_execute(
        &self,
        view: &CallView<'_>,
        candidate: &mut Candidate,
        effects: &[Effect],
        context: &mut Vec<ContextMessage>,
        cancel: &CancellationToken,
    ) {
        for hook in &self.post_hooks {
            let decision = {
                let result = ResultView {
                    content: &candidate.content,
                    value: candidate.value.as_ref(),
                    error: candidate.error.as_ref(),
                    effects,
                };
                let deciding = CatchUnwind::start(|| hook.after(view, &result));
                tokio::select! {
                    biased;
                    decision = deciding => decision,
                    // A post hook may be a redaction: skipping it on cancel could show the
                    // model what it must not see, so an unfinished hook fails the result.
                    () = cancel.cancelled() => Ok(Err(HookError::new(
                        "did not finish before the batch was cancelled",
                    ))),
                }
            };
            let decision = match decision {
                Ok(Ok(decision)) => decision,
                Ok(Err(error)) => {
                    candidate.fail(post_hook_failure(hook.name(), &error.0));
                    return;
                }
                Err(panic) => {
                    candidate.fail(post_hook_failure(
                        hook.name(),
                        &format!("panicked: {panic}"),
                    ));
                    return;
                }
            };
            if !decision.context.is_empty() {
                context.push(ContextMessage {
                    source: hook.name().to_owned(),
                    content: decision.context,
                });
            }
            match decision.action {
                PostExecuteAction::Accept => {}
                // An error result keeps its `Error: <message>` text and has no value.
                PostExecuteAction::ReplaceContent(_) | PostExecuteAction::ReplaceValue(_)
                    if candidate.error.is_some() =>
                {
                    tracing::warn!(
                        hook = hook.name(),
                        "a post-execute hook tried to replace part of an error result; ignored"
                    );
                }
                PostExecuteAction::ReplaceContent(content) => candidate.content = content,
                PostExecuteAction::ReplaceValue(value) => candidate.value = Some(value),
                PostExecuteAction::Block { feedback } => {
                    candidate.fail(info(ErrorCode::ResultBlocked, feedback));
                    return;
                }
            }
        }
    }

    /// Stage 9: the value must satisfy the output schema and the byte cap.
    fn normalize(&self, entry: &ToolEntry, candidate: &Candidate) -> Result<(), ToolErrorInfo> {
        let spec = entry.spec();
        let invalid = |message: String| info(ErrorCode::InvalidToolOutput, message);
        let Some(value) = &candidate.value else {
            return match entry.output_validator() {
                Some(_) => Err(invalid(format!(
                    "`{}` declares an output schema but returned no value",
                    spec.name()
                ))),
                None => Ok(()),
            };
        };
        let cap = spec
            .max_value_bytes()
            .unwrap_or(self.config.max_value_bytes);
        let size = toolrail_session_log::json_len(value);
        if size > cap {
            return Err(invalid(format!(
                "the value of `{}` is {size} bytes, over the cap of {cap} bytes; the tool must return less",
                spec.name()
            )));
        }
        if let Some(validator) = entry.output_validator()
            && let Err(ArgumentError::Invalid { violations }) = check_schema(validator, value)
        {
            return Err(invalid(format!(
                "the value of `{}` does not match its output schema:\n{}",
                spec.name(),
                violations.join("\n")
            )));
        }
        Ok(())
    }
}

fn post_hook_failure(hook: &str, message: &str) -> ToolErrorInfo {
    info_by(
        ErrorCode::HookFailed,
        format!(
            "post-execute hook `{hook}` failed: {message}; the tool did run and its effects are recorded"
        ),
        hook,
    )
}
