//! A session's spans, made from its log's events in the log's order — every turn, model
//! request, batch and call, refused ones and code-mode sub-calls included — without any
//! code in the pipeline's path. A live session's events reach them on its telemetry thread
//! (`feed.rs`), with the ids of the `invoke_agent` and `execute_tool` spans already written
//! into their `turn/start` and `tool/call`; a recorded log reaches them the same way
//! (`replay.rs`). Times are the events' own (`ts`), so both make the same spans.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};
use toolrail_session_log::event::{AssistantBlock, TurnEndKind};
use toolrail_session_log::{CallId, Event, EventData, EventDraft, SessionId, TraceRef};
use toolrail_tools_core::Registry;
use toolrail_tools_core::registry::CallOrigin;

use super::genai::{self, Capture, ChatSettings, Semconv, attr, name};
use super::{Instruments, Telemetry};

struct Chat {
    span: Span,
    started: SystemTime,
    /// When the whole answer was in (`assistant/message`); the span ends there once the
    /// step's usage (written at `step/end`) is on it.
    answered: Option<SystemTime>,
}

struct Call {
    span: Span,
    recorded: SystemTime,
    started: Option<SystemTime>,
    name: String,
    approval: Option<Span>,
    /// The request to an MCP server the call made, while it is out.
    mcp: Option<McpCall>,
}

/// An MCP request's client span, and the labels of its duration.
struct McpCall {
    span: Span,
    sent: SystemTime,
    labels: Vec<KeyValue>,
}

struct Batch {
    span: Span,
    calls: i64,
    last_commit: Option<SystemTime>,
}

/// What a reopened session's spans link to: the turn its interruption left open, and the
/// calls recovery repaired.
pub(crate) struct Resumption {
    interrupted: TraceRef,
    repaired: Option<Vec<CallId>>,
}

impl Resumption {
    /// The interruption `events` (a log read back) ended on, if it ended inside a turn
    /// whose span it recorded.
    pub(crate) fn of(events: &[Event]) -> Option<Self> {
        let mut scan = ResumptionScan::default();
        events.iter().for_each(|event| scan.step(event));
        scan.resumption()
    }
}

/// [`Resumption::of`] a log read one event at a time (replay asks at every turn).
#[derive(Default)]
pub(crate) struct ResumptionScan {
    interrupted: Option<TraceRef>,
    repaired: Option<Vec<CallId>>,
}

impl ResumptionScan {
    /// Takes the next event of the log.
    pub(crate) fn step(&mut self, event: &Event) {
        if let EventData::TurnStart(start) = &event.data {
            self.interrupted = start.trace;
        } else if let EventData::RecoveryRepaired(repair) = &event.data {
            self.repaired = Some(repair.calls.clone());
        } else if let EventData::TurnEnd(end) = &event.data
            && end.kind != TurnEndKind::Interrupted
        {
            self.interrupted = None;
        }
    }

    /// The interruption the events so far ended on, if any.
    pub(crate) fn resumption(&self) -> Option<Resumption> {
        Some(Resumption {
            interrupted: self.interrupted?,
            repaired: self.repaired.clone(),
        })
    }
}

/// The status of a span cut short by lost events.
const LOST: &str = "toolrail: telemetry fell behind the session; events of this turn were dropped and the rest of it is not exported";

/// The open spans of one session.
pub(crate) struct SessionSpans {
    tracer: SdkTracer,
    instruments: Instruments,
    capture: Capture,
    semconv: Semconv,
    /// Calls shorter than this get no phase spans (`[telemetry] phase_spans_min_ms`).
    phase_min: std::time::Duration,
    session: SessionId,
    settings: ChatSettings,
    registry: Registry,
    /// The open turn is a client's call (`turn/start.client`): no model is asked.
    client_turn: bool,
    /// The interrupted turn a resumed session's next turn links to.
    link_next: Option<TraceRef>,
    /// The latest time an event was seen at: spans take the events' times, but the log's
    /// stamps are not quite monotonic (a streamed call is stamped before the message that
    /// carries it), and a span must not end before it starts.
    clock: SystemTime,
    turn: Option<Span>,
    chat: Option<Chat>,
    batch: Option<Batch>,
    calls: HashMap<CallId, Call>,
}

fn context_of(span: &Span) -> Context {
    Context::new().with_remote_span_context(span.span_context().clone())
}

fn span_context_of(trace: &TraceRef) -> SpanContext {
    SpanContext::new(
        opentelemetry::trace::TraceId::from_bytes(trace.trace_id),
        opentelemetry::trace::SpanId::from_bytes(trace.span_id),
        opentelemetry::trace::TraceFlags::SAMPLED,
        true,
        opentelemetry::trace::TraceState::NONE,
    )
}

