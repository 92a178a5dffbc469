//! What a running turn shows: [`AgentEvent`], made from two sources that feed one ordered
//! channel — the scheduler's live events (the model's deltas, calls prepared, started,
//! progressing, committed) and the log itself (steps, whole messages, approvals, context
//! messages), tapped as each event is appended. Both push under one lock, so a reader sees
//! events in the order they happened.
//!
//! The tap also keeps what a turn's [`Answer`](super::Answer) is made of (its messages,
//! results and usage), so the answer is read without reopening the store (which the open
//! log holds locked).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use toolrail_agent_loop::{Live, LiveEvent, LiveSink, ModelDelta};
use toolrail_session_log::{
    AppendFuture, AppendUrgency, BoxFuture, CallId, ContentBlock, EventData, EventDraft, EventSink,
    SessionLog, Settle, SinkError, ToolResultRecord,
    event::{ApprovalAnswer, AssistantMessage},
};

/// One thing that happened in a running turn, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    /// A model request began (steps count from 1 in each turn).
    StepStarted {
        /// The request's number in the turn, from 1.
        step: u32,
    },
    /// More of the answer's text, as the model writes it.
    TextDelta(String),
    /// More of the model's reasoning, from providers that send it.
    ReasoningDelta(String),
    /// The model began a tool call (its arguments follow as [`AgentEvent::ToolCallDelta`]).
    ToolCallStreaming {
        /// The call's place among the message's calls, from 0; its deltas carry the same.
        index: u32,
        /// The id the server gave the call; empty from servers that send none (the logged
        /// message then names it `call_<n>`).
        call_id: String,
        /// The tool the model is calling, as far as its name has arrived.
        name: String,
    },
    /// More of a tool call's raw argument text.
    ToolCallDelta {
        /// The call's `index`, as [`AgentEvent::ToolCallStreaming`] gave it.
        index: u32,
        /// The next piece of the argument text, not yet parsed (it may end mid-token).
        fragment: String,
    },
    /// The request failed mid-answer and is tried again: drop what the deltas showed.
    AnswerRestarted {
        /// What broke the attempt, as the model client tells it.
        why: String,
    },
    /// The model's whole message, as logged (before any of its calls runs).
    Message(AssistantMessage),
    /// A call passed (or was refused by) the policy stages, in model order, with the
    /// arguments it is judged with.
    CallPrepared {
        /// The call's id in the log.
        call_id: CallId,
        /// The tool called.
        name: String,
        /// The effective arguments: after any logged rewrite; for a call refused before its
        /// arguments parsed, what could be read of them.
        arguments: Arc<Value>,
    },
    /// A call asks the person (or the approval service) first.
    ApprovalAsked {
        /// The call waiting for the answer.
        call_id: CallId,
        /// Why it asks, as the hook that asked says it (`` `bash` needs an approval: the
        /// `untrusted` preset ``).
        reason: String,
        /// The effective arguments the approver sees.
        arguments: Arc<Value>,
        /// What an "approve for session" answer would cover (`bash(git push origin)`);
        /// `None` when no such answer could cover the call (a command known only at run
        /// time, a line that redirects to a file).
        session_key: Option<String>,
    },
    /// The approval service answered.
    ApprovalDecided {
        /// The call the answer is for.
        call_id: CallId,
        /// What was answered, as the log records it; only `AllowedOnce` and
        /// `AllowedForSession` let the call go on.
        answer: ApprovalAnswer,
    },
    /// The call's body started: sent as its `tool/start` is appended to the log, so a
    /// cancel that answers it finds the call started.
    CallStarted {
        /// The call whose body started.
        call_id: CallId,
    },
    /// Progress the body reported.
    CallProgress {
        /// The call reporting.
        call_id: CallId,
        /// What the tool reported, in its own shape.
        data: Value,
    },
    /// The body settled (in completion order).
    CallFinished {
        /// The call whose body settled; its result is committed later, in model order.
        call_id: CallId,
    },
    /// The call's result is in the log, durably (in model order): the record the model
    /// and every view read.
    CallCommitted {
        /// The call whose result this is.
        call_id: CallId,
        /// The tool called; empty for a call of a cut-off message, which is committed
        /// without being prepared.
        name: String,
        /// The arguments [`AgentEvent::CallPrepared`] showed; `null` for a call of a
        /// cut-off message.
        arguments: Arc<Value>,
        /// The result as the log holds it.
        record: Arc<ToolResultRecord>,
    },
    /// A message joined the conversation after a batch: steering from the user, or what
    /// a hook added.
    Context {
        /// Who added it: `user` for steering, or the hook's name.
        source: String,
        /// The message, as the model is given it.
        content: Vec<ContentBlock>,
    },
    /// The turn is over: the last event of [`AgentStream`](super::AgentStream).
    TurnEnded(Box<super::Answer>),
}

