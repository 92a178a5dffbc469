//! Questions to the user: the `ask_user` tool, question services, and what a resumed
//! session does with a question that was still waiting.
//!
//! A question is `pending` until it is `answered`, `cancelled` or `expired`; each state is
//! logged (`question/asked`, `question/answered`), and expiry never makes up an answer.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use toolrail_tools_core::log::details;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolrail_tools_core::log::{
    AppendUrgency, BoxFuture, CallId, Event, EventData, EventDraft, EventSink, SinkError,
    Timestamp, ToolEvent,
    event::{QuestionAnswered, QuestionAsked, QuestionState},
};
use toolrail_tools_core::{
    CancellationToken, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool, arguments::violations,
};

use crate::digest::workspace_digest;
use crate::pending::{Inbox, Outbox, Pending, Waited};
use crate::script::{Cue, Script};

/// One question as the user sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// Names the question in the answer, e.g. `db`.
    pub id: String,
    /// The question itself, complete enough to answer without the conversation.
    pub question: String,
    /// Choices to pick from; leave out for a free answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Several options may be picked.
    #[serde(default)]
    pub multi_select: bool,
}

/// How a question ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuestionOutcome {
    /// The person's answer, as given.
    Answered(String),
    /// Withdrawn without an answer: the batch was cancelled, the UI dropped the question, or
    /// no one was there to ask.
    Cancelled,
    /// No answer came in time.
    Expired,
}

/// Puts questions to a person.
///
/// Implementors guarantee: the future resolves; it answers `Cancelled` promptly when
/// `cancel` fires; it never answers `Answered` with text the person did not give.
pub trait QuestionService: Send + Sync {
    /// Puts `question` to the person and waits for how it ends; `cancel` fires when the batch is
    /// cancelled.
    fn ask<'a>(
        &'a self,
        question: &'a Question,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, QuestionOutcome>;
}

/// A question waiting in a UI.
pub type PendingQuestion = Pending<Question, String>;
/// Where a UI receives questions.
pub type QuestionInbox = Inbox<Question, String>;

/// Questions for UIs, answered through an inbox. A deadline makes a question `expired`;
/// dropping it unanswered, a cancelled batch or no inbox at all make it `cancelled`.
#[derive(Debug)]
pub struct ChannelQuestions {
    outbox: Outbox<Question, String>,
}

impl ChannelQuestions {
    /// A service and the inbox its questions arrive in; `deadline` bounds each wait.
    pub fn new(deadline: Option<Duration>) -> (Self, QuestionInbox) {
        let (outbox, inbox) = Outbox::channel(deadline);
        (Self { outbox }, inbox)
    }
}

impl QuestionService for ChannelQuestions {
    fn ask<'a>(
        &'a self,
        question: &'a Question,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, QuestionOutcome> {
        Box::pin(async move {
            match self.outbox.ask(question.clone(), cancel).await {
                Waited::Answered(answer) => QuestionOutcome::Answered(answer),
                Waited::Expired => QuestionOutcome::Expired,
                Waited::Dropped | Waited::Cancelled | Waited::NoListener => {
                    QuestionOutcome::Cancelled
                }
            }
        })
    }
}

/// Outcomes from a list, in order, for scenarios and tests; when it runs out, questions
/// expire (a script never makes up an answer).
#[derive(Debug, Default)]
pub struct ScriptedQuestions {
    script: Script<Question, QuestionOutcome>,
}

impl ScriptedQuestions {
    /// A service giving `outcomes` in order; a question asked once the batch is cancelled is
    /// `Cancelled` and uses none.
    pub fn new(outcomes: impl IntoIterator<Item = QuestionOutcome>) -> Self {
        Self {
            script: Script::new(outcomes),
        }
    }

    /// Every question so far, in the order asked.
    pub fn asked(&self) -> Vec<Question> {
        self.script.asked()
    }
}

impl QuestionService for ScriptedQuestions {
    fn ask<'a>(
        &'a self,
        question: &'a Question,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, QuestionOutcome> {
        let outcome = match self.script.cue(question, cancel) {
            Cue::Answer(outcome) => outcome,
            Cue::Cancelled => QuestionOutcome::Cancelled,
            Cue::RanOut => QuestionOutcome::Expired,
        };
        Box::pin(std::future::ready(outcome))
    }
}

