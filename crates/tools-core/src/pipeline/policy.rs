//! Stages 2–5, one step each, named like their ids in `stages.rs`: `parse`, `pre_hooks`,
//! `approval`, `guards`. A step lets the call go on or refuses it ([`Stop::Refused`]); only
//! a log that cannot be written stops preparation itself ([`Stop::Log`]). Nothing here acts
//! on the world.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use toolrail_session_log::{
    AppendUrgency, ErrorCode, EventData, Timestamp, ToolErrorInfo,
    event::{ApprovalAsked, ApprovalDecided, ArgsRewritten, DecidedBy},
    recovery::waited_us,
};

use super::prepare::AskedAgain;
use super::prepare::{info, info_by, micros};
use super::{BatchControl, CallCore, Pipeline, PipelineError};
use crate::approval::{ApprovalAnswer, ApprovalRequest};
use crate::arguments::{ArgumentError, CallArgs, check_schema};
use crate::guard::GuardVerdict;
use crate::pre_hook::{DecisionTrail, run_chain};
use crate::registry::{ToolEntry, ToolSet};
use crate::unwind::{CatchUnwind, catch};

/// Why preparation of a call stops before stage 6.
pub(super) enum Stop {
    /// A stage refused the call: it is finished with this error and never starts.
    Refused(ToolErrorInfo),
    /// The log could not record what the stage decided: preparation fails.
    Log(PipelineError),
}

impl From<PipelineError> for Stop {
    fn from(error: PipelineError) -> Self {
        Self::Log(error)
    }
}

/// A refusal with `code`.
fn refuse<T>(code: ErrorCode, message: impl Into<String>) -> Result<T, Stop> {
    Err(Stop::Refused(info(code, message)))
}

/// As [`refuse`], naming the guard or hook that refused.
fn refuse_by<T>(code: ErrorCode, message: impl Into<String>, by: &str) -> Result<T, Stop> {
    Err(Stop::Refused(info_by(code, message, by)))
}

/// What asks for an approval, and under which "approve for session" key.
struct Ask {
    reason: String,
    session_key: Option<String>,
}

impl Pipeline {
    /// Stages 2–5 for a recorded call: the entry of a call that may start, or why not.
    pub(super) async fn policy(
        &self,
        core: &mut CallCore,
        parsed: Option<Result<Value, ArgumentError>>,
        tools: &ToolSet,
        control: &BatchControl,
        again: Option<&mut AskedAgain>,
    ) -> Result<Arc<ToolEntry>, Stop> {
        let entry = parse(core, parsed, tools)?;
        let hooks_ask = self.pre_hooks(core, &entry, control).await?;
        if let Some(ask) = must_ask(core, &entry, hooks_ask) {
            self.approval(core, &entry, ask, control, again).await?;
        }
        self.guards(core, &entry)?;
        Ok(entry)
    }

