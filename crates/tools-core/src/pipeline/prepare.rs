//! Stages 1–5: record, parse, pre-execute hooks, approval, guards. Nothing here acts on the
//! world; a refusal at any stage has no side effects.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Waker};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{
    AppendUrgency, ApprovalAsked, ApprovalDecided, ArgsRewritten, ErrorCode, EventData, ToolCall,
    ToolErrorInfo, repeated_call_id_refusal,
};

use super::{
    BatchControl, CallCore, CallRequest, Pipeline, PipelineError, SettledCall, TimingMarks,
};
use crate::approval::{ApprovalAnswer, ApprovalRequest};
use crate::arguments::{ArgumentError, check_schema, parse_arguments};
use crate::context::CallIdentity;
use crate::guard::GuardVerdict;
use crate::pre_hook::{DecisionTrail, run_chain};
use crate::registry::{ToolEntry, ToolSet};
use crate::spec::{Concurrency, ToolSpec};
use crate::unwind::{CatchUnwind, catch};

/// Whether stage 1 parses the raw arguments (a cut-off call's text is never trusted).
#[derive(Clone, Copy)]
enum Parsing {
    Parse,
    Skip,
}

/// The arguments of a call refused before they were parsed.
static NO_ARGUMENTS: LazyLock<Arc<Value>> = LazyLock::new(|| Arc::new(Value::Null));

/// The outcome of preparation.
#[must_use = "a prepared call must be dispatched, or its refusal finished: dropping it leaves the call without a result"]
pub enum Preparation {
    /// Allowed by every policy stage; may be dispatched.
    Ready(ReadyCall),
    /// Refused before it could start; go straight to finish.
    Refused(SettledCall),
}

/// A call that passed stages 1–5. Frozen: its arguments and identity cannot change.
#[must_use = "a ready call must be dispatched: dropping it leaves the call without a result"]
pub struct ReadyCall {
    pub(super) core: CallCore,
    pub(super) entry: Arc<ToolEntry>,
}

impl ReadyCall {
    pub fn identity(&self) -> &CallIdentity {
        &self.core.identity
    }

    /// The effective arguments (after any logged rewrite).
    pub fn arguments(&self) -> &Value {
        &self.core.arguments
    }

    /// The effective arguments, shared (for live views that outlive the call).
    pub fn shared_arguments(&self) -> Arc<Value> {
        Arc::clone(&self.core.arguments)
    }

    pub fn spec(&self) -> &ToolSpec {
        self.entry().spec()
    }

    /// Re-reads the tool's concurrency for these arguments (right before start). A panic
    /// makes the call `Exclusive`, the safe answer.
    pub fn concurrency(&self) -> Concurrency {
        let tool = self.entry().tool();
        catch(|| tool.concurrency(&self.core.arguments)).unwrap_or(Concurrency::Exclusive)
    }

    /// Settles the call without starting it (`NOT_EXECUTED`): the batch was cancelled or an
    /// earlier call stopped it. The result is marked synthetic.
    pub fn not_executed(self, reason: impl Into<String>) -> SettledCall {
        SettledCall::refused(
            self.core,
            ToolErrorInfo {
                code: ErrorCode::NotExecuted,
                message: reason.into(),
            },
        )
    }

    pub(super) fn entry(&self) -> &Arc<ToolEntry> {
        &self.entry
    }
}

impl Pipeline {
    /// Stages 1–5 for one call. Run calls of a batch through here one at a time, in model
    /// order, so `tool/call` events and approvals follow that order.
    pub async fn prepare(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        control: &BatchControl,
    ) -> Result<Preparation, PipelineError> {
        if let Some(sent) = &request.repeated_id {
            let message = repeated_call_id_refusal(sent, &request.call_id);
            let settled = self
                .record_unprepared(tools, request, info(ErrorCode::InvalidArgs, message))
                .await?;
            return Ok(Preparation::Refused(settled));
        }
        let (mut core, parsed) = self
            .record(tools, request, control.cancel.clone(), Parsing::Parse)
            .await?;
        let outcome = self.policy(&mut core, parsed, tools, control).await;
        core.marks.prepared = Instant::now();
        Ok(match (outcome?, core.entry.clone()) {
            (Ok(()), Some(entry)) => Preparation::Ready(ReadyCall { core, entry }),
            (Ok(()), None) => {
                let error = unknown_tool(&core.identity.name, tools);
                Preparation::Refused(SettledCall::refused(core, error))
            }
            (Err(error), _) => Preparation::Refused(SettledCall::refused(core, error)),
        })
    }