/// The arguments of `ask_user`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskUserArgs {
    /// One or more questions, asked in order.
    pub questions: Vec<Question>,
}

/// `ask_user {questions: [{id, question, options?, multi_select?}]}`.
pub struct AskUser {
    service: std::sync::Arc<dyn QuestionService>,
}

impl AskUser {
    /// The name the model calls it by.
    pub const NAME: &'static str = "ask_user";

    /// The tool, putting its questions to `service`.
    pub fn new(service: std::sync::Arc<dyn QuestionService>) -> Self {
        Self { service }
    }
}

impl TypedTool for AskUser {
    type Args = AskUserArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<AskUserArgs>(
            Self::NAME,
            "Ask the user one or more questions and wait for the answers. Use it when a decision is the user's to make or the task is ambiguous. Each question has an id, the question, and optionally options (with multi_select to allow several). A question that expires or is cancelled has no answer: decide without it or ask again.",
        )
        .kind(ToolKind::Think)
        // It changes nothing in the workspace, so plan mode lets it through, and asking
        // again after a crash is safe.
        .read_only()
        .idempotent()
        .build()
    }

    // Concurrency stays the default, exclusive: questions go to one person one at a time.

    fn check(&self, args: &AskUserArgs) -> Result<(), Vec<String>> {
        check_questions(&args.questions)
    }

    async fn run(&self, ctx: &ToolContext, args: AskUserArgs) -> ToolResult {
        // Reading the workspace blocks: off the scheduler's thread.
        let digest = match ctx.workspace() {
            Some(root) => {
                let root = root.to_path_buf();
                tokio::task::spawn_blocking(move || workspace_digest(&root).ok())
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        let mut lines = Vec::with_capacity(args.questions.len());
        let mut answers = serde_json::Map::new();
        let mut shown = details::Question::default();
        for question in &args.questions {
            let asked = ToolEvent::QuestionAsked(QuestionAsked {
                question_id: question.id.clone(),
                question: question.question.clone(),
                options: question.options.clone(),
                multi_select: question.multi_select,
                workspace_digest: digest.clone(),
            });
            ctx.record(asked, AppendUrgency::Durable)
                .await
                .map_err(|error| {
                    ToolFailure::new(format!("could not log the question: {error}"))
                })?;
            let outcome = self.service.ask(question, ctx.cancellation()).await;
            let (state, answer) = match &outcome {
                QuestionOutcome::Answered(text) => (QuestionState::Answered, Some(text.clone())),
                QuestionOutcome::Cancelled => (QuestionState::Cancelled, None),
                QuestionOutcome::Expired => (QuestionState::Expired, None),
            };
            let answered = ToolEvent::QuestionAnswered(QuestionAnswered {
                question_id: question.id.clone(),
                state,
                answer: answer.clone(),
            });
            ctx.record(answered, AppendUrgency::Durable)
                .await
                .map_err(|error| ToolFailure::new(format!("could not log the answer: {error}")))?;
            if ctx.cancellation().is_cancelled() {
                return Err(ToolFailure::new(
                    "the batch was cancelled while the user was being asked",
                ));
            }
            lines.push(match &outcome {
                QuestionOutcome::Answered(text) => format!("{}: {text}", question.id),
                QuestionOutcome::Cancelled => format!(
                    "{}: no answer (the question was cancelled); decide without it or ask again",
                    question.id
                ),
                QuestionOutcome::Expired => format!(
                    "{}: no answer (nobody answered in time); decide without it or ask again",
                    question.id
                ),
            });
            answers.insert(
                question.id.clone(),
                json!({"state": state_text(state), "answer": answer}),
            );
            shown.questions.push(details::AskedQuestion {
                id: question.id.clone(),
                question: question.question.clone(),
                options: question.options.clone(),
            });
            shown.answers.insert(
                question.id.clone(),
                details::QuestionAnswer {
                    state: state_text(state).to_owned(),
                    answer: answer.map(Value::String),
                },
            );
        }
        Ok(ToolOutput {
            value: Some(Value::Object(answers)),
            ..ToolOutput::text(lines.join("\n"))
        }
        .with_details(shown))
    }
}

fn state_text(state: QuestionState) -> &'static str {
    match state {
        QuestionState::Answered => "answered",
        QuestionState::Cancelled => "cancelled",
        QuestionState::Expired => "expired",
    }
}

