//! The OpenTelemetry GenAI names toolrail writes, and the one mapping from its records (a
//! tool call and its spec, a result record and its code, a step's usage, the model's
//! settings) to span names and attributes. The live exporter (`spans.rs`) uses it as calls
//! happen; an exporter driven by a recorded log uses the same functions, so both write the
//! same trace. docs/observability.md lists every name here.

use std::time::{Duration, SystemTime};

use opentelemetry::{Array, KeyValue, StringValue, Value};
use serde_json::Value as Json;
use toolrail_session_log::event::{StepEnd, StopReason, ToolCall, TurnEndKind};
use toolrail_session_log::{ContentBlock, ErrorCode, Timing, ToolResultRecord, ToolSource};

/// The agent's name in `invoke_agent {name}` and `gen_ai.agent.name`.
pub const AGENT_NAME: &str = "toolrail";

/// The instrumentation scope spans and metrics are reported under.
pub const SCOPE: &str = "toolrail";

/// Attribute names: the GenAI conventions' (development status), and toolrail's own under
/// `toolrail.*`.
pub mod attr {
    /// `invoke_agent`, `chat` or `execute_tool`.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The model provider: `openai`, `anthropic`.
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// The provider under the conventions up to v1.36; written beside
    /// [`PROVIDER_NAME`] unless `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`.
    pub const SYSTEM: &str = "gen_ai.system";
    /// The agent's name (`toolrail`).
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// The session's id: one conversation is one session.
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// Sampling temperature, when configured.
    pub const REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
    /// Nucleus sampling, when configured.
    pub const REQUEST_TOP_P: &str = "gen_ai.request.top_p";
    /// The answer's length limit, when configured.
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    /// The server's id of the answer, when it sent one (`step/end`'s `response_id`).
    pub const RESPONSE_ID: &str = "gen_ai.response.id";
    /// The model that answered, as the server named it, when it did (`step/end`'s
    /// `response_model`).
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// Why the model stopped, as a one-element list.
    pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// Prompt tokens, as the server counted them.
    pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Answer tokens, as the server counted them.
    pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// `input` or `output`, on the token-usage histogram.
    pub const TOKEN_TYPE: &str = "gen_ai.token.type";
    /// The tool called, as the model named it.
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// The call's id in the log (a code-mode sub-call's is `<parent>:code:<n>`).
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// `function` (run here) or `extension` (an MCP server's).
    pub const TOOL_TYPE: &str = "gen_ai.tool.type";
    /// The tool's description, as offered to the model.
    pub const TOOL_DESCRIPTION: &str = "gen_ai.tool.description";
    /// The argument text the model sent: only with content capture on.
    pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    /// The result's text as the model reads it: only with content capture on.
    pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
    /// A failed call's stable error code (`POLICY_DENIED`), a failed turn's end.
    pub const ERROR_TYPE: &str = "error.type";
    /// Where the tool came from: `builtin`, `runtime`, `extension(NAME)`, `mcp(SERVER)`.
    pub const TOOL_SOURCE: &str = "toolrail.tool.source";
    /// The result was written by the runtime, not the tool (recovery, a refusal).
    pub const TOOL_SYNTHETIC: &str = "toolrail.tool.synthetic";
    /// The turn's number in the session.
    pub const TURN: &str = "toolrail.turn";
    /// The model request's number in the turn.
    pub const STEP: &str = "toolrail.step";
    /// How the turn ended: `completed`, `aborted`, `error`, `max_steps`, `truncated`.
    pub const TURN_END: &str = "toolrail.turn.end";
    /// The calls of a batch.
    pub const BATCH_CALLS: &str = "toolrail.batch.calls";
    /// Why an approval was asked, in the asking hook's words.
    pub const APPROVAL_REASON: &str = "toolrail.approval.reason";
    /// The answer: `allowed_once`, `allowed_for_session`, `rejected`, `cancelled`,
    /// `expired`, `unavailable`.
    pub const APPROVAL_ANSWER: &str = "toolrail.approval.answer";
    /// Microseconds the approval waited.
    pub const APPROVAL_WAITED_US: &str = "toolrail.approval.waited_us";
    /// The pre-execute hook that rewrote the arguments, or the rule that denied.
    pub const BY: &str = "toolrail.by";
    /// The calls recovery gave a result, by id.
    pub const RECOVERY_CALLS: &str = "toolrail.recovery.calls";
}