    /// Records a call of an assistant message that the output-length limit cut off, and
    /// settles it as `TRUNCATED_CALL` without parsing it: its arguments may be incomplete,
    /// so nothing about it is trusted. Finish it like any other call.
    pub async fn record_truncated(
        &self,
        tools: &ToolSet,
        request: CallRequest,
    ) -> Result<SettledCall, PipelineError> {
        let message = toolrail_session_log::outcome::TRUNCATED_CALL;
        self.record_unprepared(tools, request, info(ErrorCode::TruncatedCall, message))
            .await
    }

    /// Records a call the batch will never prepare (it was cancelled, or an earlier call
    /// stopped it) and settles it as `NOT_EXECUTED` with `reason`. Finish it in model order.
    pub async fn record_not_executed(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        reason: impl Into<String>,
    ) -> Result<SettledCall, PipelineError> {
        self.record_unprepared(tools, request, info(ErrorCode::NotExecuted, reason))
            .await
    }

    async fn record_unprepared(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        error: ToolErrorInfo,
    ) -> Result<SettledCall, PipelineError> {
        let (mut core, _) = self
            .record(tools, request, CancellationToken::new(), Parsing::Skip)
            .await?;
        core.marks.prepared = Instant::now();
        Ok(SettledCall::refused(core, error))
    }

    /// Stage 1: the call becomes a recorded fact, arguments exactly as sent. Parsing is pure,
    /// so it looks at the text before the text moves into the event; its outcome is acted on
    /// only after the call is recorded.
    async fn record(
        &self,
        tools: &ToolSet,
        request: CallRequest,
        cancel: CancellationToken,
        parsing: Parsing,
    ) -> Result<(CallCore, Option<Result<Value, ArgumentError>>), PipelineError> {
        let recorded = Instant::now();
        let entry = tools.resolve(&request.name, request.origin).cloned();
        let identity = Arc::new(CallIdentity {
            call_id: request.call_id,
            index: request.index,
            name: request.name,
            turn: request.turn,
            step: request.step,
            source: entry.as_ref().map(|entry| entry.source().clone()),
            version: entry
                .as_ref()
                .map(|entry| Arc::clone(entry.spec().shared_version())),
        });
        let call = ToolCall {
            index: identity.index,
            name: identity.name.clone(),
            arguments_raw: request.arguments_raw,
            source: identity.source.clone(),
            version: identity.version.clone(),
        };
        let parsed = match (parsing, &entry) {
            (Parsing::Parse, Some(_)) => Some(parse_arguments(&call.arguments_raw)),
            (Parsing::Parse | Parsing::Skip, _) => None,
        };
        self.append(
            &identity,
            recorded,
            EventData::ToolCall(call),
            AppendUrgency::Buffered,
        )
        .await?;
        let core = CallCore {
            identity,
            entry,
            arguments: Arc::clone(&NO_ARGUMENTS),
            timeout: request.timeout,
            cancel,
            approval_granted: false,
            marks: TimingMarks {
                recorded,
                prepared: recorded,
                approval: Duration::ZERO,
                started: None,
                body_started: None,
                settled: None,
            },
        };
        Ok((core, parsed))
    }