    /// Stage 3: the pre-execute hooks' waterfall. A deny or a failure refuses; a rewrite is
    /// validated and logged; an ask is handed on.
    async fn pre_hooks(
        &self,
        core: &mut CallCore,
        entry: &ToolEntry,
        control: &BatchControl,
    ) -> Result<Option<Ask>, Stop> {
        if self.pre_hooks.is_empty() {
            return Ok(None);
        }
        let trail = DecisionTrail::default();
        let view = core.view(entry);
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
                    return refuse(
                        ErrorCode::NotExecuted,
                        "the batch was cancelled while pre-execute hooks were deciding; the call did not run",
                    );
                }
            }
        }
        drop(chain);
        let state = trail.into_state();
        if let Some((hook, message)) = state.failure {
            return refuse_by(
                ErrorCode::HookFailed,
                format!("pre-execute hook `{hook}` failed: {message}; the call was not run"),
                &hook,
            );
        }
        if let Some((hook, reason)) = state.deny {
            return refuse_by(
                ErrorCode::PolicyDenied,
                format!("{reason} (denied by `{hook}`)"),
                &hook,
            );
        }
        if let Some((hook, rewritten, reason)) = state.rewrite {
            let effective = match validate(entry, rewritten) {
                Ok(effective) => effective,
                Err(error) => {
                    return refuse(
                        ErrorCode::InvalidArgs,
                        format!(
                            "pre-execute hook `{hook}` rewrote the arguments into an invalid value; the call was not run. {}",
                            error_detail(&error)
                        ),
                    );
                }
            };
            let data = EventData::ArgsRewritten(ArgsRewritten {
                original: core.arguments.value().clone(),
                effective: effective.value().clone(),
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
            core.arguments = effective;
        }
        Ok(state.ask.map(|(_, reason, session_key)| Ask {
            reason,
            session_key,
        }))
    }

    /// Stage 4: the approval, asked only when something asks; only an allowing answer
    /// lets the call go on.
    async fn approval(
        &self,
        core: &mut CallCore,
        entry: &ToolEntry,
        ask: Ask,
        control: &BatchControl,
        again: Option<&mut AskedAgain>,
    ) -> Result<(), Stop> {
        let started = Instant::now();
        let recorded_deadline = again.as_ref().and_then(|again| again.expires_at);
        // Boxed: asking is the rare path, and its state would otherwise enlarge every
        // call's future (moved, and so copied, on each call).
        let answer =
            Box::pin(self.ask_approval(core, entry, ask, recorded_deadline, control)).await?;
        core.marks.approval = started.elapsed();
        if let Some(again) = again {
            again.answer = Some(answer.clone());
        }
        if let Some(refusal) = approval_refusal(&answer) {
            return Err(Stop::Refused(refusal));
        }
        core.approval_granted = true;
        Ok(())
    }

    /// Stage 5: the guards; the first deny wins and nothing after it can allow.
    fn guards(&self, core: &CallCore, entry: &ToolEntry) -> Result<(), Stop> {
        let view = core.view(entry);
        for guard in &self.guards {
            match catch(|| guard.check(&view)) {
                Ok(GuardVerdict::Abstain) => {}
                Ok(GuardVerdict::Deny { reason }) => {
                    return refuse_by(
                        ErrorCode::GuardDenied,
                        format!("{reason} (denied by guard `{}`)", guard.name()),
                        guard.name(),
                    );
                }
                Err(panic) => {
                    return refuse_by(
                        ErrorCode::HookFailed,
                        format!(
                            "guard `{}` panicked: {panic}; the call was not run",
                            guard.name()
                        ),
                        guard.name(),
                    );
                }
            }
        }
        Ok(())
    }

    /// Asks the approval service (stage 4), logging the question, its deadline and its
    /// answer. A question asked again after a restart keeps the deadline it was first asked
    /// with (`recorded_deadline`), so a restart never lengthens the wait.
    async fn ask_approval(
        &self,
        core: &CallCore,
        entry: &ToolEntry,
        ask: Ask,
        recorded_deadline: Option<Timestamp>,
        control: &BatchControl,
    ) -> Result<ApprovalAnswer, PipelineError> {
        let Ask {
            reason,
            session_key,
        } = ask;
        let started = Instant::now();
        let (expires, expires_at) = match recorded_deadline {
            Some(deadline) => {
                let left = deadline
                    .as_millis()
                    .saturating_sub(Timestamp::from_instant(started.into_std()).as_millis());
                (
                    started.checked_add(Duration::from_millis(left)),
                    Some(deadline),
                )
            }
            None => {
                // A wait too long to represent is no limit.
                let expires = self
                    .config
                    .approval_timeout
                    .and_then(|limit| started.checked_add(limit));
                let at = expires.map(|at| Timestamp::from_instant(at.into_std()));
                (expires, at)
            }
        };
        let asked = EventData::ApprovalAsked(ApprovalAsked {
            reason: reason.clone(),
            arguments: Arc::clone(core.arguments.shared()),
            session_key: session_key.clone(),
            expires_at,
        });
        // Durable before anyone is asked: a question a person may be reading survives a
        // crash, so the resumed session asks it again (a question is human-speed; its
        // fsync costs nothing that matters).
        self.append(&core.identity, started, asked, AppendUrgency::Durable)
            .await?;
        // `by`: the approver's answer only when the service itself gave it; the pipeline's
        // own closings (no service, a panic, the batch cancelled, the timeout) are toolrail's.
        let (answer, by) = match &self.approval {
            None => (ApprovalAnswer::Unavailable, DecidedBy::Toolrail),
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
                    tool_kind: entry.spec().kind().as_str(),
                    subject: core
                        .view(entry)
                        .subject()
                        .map(|subject| subject.text.to_owned()),
                    arguments: Arc::clone(core.arguments.shared()),
                    reason,
                    session_key,
                    preview,
                };
                let asking = CatchUnwind::start(|| service.request(&request, &control.cancel));
                let (answer, by) = tokio::select! {
                    biased;
                    () = control.cancel.cancelled() => (ApprovalAnswer::Cancelled, DecidedBy::Toolrail),
                    answer = asking => match answer {
                        Ok(answer) => (answer, DecidedBy::Approver),
                        Err(panic) => {
                            tracing::warn!(call_id = %core.identity.call_id, "approval service panicked: {panic}");
                            (ApprovalAnswer::Unavailable, DecidedBy::Toolrail)
                        }
                    },
                    () = super::sleep_until(expires) => (ApprovalAnswer::Expired, DecidedBy::Toolrail),
                };
                // "For the session" where no session key was offered (an always-asking tool)
                // counts once, and is logged so: a resumed session must not remember it.
                match (answer, &request.session_key) {
                    (ApprovalAnswer::AllowedForSession { .. }, None) => {
                        (ApprovalAnswer::AllowedOnce, by)
                    }
                    (answer, _) => (answer, by),
                }
            }
        };
        let decided = EventData::ApprovalDecided(ApprovalDecided {
            answer: answer.clone(),
            waited_us: micros(started.elapsed()),
            by,
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

/// Stage 2: the name resolved in the snapshot, the arguments parsed (in stage 1) and
/// validated against the schema and the tool's own check.
fn parse(
    core: &mut CallCore,
    parsed: Option<Result<Value, ArgumentError>>,
    tools: &ToolSet,
) -> Result<Arc<ToolEntry>, Stop> {
    let (Some(entry), Some(parsed)) = (core.entry.clone(), parsed) else {
        return Err(Stop::Refused(unknown_tool(&core.identity.name, tools)));
    };
    match parsed.and_then(|value| validate(&entry, value)) {
        Ok(arguments) => core.arguments = arguments,
        Err(error) => return Err(Stop::Refused(argument_error(entry.name(), &error))),
    }
    Ok(entry)
}

/// What asks, after the hooks: a tool that always asks (leaving plan mode), or whose call
/// must ask (a command asking for a wider sandbox), asks whatever the hooks decided, and no
/// "approve for session" answer covers its next call. A tool that panics saying whether it
/// must ask, asks.
fn must_ask(core: &CallCore, entry: &ToolEntry, hooks_ask: Option<Ask>) -> Option<Ask> {
    let this_call = catch(|| entry.tool().must_ask(&core.arguments)).unwrap_or_else(|panic| {
        Some(format!(
            "the tool could not say whether this call needs approval ({panic})"
        ))
    });
    let must = match (entry.spec().always_ask(), this_call) {
        (Some(always), Some(this_call)) => Some(format!("{always}; {this_call}")),
        (Some(always), None) => Some(always.to_owned()),
        (None, this_call) => this_call,
    };
    match (must, hooks_ask) {
        (Some(reason), Some(hooks)) => Some(Ask {
            reason: format!("{reason}; {}", hooks.reason),
            session_key: None,
        }),
        (Some(reason), None) => Some(Ask {
            reason,
            session_key: None,
        }),
        (None, hooks) => hooks,
    }
}

/// The arguments, checked against the schema and by the tool; what the tool decoded for its
/// check is kept in them for the stages after.
pub(super) fn validate(entry: &ToolEntry, value: Value) -> Result<CallArgs, ArgumentError> {
    check_schema(entry.input_validator(), &value)?;
    let tool = entry.tool();
    let arguments = CallArgs::new(value);
    match catch(|| tool.check_arguments(&arguments)) {
        Ok(Ok(())) => Ok(arguments),
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
        ApprovalAnswer::Expired => Some(expired_refusal()),
        ApprovalAnswer::Unavailable => Some(info(
            ErrorCode::ApprovalUnavailable,
            toolrail_session_log::outcome::APPROVAL_UNAVAILABLE,
        )),
    }
}

/// The refusal of a call whose approval got no answer before its deadline.
pub(super) fn expired_refusal() -> ToolErrorInfo {
    info(
        ErrorCode::ApprovalExpired,
        toolrail_session_log::outcome::APPROVAL_EXPIRED,
    )
}

impl Pipeline {
    /// Closes a question a restart left unanswered past its deadline, as a live run's
    /// timeout does: `approval/decided {expired}`, waited since it was asked.
    pub(super) async fn record_expired(
        &self,
        core: &CallCore,
        asked_at: Timestamp,
        now: Timestamp,
    ) -> Result<(), PipelineError> {
        let decided = EventData::ApprovalDecided(ApprovalDecided {
            answer: ApprovalAnswer::Expired,
            waited_us: waited_us(asked_at, now),
            by: DecidedBy::Toolrail,
        });
        self.append(
            &core.identity,
            Instant::now(),
            decided,
            AppendUrgency::Buffered,
        )
        .await?;
        Ok(())
    }
}