/// Span and event names.
pub mod name {
    /// `gen_ai.operation.name` of a turn.
    pub const INVOKE_AGENT: &str = "invoke_agent";
    /// `gen_ai.operation.name` of a model request.
    pub const CHAT: &str = "chat";
    /// `gen_ai.operation.name` of a tool call.
    pub const EXECUTE_TOOL: &str = "execute_tool";
    /// The span over one batch's calls (its parallel calls are siblings under it).
    pub const BATCH: &str = "toolrail.batch";
    /// The span of a recovery that repaired an interrupted session (linked to the
    /// interrupted turn).
    pub const RECOVERY: &str = "toolrail.recovery";
    /// Phase: parse, hooks, approval and guards (`Timing::policy_us`).
    pub const PHASE_POLICY: &str = "toolrail.policy";
    /// Phase: waiting for the approval's answer, inside policy.
    pub const PHASE_APPROVAL: &str = "toolrail.approval_wait";
    /// Phase: prepared, waiting for a slot, a barrier or a claim (`Timing::queued_us`).
    pub const PHASE_QUEUED: &str = "toolrail.queued";
    /// Phase: the execute layers and the body (`Timing::run_us`).
    pub const PHASE_RUN: &str = "toolrail.run";
    /// Phase: settled, waiting for the calls before it to commit (model order).
    pub const PHASE_COMMIT_WAIT: &str = "toolrail.commit_wait";
    /// Event: an approval was asked.
    pub const EVENT_APPROVAL_ASKED: &str = "toolrail.approval.asked";
    /// Event: an approval was answered (or could not be).
    pub const EVENT_APPROVAL_DECIDED: &str = "toolrail.approval.decided";
    /// Event: a pre-execute hook rewrote the arguments.
    pub const EVENT_ARGS_REWRITTEN: &str = "toolrail.args_rewritten";
    /// Event: a rule, a hook or a guard refused the call.
    pub const EVENT_DENIED: &str = "toolrail.denied";
    /// Event: recovery gave interrupted calls a result.
    pub const EVENT_RECOVERY_REPAIRED: &str = "toolrail.recovery.repaired";
}

/// Metric names (histograms).
pub mod metric {
    /// Seconds per model request (`chat`).
    pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
    /// Tokens per model request, by `gen_ai.token.type`.
    pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
    /// Seconds per tool call, from record to commit.
    pub const EXECUTE_TOOL_DURATION: &str = "gen_ai.execute_tool.duration";
}

/// Which version of the GenAI conventions to write (`OTEL_SEMCONV_STABILITY_OPT_IN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Semconv {
    /// The latest experimental names only (`gen_ai_latest_experimental` opted in).
    LatestExperimental,
    /// The latest names, and the ones they replaced beside them (`gen_ai.system`), for
    /// viewers built on v1.36 or earlier.
    WithDeprecated,
}

impl Semconv {
    /// What `OTEL_SEMCONV_STABILITY_OPT_IN` (a comma-separated list) asks for.
    pub fn from_opt_in(value: Option<&str>) -> Self {
        let opted = value.is_some_and(|list| {
            list.split(',')
                .any(|item| item.trim() == "gen_ai_latest_experimental")
        });
        if opted {
            Self::LatestExperimental
        } else {
            Self::WithDeprecated
        }
    }
}

/// Whether argument and result text may be exported (off by default: they can hold
/// secrets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capture {
    /// Names, ids, codes and timings only.
    Off,
    /// Also `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result`.
    Content,
}

/// The model settings a `chat` span names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatSettings {
    /// `openai`, `anthropic`; `None` for a model given in code.
    pub provider: Option<String>,
    /// The model's name; `None` for a model given in code.
    pub model: Option<String>,
    /// Configured temperature.
    pub temperature: Option<f64>,
    /// Configured top-p.
    pub top_p: Option<f64>,
    /// Configured answer length limit.
    pub max_tokens: Option<u32>,
}

/// `invoke_agent toolrail`.
pub fn invoke_agent_span_name() -> String {
    format!("{} {AGENT_NAME}", name::INVOKE_AGENT)
}

/// `chat {model}` (`chat` when the model is not known).
pub fn chat_span_name(settings: &ChatSettings) -> String {
    match &settings.model {
        Some(model) => format!("{} {model}", name::CHAT),
        None => name::CHAT.to_owned(),
    }
}

/// `execute_tool {tool}`.
pub fn execute_tool_span_name(tool: &str) -> String {
    format!("{} {tool}", name::EXECUTE_TOOL)
}

/// The provider attribute(s): `gen_ai.provider.name`, and `gen_ai.system` beside it unless
/// only the latest conventions are asked for.
fn provider(settings: &ChatSettings, semconv: Semconv, into: &mut Vec<KeyValue>) {
    if let Some(provider) = &settings.provider {
        into.push(KeyValue::new(attr::PROVIDER_NAME, provider.clone()));
        if semconv == Semconv::WithDeprecated {
            into.push(KeyValue::new(attr::SYSTEM, provider.clone()));
        }
    }
}