fn seconds(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).unwrap_or_default().as_secs_f64()
}

impl SessionSpans {
    pub(crate) fn new(
        telemetry: &Telemetry,
        session: SessionId,
        settings: ChatSettings,
        registry: Registry,
    ) -> Self {
        Self {
            tracer: telemetry.tracer.clone(),
            instruments: telemetry.instruments.clone(),
            capture: telemetry.capture,
            semconv: telemetry.semconv,
            phase_min: telemetry.phase_min,
            session,
            settings,
            registry,
            client_turn: false,
            link_next: None,
            clock: SystemTime::UNIX_EPOCH,
            turn: None,
            chat: None,
            batch: None,
            calls: HashMap::new(),
        }
    }

    /// A reopened session: its next turn links to the turn the interruption left open (its
    /// `turn/start`'s span), and what recovery repaired becomes a `toolrail.recovery` span
    /// linked to it too.
    pub(crate) fn resumed(&mut self, resumption: Resumption, at: SystemTime) {
        let Resumption {
            interrupted,
            repaired,
        } = resumption;
        self.link_next = Some(interrupted);
        if let Some(repaired) = repaired {
            let calls: Vec<opentelemetry::StringValue> = repaired
                .iter()
                .map(|id| id.as_str().to_owned().into())
                .collect();
            let builder = self
                .tracer
                .span_builder(name::RECOVERY)
                .with_start_time(at)
                .with_links(vec![Link::with_context(span_context_of(&interrupted))])
                .with_attributes(vec![KeyValue::new(
                    attr::CONVERSATION_ID,
                    self.session.as_str().to_owned(),
                )]);
            let mut span = self.tracer.build_with_context(builder, &Context::new());
            span.add_event_with_timestamp(
                name::EVENT_RECOVERY_REPAIRED,
                at,
                vec![KeyValue::new(
                    attr::RECOVERY_CALLS,
                    opentelemetry::Value::Array(calls.into()),
                )],
            );
            span.end_with_timestamp(at);
        }
    }

    /// Events of the turn were lost before the next one (the session's feed fell too far
    /// behind): what is open ends now, at the last time seen, marked as cut short, so no
    /// span waits for an end it will not see and none is left without its parent; the
    /// rest of the turn makes no span (`feed.rs` skips it).
    pub(crate) fn lost(&mut self) {
        let at = self.clock;
        let cut = || Status::error(LOST);
        let open = self.calls.drain().flat_map(|(_, call)| {
            std::iter::once(call.span)
                .chain(call.approval)
                .chain(call.mcp.map(|mcp| mcp.span))
        });
        let open = open
            .chain(self.batch.take().map(|batch| batch.span))
            .chain(self.chat.take().map(|chat| chat.span))
            .chain(self.turn.take());
        for mut span in open {
            span.set_status(cut());
            span.end_with_timestamp(at);
        }
    }