/// What a turn appended that its answer is made of.
#[derive(Default)]
pub(crate) struct Kept {
    pub messages: Vec<AssistantMessage>,
    pub results: Vec<Arc<ToolResultRecord>>,
    pub usage: Vec<Value>,
}

#[derive(Default)]
struct TurnState {
    kept: Kept,
    events: Option<UnboundedSender<AgentEvent>>,
    /// Each prepared call's name and arguments, for its commit event.
    calls: HashMap<CallId, (String, Arc<Value>)>,
}

impl TurnState {
    fn send(&self, event: AgentEvent) {
        if let Some(events) = &self.events {
            // A reader that stopped listening does not stop the turn.
            let _ = events.send(event);
        }
    }
}

/// The session's log, tapped.
pub(crate) struct Tap {
    inner: Arc<dyn SessionLog>,
    turn: Mutex<TurnState>,
    /// The session's spans, when it exports telemetry: each event is handed to them as it
    /// is appended, under the same lock, so in the log's order (they are made on a thread
    /// of their own).
    #[cfg(feature = "otlp")]
    spans: Option<crate::telemetry::feed::SpanFeed>,
}

impl Tap {
    pub(super) fn new(inner: Arc<dyn SessionLog>) -> Self {
        Self {
            inner,
            turn: Mutex::new(TurnState::default()),
            #[cfg(feature = "otlp")]
            spans: None,
        }
    }

    /// The session's spans are made from what it appends from now on.
    #[cfg(feature = "otlp")]
    pub(super) fn with_spans(mut self, spans: crate::telemetry::feed::SpanFeed) -> Self {
        self.spans = Some(spans);
        self
    }

    /// A reopened session's spans link to the turn its interruption left open.
    #[cfg(feature = "otlp")]
    pub(super) fn resumed(&self, earlier: &[toolrail_session_log::Event]) {
        if let Some(spans) = &self.spans {
            spans.resumed(earlier, std::time::SystemTime::now());
        }
    }

    /// Starts a turn: what is kept is cleared; events go to `events`, if given.
    pub(super) fn begin(&self, events: Option<UnboundedSender<AgentEvent>>) {
        let mut turn = self.turn.lock();
        *turn = TurnState {
            events,
            ..TurnState::default()
        };
    }

    /// Ends the turn: what it kept; no more events are sent.
    pub(super) fn end(&self) -> Kept {
        let mut turn = self.turn.lock();
        turn.events = None;
        turn.calls.clear();
        std::mem::take(&mut turn.kept)
    }

    fn live(&self, event: &LiveEvent) {
        let mut turn = self.turn.lock();
        if turn.events.is_none() {
            // Nobody streams this turn: nothing to show, and no call to remember for it.
            return;
        }
        let shown = match event {
            LiveEvent::Model(delta) => match delta {
                ModelDelta::Text(text) => AgentEvent::TextDelta(text.clone()),
                ModelDelta::Reasoning(text) => AgentEvent::ReasoningDelta(text.clone()),
                ModelDelta::ToolCallStarted {
                    index,
                    call_id,
                    name,
                } => AgentEvent::ToolCallStreaming {
                    index: *index,
                    call_id: call_id.clone(),
                    name: name.clone(),
                },
                ModelDelta::ToolCallArguments { index, fragment } => AgentEvent::ToolCallDelta {
                    index: *index,
                    fragment: fragment.clone(),
                },
                ModelDelta::Restarted { why, .. } => {
                    AgentEvent::AnswerRestarted { why: why.clone() }
                }
            },
            LiveEvent::Prepared {
                call_id,
                name,
                arguments,
                ..
            } => {
                turn.calls
                    .insert(call_id.clone(), (name.clone(), Arc::clone(arguments)));
                AgentEvent::CallPrepared {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: Arc::clone(arguments),
                }
            }
            // A launch is not a start: `CallStarted` comes from the call's `tool/start` as it
            // is appended (below), so what a client is shown never runs ahead of the log —
            // a cancel sent on it always finds the call started.
            LiveEvent::Started { .. } => return,
            LiveEvent::Progress { call_id, data } => AgentEvent::CallProgress {
                call_id: call_id.clone(),
                data: data.clone(),
            },
            LiveEvent::Finished { call_id } => AgentEvent::CallFinished {
                call_id: call_id.clone(),
            },
            LiveEvent::Committed {
                call_id, record, ..
            } => {
                // A call of a cut-off message is committed without being prepared.
                let (name, arguments) = turn
                    .calls
                    .remove(call_id)
                    .unwrap_or_else(|| (String::new(), Arc::new(Value::Null)));
                AgentEvent::CallCommitted {
                    call_id: call_id.clone(),
                    name,
                    arguments,
                    record: Arc::clone(record),
                }
            }
        };
        turn.send(shown);
    }