/// Every problem with the questions, so the model can fix them all at once.
fn check_questions(questions: &[Question]) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if questions.is_empty() {
        problems.push("/questions: ask at least one question".to_owned());
    }
    let mut seen = HashSet::new();
    for (at, question) in questions.iter().enumerate() {
        if question.id.trim().is_empty() {
            problems.push(format!("/questions/{at}/id: must not be empty"));
        } else if !seen.insert(question.id.as_str()) {
            problems.push(format!(
                "/questions/{at}/id: `{}` is used twice; ids must be unique",
                question.id
            ));
        }
        if question.question.trim().is_empty() {
            problems.push(format!("/questions/{at}/question: must not be empty"));
        }
        if question.multi_select && question.options.is_empty() {
            problems.push(format!(
                "/questions/{at}/multi_select: several options may be picked, but none are offered"
            ));
        }
    }
    violations(problems)
}

/// A question the log shows asked and never answered.
#[derive(Clone, Debug, PartialEq)]
pub struct UnansweredQuestion {
    /// The call that asked it; `None` when its event carries no call id.
    pub call_id: Option<CallId>,
    /// The question as its `question/asked` event logged it, with the workspace digest of that
    /// moment.
    pub asked: QuestionAsked,
}

/// The questions still waiting when the log ends, in the order asked.
pub fn unanswered_questions(events: &[Event]) -> Vec<UnansweredQuestion> {
    let mut open: Vec<UnansweredQuestion> = Vec::new();
    for event in events {
        if let EventData::QuestionAsked(asked) = &event.data {
            open.push(UnansweredQuestion {
                call_id: event.call_id.clone(),
                asked: asked.clone(),
            });
        } else if let EventData::QuestionAnswered(answered) = &event.data {
            open.retain(|question| {
                !(question.asked.question_id == answered.question_id
                    && question.call_id == event.call_id)
            });
        }
    }
    open
}

/// What resuming did with the questions that were waiting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResumedQuestions {
    /// Withdrawn because the workspace changed since they were asked (logged `cancelled`).
    pub withdrawn: Vec<UnansweredQuestion>,
    /// Asked again, with how each ended (logged). The call that asked them was answered by
    /// recovery, so the embedder passes these answers on (e.g. in the next user message).
    pub asked_again: Vec<(UnansweredQuestion, QuestionOutcome)>,
}

/// On resume, a question that was waiting is withdrawn (logged as `cancelled`) when the
/// workspace no longer has the digest it had when the question was asked, since the answer
/// may no longer fit; otherwise it is asked again through `service` and its outcome logged.
/// A question asked without a digest is withdrawn: nothing shows the world stayed the same.
pub async fn resume_questions(
    events: &[Event],
    workspace: &Path,
    log: &dyn EventSink,
    service: &dyn QuestionService,
    cancel: &CancellationToken,
) -> Result<ResumedQuestions, SinkError> {
    let current = workspace_digest(workspace).ok();
    let mut resumed = ResumedQuestions::default();
    for waiting in unanswered_questions(events) {
        let unchanged = current.is_some() && waiting.asked.workspace_digest == current;
        let outcome = if unchanged {
            let question = Question {
                id: waiting.asked.question_id.clone(),
                question: waiting.asked.question.clone(),
                options: waiting.asked.options.clone(),
                multi_select: waiting.asked.multi_select,
            };
            Some(service.ask(&question, cancel).await)
        } else {
            None
        };
        let (state, answer) = match &outcome {
            Some(QuestionOutcome::Answered(text)) => (QuestionState::Answered, Some(text.clone())),
            Some(QuestionOutcome::Expired) => (QuestionState::Expired, None),
            Some(QuestionOutcome::Cancelled) | None => (QuestionState::Cancelled, None),
        };
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn: None,
            step: None,
            call_id: waiting.call_id.clone(),
            data: EventData::QuestionAnswered(QuestionAnswered {
                question_id: waiting.asked.question_id.clone(),
                state,
                answer,
            }),
        };
        log.append(draft, AppendUrgency::Durable).await?;
        match outcome {
            Some(outcome) => resumed.asked_again.push((waiting, outcome)),
            None => resumed.withdrawn.push(waiting),
        }
    }
    Ok(resumed)
}