/// A turn's attributes.
pub fn turn_attributes(
    session: &str,
    turn: Option<u32>,
    settings: &ChatSettings,
    semconv: Semconv,
) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new(attr::OPERATION_NAME, name::INVOKE_AGENT),
        KeyValue::new(attr::AGENT_NAME, AGENT_NAME),
        KeyValue::new(attr::CONVERSATION_ID, session.to_owned()),
    ];
    provider(settings, semconv, &mut attributes);
    if let Some(turn) = turn {
        attributes.push(KeyValue::new(attr::TURN, i64::from(turn)));
    }
    attributes
}

/// How a turn ended, and the `error.type` of one that failed.
pub fn turn_end_attributes(kind: TurnEndKind) -> Vec<KeyValue> {
    let end = match kind {
        TurnEndKind::Completed => "completed",
        TurnEndKind::Aborted => "aborted",
        TurnEndKind::Error => "error",
        TurnEndKind::Interrupted => "interrupted",
        TurnEndKind::MaxSteps => "max_steps",
        TurnEndKind::Truncated => "truncated",
    };
    let mut attributes = vec![KeyValue::new(attr::TURN_END, end)];
    if matches!(kind, TurnEndKind::Error | TurnEndKind::Interrupted) {
        attributes.push(KeyValue::new(attr::ERROR_TYPE, end));
    }
    attributes
}

/// A model request's attributes, known when it is sent.
pub fn chat_request_attributes(
    settings: &ChatSettings,
    step: Option<u32>,
    semconv: Semconv,
) -> Vec<KeyValue> {
    let mut attributes = vec![KeyValue::new(attr::OPERATION_NAME, name::CHAT)];
    provider(settings, semconv, &mut attributes);
    if let Some(model) = &settings.model {
        attributes.push(KeyValue::new(attr::REQUEST_MODEL, model.clone()));
    }
    if let Some(temperature) = settings.temperature {
        attributes.push(KeyValue::new(attr::REQUEST_TEMPERATURE, temperature));
    }
    if let Some(top_p) = settings.top_p {
        attributes.push(KeyValue::new(attr::REQUEST_TOP_P, top_p));
    }
    if let Some(max_tokens) = settings.max_tokens {
        attributes.push(KeyValue::new(
            attr::REQUEST_MAX_TOKENS,
            i64::from(max_tokens),
        ));
    }
    if let Some(step) = step {
        attributes.push(KeyValue::new(attr::STEP, i64::from(step)));
    }
    attributes
}

/// The finish reason the conventions expect (the OpenAI spelling most viewers know).
pub fn finish_reason(stop: &StopReason) -> String {
    match stop {
        StopReason::EndTurn => "stop".to_owned(),
        StopReason::ToolCalls => "tool_calls".to_owned(),
        StopReason::Length => "length".to_owned(),
        StopReason::ContentFilter => "content_filter".to_owned(),
        StopReason::Refusal => "refusal".to_owned(),
        StopReason::Other(reason) => reason.clone(),
    }
}

/// `gen_ai.response.finish_reasons` of an answer.
pub fn finish_reasons_attribute(stop: &StopReason) -> KeyValue {
    KeyValue::new(
        attr::RESPONSE_FINISH_REASONS,
        Value::Array(Array::String(vec![StringValue::from(finish_reason(stop))])),
    )
}

/// Input and output tokens of a step's usage, in whichever provider's shape it came.
pub fn tokens(usage: &Json) -> (Option<u64>, Option<u64>) {
    toolrail_presenters::tokens(usage)
}

/// The usage attributes of a step's usage value.
pub fn usage_attributes(usage: &Json) -> Vec<KeyValue> {
    let (input, output) = tokens(usage);
    let count = |tokens: u64| i64::try_from(tokens).unwrap_or(i64::MAX);
    let mut attributes = Vec::new();
    if let Some(input) = input {
        attributes.push(KeyValue::new(attr::USAGE_INPUT_TOKENS, count(input)));
    }
    if let Some(output) = output {
        attributes.push(KeyValue::new(attr::USAGE_OUTPUT_TOKENS, count(output)));
    }
    attributes
}

/// What the server said of its answer, as its `step/end` recorded it: `gen_ai.response.id`
/// and `gen_ai.response.model`, each only when the server sent it.
pub fn response_attributes(step: &StepEnd) -> Vec<KeyValue> {
    [
        (attr::RESPONSE_ID, &step.response_id),
        (attr::RESPONSE_MODEL, &step.response_model),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some(KeyValue::new(key, value.clone()?)))
    .collect()
}