    /// What an appended event shows, and keeps of it for the answer.
    fn appended(turn: &mut TurnState, draft: &EventDraft) -> Option<AgentEvent> {
        // What is kept is kept always; events are made only for a turn someone streams.
        let listening = turn.events.is_some();
        let call_id = || draft.call_id.clone().unwrap_or_else(|| CallId::from(""));
        // The kinds a turn's answer and its events are made of; the log's other kinds are
        // not (`if let`: the lint wants no wildcard arm over the whole vocabulary).
        if let EventData::StepStart(_) = &draft.data {
            draft
                .step
                .filter(|_| listening)
                .map(|step| AgentEvent::StepStarted { step: step.0 })
        } else if let EventData::AssistantMessage(message) = &draft.data {
            turn.kept.messages.push(message.clone());
            listening.then(|| AgentEvent::Message(message.clone()))
        } else if let EventData::ToolResult(record) = &draft.data {
            // Only the host's calls: a program's binding calls are part of its result.
            if draft
                .call_id
                .as_ref()
                .is_some_and(|id| !id.is_code_sub_call())
            {
                turn.kept.results.push(Arc::clone(record));
            }
            None
        } else if let EventData::StepEnd(step) = &draft.data {
            turn.kept.usage.extend(step.usage.clone());
            None
        } else if let EventData::ToolStart(_) = &draft.data {
            // The host's calls: a program's calls are shown as part of its own.
            draft
                .call_id
                .clone()
                .filter(|id| listening && !id.is_code_sub_call())
                .map(|call_id| AgentEvent::CallStarted { call_id })
        } else if let EventData::ApprovalAsked(asked) = &draft.data {
            listening.then(|| AgentEvent::ApprovalAsked {
                call_id: call_id(),
                reason: asked.reason.clone(),
                arguments: asked.arguments.clone(),
                session_key: asked.session_key.clone(),
            })
        } else if let EventData::ApprovalDecided(decided) = &draft.data {
            listening.then(|| AgentEvent::ApprovalDecided {
                call_id: call_id(),
                answer: decided.answer.clone(),
            })
        } else if let EventData::ContextMessage(message) = &draft.data {
            listening.then(|| AgentEvent::Context {
                source: message.source.clone(),
                content: message.content.clone(),
            })
        } else {
            None
        }
    }
}

impl EventSink for Tap {
    fn append(&self, draft: EventDraft, urgency: AppendUrgency) -> AppendFuture<'_> {
        // The store numbers the event inside `append`, before it returns; doing that under
        // the tap's lock keeps what is kept, and what is shown, in the log's order.
        let mut turn = self.turn.lock();
        #[cfg(feature = "otlp")]
        let mut draft = draft;
        #[cfg(feature = "otlp")]
        if let Some(spans) = &self.spans {
            spans.observe(&mut draft);
        }
        let shown = Self::appended(&mut turn, &draft);
        let appended = self.inner.append(draft, urgency);
        if let Some(shown) = shown {
            turn.send(shown);
        }
        appended
    }

    fn next_call_span(&self) -> Option<toolrail_session_log::TraceRef> {
        #[cfg(feature = "otlp")]
        return self.spans.as_ref().and_then(|spans| spans.call_span());
        #[cfg(not(feature = "otlp"))]
        None
    }
}

impl SessionLog for Tap {
    fn barrier(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.inner.barrier()
    }

    fn settle(&self, point: Settle) -> BoxFuture<'_, Result<(), SinkError>> {
        self.inner.settle(point)
    }
}

/// The scheduler's live events, shown through the tap and handed on to the embedder's own
/// sink, if any.
pub(crate) struct TapLive {
    pub tap: Arc<Tap>,
    pub also: Option<Live>,
}

impl LiveSink for TapLive {
    fn event(&self, event: LiveEvent) {
        self.tap.live(&event);
        if let Some(also) = &self.also {
            also.event(event);
        }
    }
}