    /// One event on its way to the log (or read back from it), at its time: spans open,
    /// close or gain attributes and events; a `turn/start` or `tool/call` span takes the
    /// ids the event names (the feed has written them in before it is handed over).
    pub(crate) fn observe(&mut self, draft: &EventDraft) {
        self.clock = self.clock.max(draft.ts.to_system_time());
        let at = self.clock;
        let call_id = draft.call_id.clone();
        match &draft.data {
            EventData::TurnStart(start) => {
                let turn = draft.turn.map(|turn| turn.0);
                self.client_turn = start.client;
                self.turn_started(turn, start.trace, start.caller, at);
            }
            EventData::StepStart(_) => {
                if !self.client_turn {
                    self.chat_started(draft.step.map(|step| step.0), at);
                }
            }
            EventData::AssistantMessage(message) => {
                if let Some(chat) = &mut self.chat {
                    chat.answered = Some(at);
                    chat.span
                        .set_attribute(genai::finish_reasons_attribute(&message.stop_reason));
                }
                // Whether it calls tools, not which (`tool_calls` would also check its ids).
                let calls = message
                    .blocks
                    .iter()
                    .any(|block| matches!(block, AssistantBlock::ToolCall { .. }));
                if calls {
                    self.batch_started(at);
                }
            }
            EventData::ToolCall(call) if let Some(id) = &call_id => {
                self.call_recorded(id, call, at);
            }
            EventData::ArgsRewritten(rewrite) => {
                if let Some(call) = call_id.and_then(|id| self.calls.get_mut(&id)) {
                    let mut attributes = vec![KeyValue::new(attr::BY, rewrite.by.clone())];
                    if self.capture == Capture::Content {
                        attributes.push(KeyValue::new(
                            attr::TOOL_CALL_ARGUMENTS,
                            rewrite.effective.to_string(),
                        ));
                    }
                    call.span
                        .add_event_with_timestamp(name::EVENT_ARGS_REWRITTEN, at, attributes);
                }
            }
            EventData::ApprovalAsked(asked) => {
                if let Some(call) = call_id.and_then(|id| self.calls.get_mut(&id)) {
                    call.span.add_event_with_timestamp(
                        name::EVENT_APPROVAL_ASKED,
                        at,
                        vec![KeyValue::new(attr::APPROVAL_REASON, asked.reason.clone())],
                    );
                    let builder = self
                        .tracer
                        .span_builder(name::PHASE_APPROVAL)
                        .with_start_time(at);
                    call.approval = Some(
                        self.tracer
                            .build_with_context(builder, &context_of(&call.span)),
                    );
                }
            }
            EventData::ApprovalDecided(decided) => {
                if let Some(call) = call_id.and_then(|id| self.calls.get_mut(&id)) {
                    let answer = decided_answer(&decided.answer);
                    let waited = i64::try_from(decided.waited_us).unwrap_or(i64::MAX);
                    call.span.add_event_with_timestamp(
                        name::EVENT_APPROVAL_DECIDED,
                        at,
                        vec![
                            KeyValue::new(attr::APPROVAL_ANSWER, answer),
                            KeyValue::new(attr::APPROVAL_WAITED_US, waited),
                        ],
                    );
                    if let Some(mut wait) = call.approval.take() {
                        wait.set_attribute(KeyValue::new(attr::APPROVAL_ANSWER, answer));
                        wait.end_with_timestamp(at);
                    }
                }
            }
            EventData::McpRequest(request) => {
                if let Some(call) = call_id.and_then(|id| self.calls.get_mut(&id)) {
                    // A call has one request; a second one recorded for it ends the first.
                    if let Some(mut earlier) = call.mcp.take() {
                        earlier.span.end_with_timestamp(at);
                    }
                    let builder = self
                        .tracer
                        .span_builder(super::mcp::span_name(request))
                        .with_kind(SpanKind::Client)
                        .with_start_time(at)
                        .with_attributes(super::mcp::request_attributes(request));
                    let span = super::replay::with_ids(request.trace, || {
                        self.tracer
                            .build_with_context(builder, &context_of(&call.span))
                    });
                    call.mcp = Some(McpCall {
                        span,
                        sent: at,
                        labels: super::mcp::metric_labels(request),
                    });
                }
            }
            EventData::ToolStart(_) => {
                if let Some(call) = call_id.and_then(|id| self.calls.get_mut(&id)) {
                    call.started = Some(at);
                }
            }
            EventData::ToolResult(record) => {
                if let Some(id) = call_id {
                    self.call_committed(&id, record, at);
                }
            }
            EventData::StepEnd(step) => {
                if let Some(mut batch) = self.batch.take() {
                    batch
                        .span
                        .set_attribute(KeyValue::new(attr::BATCH_CALLS, batch.calls));
                    batch
                        .span
                        .end_with_timestamp(batch.last_commit.unwrap_or(at));
                }
                self.chat_ended(Some(step), None, at);
            }
            EventData::TurnEnd(end) => {
                let failed = matches!(end.kind, TurnEndKind::Error).then_some("error");
                self.chat_ended(None, failed, at);
                if let Some(mut batch) = self.batch.take() {
                    batch.span.end_with_timestamp(at);
                }
                for (_, mut call) in self.calls.drain() {
                    if let Some(mut mcp) = call.mcp.take() {
                        mcp.span.end_with_timestamp(at);
                    }
                    call.span.end_with_timestamp(at);
                }
                if let Some(mut turn) = self.turn.take() {
                    turn.set_attributes(genai::turn_end_attributes(end.kind));
                    if let Some(message) = end.message.clone().filter(|_| failed.is_some()) {
                        turn.set_status(Status::error(message));
                    }
                    turn.end_with_timestamp(at);
                }
            }
            // What a tool records of itself, and the rest of the session's story, make no
            // span; a program's sub-calls have their own `tool/call` and `tool/result`.
            EventData::SessionStart(_)
            | EventData::ToolCall(_)
            | EventData::CodeDispatchStart(_)
            | EventData::CodeDispatch(_)
            | EventData::ContextMessage(_)
            | EventData::TodoWrite(_)
            | EventData::QuestionAsked(_)
            | EventData::QuestionAnswered(_)
            | EventData::FsObserved(_)
            | EventData::FsWriteIntent(_)
            | EventData::PlanMode(_)
            | EventData::ToolsLoaded(_)
            | EventData::ShellStarted(_)
            | EventData::ShellExited(_)
            | EventData::RecoveryRepaired(_)
            | EventData::Unknown(_) => {}
        }
    }