    /// Stages 2–5. `Ok(Err(_))` is a refusal; `Err(_)` an internal failure.
    async fn policy(
        &self,
        core: &mut CallCore,
        parsed: Option<Result<Value, ArgumentError>>,
        tools: &ToolSet,
        control: &BatchControl,
    ) -> Result<Result<(), ToolErrorInfo>, PipelineError> {
        // Stage 2: parse.
        let (Some(entry), Some(parsed)) = (core.entry.clone(), parsed) else {
            return Ok(Err(unknown_tool(&core.identity.name, tools)));
        };
        let name = entry.name();
        let arguments = match parsed.and_then(|value| validate(&entry, value)) {
            Ok(arguments) => arguments,
            Err(error) => return Ok(Err(argument_error(name, &error))),
        };
        core.arguments = Arc::new(arguments);

        // Stage 3: pre-execute hooks.
        let mut ask = None;
        if !self.pre_hooks.is_empty() {
            let trail = DecisionTrail::default();
            let view = core.view(&entry);
            // The returned decision is only one input: the trail holds everything decided.
            let mut chain = run_chain(&self.pre_hooks, &view, &trail);
            // Most hooks decide without waiting: one poll settles them, and only a chain that
            // waits is raced against the batch's cancel.
            let decided = Pin::new(&mut chain)
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_ready();
            if !decided {
                tokio::select! {
                    biased;
                    _ = &mut chain => {}
                    () = control.cancel.cancelled() => {
                        return Ok(Err(info(
                            ErrorCode::NotExecuted,
                            "the batch was cancelled while pre-execute hooks were deciding; the call did not run",
                        )));
                    }
                }
            }
            drop(chain);
            let state = trail.into_state();
            if let Some((hook, message)) = state.failure {
                return Ok(Err(info(
                    ErrorCode::HookFailed,
                    format!("pre-execute hook `{hook}` failed: {message}; the call was not run"),
                )));
            }
            if let Some((hook, reason)) = state.deny {
                return Ok(Err(info(
                    ErrorCode::PolicyDenied,
                    format!("{reason} (denied by `{hook}`)"),
                )));
            }
            if let Some((hook, rewritten, reason)) = state.rewrite {
                let effective = match validate(&entry, rewritten) {
                    Ok(effective) => effective,
                    Err(error) => {
                        return Ok(Err(info(
                            ErrorCode::InvalidArgs,
                            format!(
                                "pre-execute hook `{hook}` rewrote the arguments into an invalid value; the call was not run. {}",
                                error_detail(&error)
                            ),
                        )));
                    }
                };
                let data = EventData::ArgsRewritten(ArgsRewritten {
                    original: core.arguments.as_ref().clone(),
                    effective: effective.clone(),
                    by: hook,
                    reason,
                });
                self.append(
                    &core.identity,
                    Instant::now(),
                    data,
                    AppendUrgency::Buffered,
                )
                .await?;
                core.arguments = Arc::new(effective);
            }
            ask = state.ask;
        }
        // A tool that always asks (leaving plan mode), or whose call must ask (a command
        // asking for a wider sandbox), asks whatever the hooks decided, and no "approve for
        // session" answer covers its next call.
        // A tool that panics saying whether it must ask, asks.
        let this_call = catch(|| entry.tool().must_ask(&core.arguments)).unwrap_or_else(|panic| {
            Some(format!(
                "the tool could not say whether this call needs approval ({panic})"
            ))
        });
        let must_ask = match (entry.spec().always_ask_reason(), this_call) {
            (Some(always), Some(this_call)) => Some(format!("{always}; {this_call}")),
            (Some(always), None) => Some(always.to_owned()),
            (None, this_call) => this_call,
        };
        if let Some(reason) = must_ask {
            let reason = match ask {
                Some((_, hooks_reason, _)) => format!("{reason}; {hooks_reason}"),
                None => reason,
            };
            ask = Some((name.to_owned(), reason, None));
        }

        // Stage 4: approval, only on ask.
        if let Some((_, reason, session_key)) = ask {
            let started = Instant::now();
            // Boxed: asking is the rare path, and its state would otherwise enlarge every
            // call's future (moved, and so copied, on each call).
            let answer =
                Box::pin(self.ask_approval(core, &entry, reason, session_key, control)).await?;
            core.marks.approval = started.elapsed();
            if let Some(refusal) = approval_refusal(&answer) {
                return Ok(Err(refusal));
            }
            core.approval_granted = true;
        }

        // Stage 5: guards; the first deny wins and nothing after it can allow.
        let view = core.view(&entry);
        for guard in &self.guards {
            match catch(|| guard.check(&view)) {
                Ok(GuardVerdict::Abstain) => {}
                Ok(GuardVerdict::Deny { reason }) => {
                    return Ok(Err(info(
                        ErrorCode::GuardDenied,
                        format!("{reason} (denied by guard `{}`)", guard.name()),
                    )));
                }
                Err(panic) => {
                    return Ok(Err(info(
                        ErrorCode::HookFailed,
                        format!(
                            "guard `{}` panicked: {panic}; the call was not run",
                            guard.name()
                        ),
                    )));
                }
            }
        }
        Ok(Ok(()))
    }