/// `function` for a tool that runs here, `extension` for an MCP server's.
pub fn tool_type(source: Option<&ToolSource>) -> &'static str {
    match source {
        Some(ToolSource::Mcp(_)) => "extension",
        Some(ToolSource::Builtin | ToolSource::Runtime | ToolSource::Extension(_)) | None => {
            "function"
        }
    }
}

/// A call's attributes, known when it is recorded: its `tool/call`, and the description of
/// the tool it resolves to (none for an unknown tool or a log-driven export).
pub fn tool_call_attributes(
    call: &ToolCall,
    call_id: &str,
    description: Option<&str>,
    capture: Capture,
) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new(attr::OPERATION_NAME, name::EXECUTE_TOOL),
        KeyValue::new(attr::TOOL_NAME, call.name.clone()),
        KeyValue::new(attr::TOOL_CALL_ID, call_id.to_owned()),
        KeyValue::new(attr::TOOL_TYPE, tool_type(call.source.as_ref())),
    ];
    if let Some(source) = &call.source {
        attributes.push(KeyValue::new(attr::TOOL_SOURCE, source.to_string()));
    }
    if let Some(description) = description {
        attributes.push(KeyValue::new(
            attr::TOOL_DESCRIPTION,
            description.to_owned(),
        ));
    }
    if capture == Capture::Content {
        attributes.push(KeyValue::new(
            attr::TOOL_CALL_ARGUMENTS,
            call.arguments_raw.clone(),
        ));
    }
    attributes
}

/// A result's attributes: its code when it failed, whether the runtime wrote it, and with
/// content capture its text.
pub fn tool_result_attributes(record: &ToolResultRecord, capture: Capture) -> Vec<KeyValue> {
    let mut attributes = Vec::new();
    if let Some(error) = &record.error {
        attributes.push(KeyValue::new(
            attr::ERROR_TYPE,
            error.code.as_str().to_owned(),
        ));
    }
    if record.synthetic {
        attributes.push(KeyValue::new(attr::TOOL_SYNTHETIC, true));
    }
    if capture == Capture::Content {
        let text: Vec<String> = record
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.clone()),
                ContentBlock::Json { value } => Some(value.to_string()),
                ContentBlock::Image { .. } => None,
            })
            .collect();
        attributes.push(KeyValue::new(attr::TOOL_CALL_RESULT, text.join("\n")));
    }
    attributes
}

/// Whether a failed call was refused by the policy (a rule, a hook, a guard, an approval
/// said no): such a call gets a `toolrail.denied` event.
pub fn is_denial(record: &ToolResultRecord) -> bool {
    record.error.as_ref().is_some_and(|error| {
        matches!(
            error.code,
            ErrorCode::PolicyDenied | ErrorCode::GuardDenied | ErrorCode::ApprovalRejected
        )
    })
}

/// One phase of a call, as a child span of its `execute_tool` span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    /// `toolrail.policy`, `toolrail.queued`, `toolrail.run`, `toolrail.commit_wait`.
    pub name: &'static str,
    /// When it began.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
}

/// The phases the timeline measures, laid out from a call's record time: policy, then
/// queued, then the run (from `started`, the `tool/start`'s time, when known), then the wait
/// for the commit until `committed`. Phases of zero length are left out; a refused call has
/// only its policy.
pub fn phases(
    timing: &Timing,
    recorded: SystemTime,
    started: Option<SystemTime>,
    committed: SystemTime,
) -> Vec<Phase> {
    let micros = Duration::from_micros;
    let mut phases = Vec::with_capacity(4);
    // The record and commit times are the log's, in milliseconds, the timing's micros are
    // exact: a phase is cut at the commit so it never ends after its call — which can leave
    // a phase that took a few microseconds with no length at all. A phase that happened is
    // kept (every call is judged; a started call ran); one that took no time is left out.
    let mut push = |name, start: SystemTime, end: SystemTime, happened: bool| {
        let end = end.min(committed);
        if happened && end >= start {
            phases.push(Phase { name, start, end });
        }
    };
    let policy_end = recorded + micros(timing.policy_us);
    push(name::PHASE_POLICY, recorded, policy_end, true);
    if timing.run_us == 0 && started.is_none() {
        return phases;
    }
    let queued_end = policy_end + micros(timing.queued_us);
    push(
        name::PHASE_QUEUED,
        policy_end,
        queued_end,
        timing.queued_us > 0,
    );
    let run_start = started.unwrap_or(queued_end).max(queued_end);
    let run_end = run_start + micros(timing.run_us);
    push(name::PHASE_RUN, run_start, run_end, true);
    push(
        name::PHASE_COMMIT_WAIT,
        run_end,
        committed,
        committed > run_end,
    );
    phases
}