    /// A turn's `invoke_agent` span, with the ids it was recorded with; a turn a traced
    /// client asked for (`caller`) is that client span's child, in its trace.
    fn turn_started(
        &mut self,
        turn: Option<u32>,
        recorded: Option<TraceRef>,
        caller: Option<TraceRef>,
        at: SystemTime,
    ) {
        if let Some(mut earlier) = self.turn.take() {
            earlier.end_with_timestamp(at);
        }
        let mut builder = self
            .tracer
            .span_builder(genai::invoke_agent_span_name())
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(genai::turn_attributes(
                self.session.as_str(),
                turn,
                &self.settings,
                self.semconv,
            ));
        if let Some(interrupted) = self.link_next.take() {
            builder = builder.with_links(vec![Link::with_context(span_context_of(&interrupted))]);
        }
        let parent = caller
            .filter(TraceRef::is_valid)
            .map_or_else(Context::new, |caller| {
                Context::new().with_remote_span_context(span_context_of(&caller))
            });
        let span = super::replay::with_ids(recorded, || {
            self.tracer.build_with_context(builder, &parent)
        });
        self.turn = Some(span);
    }

    /// The context new spans of the turn are children of (none outside a turn: a call a
    /// reopened session asks again while it is built).
    fn turn_context(&self) -> Context {
        self.turn.as_ref().map_or_else(Context::new, context_of)
    }

    fn chat_started(&mut self, step: Option<u32>, at: SystemTime) {
        let builder = self
            .tracer
            .span_builder(genai::chat_span_name(&self.settings))
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes(genai::chat_request_attributes(
                &self.settings,
                step,
                self.semconv,
            ));
        let span = self
            .tracer
            .build_with_context(builder, &self.turn_context());
        self.chat = Some(Chat {
            span,
            started: at,
            answered: None,
        });
    }

    /// Ends the open `chat` span: with what the step's `step/end` recorded of the answer
    /// (usage, the server's id and model) when the step ended, or marked failed when the
    /// turn ended without one.
    fn chat_ended(
        &mut self,
        step: Option<&toolrail_session_log::event::StepEnd>,
        failed: Option<&'static str>,
        at: SystemTime,
    ) {
        let Some(mut chat) = self.chat.take() else {
            return;
        };
        let end = chat.answered.unwrap_or(at);
        let mut labels = vec![KeyValue::new(attr::OPERATION_NAME, name::CHAT)];
        if let Some(provider) = &self.settings.provider {
            labels.push(KeyValue::new(attr::PROVIDER_NAME, provider.clone()));
        }
        if let Some(model) = &self.settings.model {
            labels.push(KeyValue::new(attr::REQUEST_MODEL, model.clone()));
        }
        if let Some(step) = step {
            chat.span.set_attributes(genai::response_attributes(step));
        }
        if let Some(usage) = step.and_then(|step| step.usage.as_ref()) {
            chat.span.set_attributes(genai::usage_attributes(usage));
            let (input, output) = genai::tokens(usage);
            for (kind, tokens) in [("input", input), ("output", output)] {
                if let Some(tokens) = tokens {
                    let mut labels = labels.clone();
                    labels.push(KeyValue::new(attr::TOKEN_TYPE, kind));
                    self.instruments.token_usage.record(tokens, &labels);
                }
            }
        }
        if let Some(failed) = failed.filter(|_| chat.answered.is_none()) {
            chat.span
                .set_attribute(KeyValue::new(attr::ERROR_TYPE, failed));
            chat.span
                .set_status(Status::error("the model request failed"));
            labels.push(KeyValue::new(attr::ERROR_TYPE, failed));
        }
        self.instruments
            .operation_duration
            .record(seconds(chat.started, end), &labels);
        chat.span.end_with_timestamp(end);
    }

    fn batch_started(&mut self, at: SystemTime) {
        if let Some(mut earlier) = self.batch.take() {
            earlier.span.end_with_timestamp(at);
        }
        let builder = self.tracer.span_builder(name::BATCH).with_start_time(at);
        let span = self
            .tracer
            .build_with_context(builder, &self.turn_context());
        self.batch = Some(Batch {
            span,
            calls: 0,
            last_commit: None,
        });
    }