    async fn ask_approval(
        &self,
        core: &CallCore,
        entry: &ToolEntry,
        reason: String,
        session_key: Option<String>,
        control: &BatchControl,
    ) -> Result<ApprovalAnswer, PipelineError> {
        let asked = EventData::ApprovalAsked(ApprovalAsked {
            reason: reason.clone(),
            arguments: core.arguments.as_ref().clone(),
            session_key: session_key.clone(),
        });
        let started = Instant::now();
        self.append(&core.identity, started, asked, AppendUrgency::Buffered)
            .await?;
        let answer = match &self.approval {
            None => ApprovalAnswer::Unavailable,
            Some(service) => {
                // What the call would change, shown with the question; a preview that panics
                // or outlives the batch is no preview.
                let previewing = CatchUnwind::start(|| entry.tool().preview(&core.arguments));
                let preview = tokio::select! {
                    biased;
                    () = control.cancel.cancelled() => None,
                    preview = previewing => preview.unwrap_or_else(|panic| {
                        tracing::warn!(call_id = %core.identity.call_id, "preview panicked: {panic}");
                        None
                    }),
                };
                let request = ApprovalRequest {
                    identity: core.identity.as_ref().clone(),
                    tool_kind: entry.spec().tool_kind().as_str(),
                    subject: core
                        .view(entry)
                        .subject()
                        .map(|subject| subject.text.to_owned()),
                    arguments: core.arguments.as_ref().clone(),
                    reason,
                    session_key,
                    preview,
                };
                let asking = CatchUnwind::start(|| service.request(&request, &control.cancel));
                // A wait too long to represent is no limit.
                let expires = self
                    .config
                    .approval_timeout
                    .and_then(|limit| Instant::now().checked_add(limit));
                let answer = tokio::select! {
                    biased;
                    () = control.cancel.cancelled() => ApprovalAnswer::Cancelled,
                    answer = asking => answer.unwrap_or_else(|panic| {
                        tracing::warn!(call_id = %core.identity.call_id, "approval service panicked: {panic}");
                        ApprovalAnswer::Unavailable
                    }),
                    () = super::sleep_until(expires) => ApprovalAnswer::Expired,
                };
                // "For the session" where no session key was offered (an always-asking tool)
                // counts once, and is logged so: a resumed session must not remember it.
                match (answer, &request.session_key) {
                    (ApprovalAnswer::AllowedForSession { .. }, None) => ApprovalAnswer::AllowedOnce,
                    (answer, _) => answer,
                }
            }
        };
        let decided = EventData::ApprovalDecided(ApprovalDecided {
            answer: answer.clone(),
            waited_us: micros(started.elapsed()),
        });
        self.append(
            &core.identity,
            Instant::now(),
            decided,
            AppendUrgency::Buffered,
        )
        .await?;
        Ok(answer)
    }
}

fn validate(entry: &ToolEntry, value: Value) -> Result<Value, ArgumentError> {
    check_schema(entry.input_validator(), &value)?;
    let tool = entry.tool();
    match catch(|| tool.check_arguments(&value)) {
        Ok(Ok(())) => Ok(value),
        Ok(Err(violations)) => Err(ArgumentError::Invalid { violations }),
        Err(panic) => Err(ArgumentError::Invalid {
            violations: vec![format!("/: the tool's argument check panicked: {panic}")],
        }),
    }
}

fn argument_error(tool: &str, error: &ArgumentError) -> ToolErrorInfo {
    let code = match error {
        ArgumentError::Syntax { .. } => ErrorCode::SyntaxError,
        ArgumentError::Invalid { .. } => ErrorCode::InvalidArgs,
    };
    info(code, error.message(tool))
}

fn error_detail(error: &ArgumentError) -> String {
    match error {
        ArgumentError::Syntax { message, .. } => message.clone(),
        ArgumentError::Invalid { violations } => violations.join("; "),
    }
}

fn unknown_tool(name: &str, tools: &ToolSet) -> ToolErrorInfo {
    const SHOWN: usize = 20;
    if let Some(refusal) = tools.code_only_refusal(name) {
        return info(ErrorCode::UnknownTool, refusal);
    }
    let names = tools.names();
    let mut listed = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        listed.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    info(
        ErrorCode::UnknownTool,
        format!(
            "there is no tool named `{name}` in this request's tool set. Available tools: {listed}"
        ),
    )
}

fn approval_refusal(answer: &ApprovalAnswer) -> Option<ToolErrorInfo> {
    match answer {
        ApprovalAnswer::AllowedOnce | ApprovalAnswer::AllowedForSession { .. } => None,
        ApprovalAnswer::Rejected { reason } => Some(info(
            ErrorCode::ApprovalRejected,
            match reason {
                Some(reason) => format!("the user rejected this call: {reason}"),
                None => "the user rejected this call".to_owned(),
            },
        )),
        ApprovalAnswer::Cancelled => Some(info(
            ErrorCode::ApprovalCancelled,
            "the approval was cancelled; the call was not run",
        )),
        ApprovalAnswer::Expired => Some(info(
            ErrorCode::ApprovalExpired,
            "no approval answer came in time; the call was not run",
        )),
        ApprovalAnswer::Unavailable => Some(info(
            ErrorCode::ApprovalUnavailable,
            "this call needs approval and no approval service could be asked; the call was not run",
        )),
    }
}

pub(super) fn info(code: ErrorCode, message: impl Into<String>) -> ToolErrorInfo {
    ToolErrorInfo {
        code,
        message: message.into(),
    }
}

pub(super) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