    fn call_recorded(
        &mut self,
        id: &CallId,
        call: &toolrail_session_log::event::ToolCall,
        at: SystemTime,
    ) {
        // A program's call is a child of its `run_code` call; a model's, of its batch.
        let parent = match id.as_str().rsplit_once(":code:") {
            Some((parent, _)) => self
                .calls
                .get(&CallId::from(parent))
                .map(|call| context_of(&call.span)),
            None => {
                if let Some(batch) = &mut self.batch {
                    batch.calls += 1;
                }
                self.batch.as_ref().map(|batch| context_of(&batch.span))
            }
        };
        let parent = parent.unwrap_or_else(|| self.turn_context());
        let origin = if id.is_code_sub_call() {
            CallOrigin::Code
        } else {
            CallOrigin::Host
        };
        let snapshot = self.registry.snapshot();
        let description = snapshot
            .resolve(&call.name, origin)
            .map(|entry| entry.spec().description());
        let builder = self
            .tracer
            .span_builder(genai::execute_tool_span_name(&call.name))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(genai::tool_call_attributes(
                call,
                id.as_str(),
                description,
                self.capture,
            ));
        let span = super::replay::with_ids(call.trace, || {
            self.tracer.build_with_context(builder, &parent)
        });
        self.calls.insert(
            id.clone(),
            Call {
                span,
                recorded: at,
                started: None,
                name: call.name.clone(),
                approval: None,
                mcp: None,
            },
        );
    }

    fn call_committed(
        &mut self,
        id: &CallId,
        record: &toolrail_session_log::ToolResultRecord,
        at: SystemTime,
    ) {
        let Some(mut call) = self.calls.remove(id) else {
            return;
        };
        if let Some(mut wait) = call.approval.take() {
            wait.end_with_timestamp(at);
        }
        if let Some(McpCall {
            mut span,
            sent,
            mut labels,
        }) = call.mcp.take()
        {
            let end = super::mcp::ended_at(sent, call.started, record.timing.run_us, at);
            if let Some(error) = &record.error {
                let code = KeyValue::new(attr::ERROR_TYPE, error.code.as_str().to_owned());
                span.set_attribute(code.clone());
                span.set_status(Status::error(error.code.as_str().to_owned()));
                labels.push(code);
            }
            self.instruments
                .mcp_client_duration
                .record(seconds(sent, end), &labels);
            span.end_with_timestamp(end);
        }
        call.span
            .set_attributes(genai::tool_result_attributes(record, self.capture));
        if let Some(error) = &record.error {
            if genai::is_denial(record) {
                let mut attributes = vec![KeyValue::new(
                    attr::ERROR_TYPE,
                    error.code.as_str().to_owned(),
                )];
                // The guard or hook that refused (a name from the configuration, never
                // the call's arguments).
                if let Some(by) = &error.by {
                    attributes.push(KeyValue::new(attr::BY, by.clone()));
                }
                call.span
                    .add_event_with_timestamp(name::EVENT_DENIED, at, attributes);
            }
            call.span
                .set_status(Status::error(error.code.as_str().to_owned()));
        }
        let parent = context_of(&call.span);
        let took = at.duration_since(call.recorded).unwrap_or_default();
        let phases = if took >= self.phase_min {
            genai::phases(&record.timing, call.recorded, call.started, at)
        } else {
            Vec::new()
        };
        for phase in phases {
            let builder = self
                .tracer
                .span_builder(phase.name)
                .with_start_time(phase.start);
            self.tracer
                .build_with_context(builder, &parent)
                .end_with_timestamp(phase.end);
        }
        let mut labels = vec![
            KeyValue::new(attr::OPERATION_NAME, name::EXECUTE_TOOL),
            KeyValue::new(attr::TOOL_NAME, call.name.clone()),
        ];
        if let Some(error) = &record.error {
            labels.push(KeyValue::new(
                attr::ERROR_TYPE,
                error.code.as_str().to_owned(),
            ));
        }
        self.instruments
            .execute_tool_duration
            .record(seconds(call.recorded, at), &labels);
        if !id.is_code_sub_call()
            && let Some(batch) = &mut self.batch
        {
            batch.last_commit = Some(at);
        }
        call.span.end_with_timestamp(at);
    }
}

fn decided_answer(answer: &toolrail_session_log::event::ApprovalAnswer) -> &'static str {
    use toolrail_session_log::event::ApprovalAnswer;
    match answer {
        ApprovalAnswer::AllowedOnce => "allowed_once",
        ApprovalAnswer::AllowedForSession { .. } => "allowed_for_session",
        ApprovalAnswer::Rejected { .. } => "rejected",
        ApprovalAnswer::Cancelled => "cancelled",
        ApprovalAnswer::Expired => "expired",
        ApprovalAnswer::Unavailable => "unavailable",
    }
}
