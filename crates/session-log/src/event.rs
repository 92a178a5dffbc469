//! The event envelope and every event kind of a session log (DESIGN §6).
//!
//! On disk an event is `{"seq":N,"ts":"…","kind":"tool/result","turn":T,"step":S,
//! "call_id":"c1","data":{…}}`. The kind strings are part of the format and never change;
//! an unknown kind (written by a newer version) is kept as [`EventData::Unknown`] so readers
//! can skip it without losing it.

use std::sync::Arc;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::ids::{CallId, SessionId, StepId, TurnId};
use crate::result::{ToolResultRecord, ToolSource, is_false};
use crate::time::Timestamp;
use crate::trace::TraceRef;

/// The version of the event vocabulary written in `session/start`.
pub const FORMAT_VERSION: u32 = 1;

/// One line of a session log.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Position in the session, from 1, without gaps.
    pub seq: u64,
    /// When the event was appended (written as RFC 3339, UTC).
    pub ts: Timestamp,
    /// The user turn the event belongs to (absent for `session/start`).
    pub turn: Option<TurnId>,
    /// The model request inside the turn.
    pub step: Option<StepId>,
    /// The tool call the event is about.
    pub call_id: Option<CallId>,
    /// The kind and its data.
    pub data: EventData,
}

/// A known kind whose `data` does not have the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("event kind `{kind}` has malformed data: {source}")]
pub struct EventDecodeError {
    /// The kind named by the line.
    pub kind: String,
    /// What serde found wrong.
    #[source]
    pub source: serde_json::Error,
}

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident($payload:ty) = $kind:literal,)*) => {
        /// The kind of an event together with its data.
        #[derive(Clone, Debug, PartialEq)]
        pub enum EventData {
            $($(#[$doc])* $variant($payload),)*
            /// A kind this version does not know; kept verbatim and ignored by derivations.
            Unknown(UnknownEvent),
        }

        impl EventData {
            /// Every kind string this version knows, in declaration order.
            pub const KNOWN_KINDS: &'static [&'static str] = &[$($kind,)*];

            /// The kind string written in the envelope.
            pub fn kind(&self) -> &str {
                match self {
                    $(Self::$variant(_) => $kind,)*
                    Self::Unknown(unknown) => &unknown.kind,
                }
            }

            /// The kind string of a known kind, `None` for [`EventData::Unknown`].
            pub fn known_kind(&self) -> Option<&'static str> {
                match self {
                    $(Self::$variant(_) => Some($kind),)*
                    Self::Unknown(_) => None,
                }
            }

            /// Decodes `data` of the given kind from any deserializer, straight into its
            /// typed payload (replay's hot path: no intermediate tree, no second scan).
            fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, data: D) -> Result<Self, D::Error> {
                match kind {
                    $($kind => <$payload>::deserialize(data).map(Self::$variant).map_err(|error| {
                        D::Error::custom(format_args!("event kind `{kind}` has malformed data: {error}"))
                    }),)*
                    _ => Value::deserialize(data).map(|data| Self::Unknown(UnknownEvent { kind: kind.to_owned(), data })),
                }
            }

            /// Decodes `data` for the given kind; unknown kinds are kept as they are.
            pub fn from_parts(kind: &str, data: Value) -> Result<Self, EventDecodeError> {
                match kind {
                    $($kind => serde_json::from_value(data)
                        .map(Self::$variant)
                        .map_err(|source| EventDecodeError { kind: kind.to_owned(), source }),)*
                    _ => Ok(Self::Unknown(UnknownEvent { kind: kind.to_owned(), data })),
                }
            }
        }

        impl Serialize for DataRef<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self.0 {
                    $(EventData::$variant(payload) => payload.serialize(serializer),)*
                    EventData::Unknown(unknown) => unknown.data.serialize(serializer),
                }
            }
        }
    };
}

/// An event of a kind this version does not know. Only decoding makes one (through
/// [`EventData::from_parts`]), so its kind is never one of the known kinds and it always
/// reads back as it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct UnknownEvent {
    kind: String,
    data: Value,
}

impl UnknownEvent {
    /// The kind string as the line wrote it.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The line's `data`, verbatim (`null` when the line had none).
    pub fn data(&self) -> &Value {
        &self.data
    }
}

/// Serializes only the payload of an event, for the envelope's `data` field.
struct DataRef<'a>(&'a EventData);

event_kinds! {
    /// The first event of a session: format version and the initial tool set.
    SessionStart(SessionStart) = "session/start",
    /// A user turn begins.
    TurnStart(TurnStart) = "turn/start",
    /// A model request begins.
    StepStart(StepStart) = "step/start",
    /// The complete assistant message, with its tool calls and stop reason.
    AssistantMessage(AssistantMessage) = "assistant/message",
    /// Stage 1: a call recorded before anything else happens to it.
    ToolCall(ToolCall) = "tool/call",
    /// A pre-execute hook rewrote the arguments.
    ArgsRewritten(ArgsRewritten) = "tool/args-rewritten",
    /// An approval was requested.
    ApprovalAsked(ApprovalAsked) = "approval/asked",
    /// An approval was answered (or could not be).
    ApprovalDecided(ApprovalDecided) = "approval/decided",
    /// Stage 6: the body is about to run.
    ToolStart(ToolStart) = "tool/start",
    /// A code-mode program called a tool.
    CodeDispatchStart(CodeDispatchStart) = "tool/code-dispatch-start",
    /// A code-mode sub-call settled; its result is kept for replay.
    CodeDispatch(Box<CodeDispatch>) = "tool/code-dispatch",
    /// Stage 10: the committed result.
    ToolResult(Arc<ToolResultRecord>) = "tool/result",
    /// A message a hook added to the conversation.
    ContextMessage(ContextMessage) = "context/message",
    /// The todo list was replaced.
    TodoWrite(TodoWrite) = "todo/write",
    /// A question was put to the user.
    QuestionAsked(QuestionAsked) = "question/asked",
    /// A question reached a final state.
    QuestionAnswered(QuestionAnswered) = "question/answered",
    /// A file's version was observed (read-before-edit).
    FsObserved(FsObserved) = "fs/observed",
    /// A file is about to be written.
    FsWriteIntent(FsWriteIntent) = "fs/write-intent",
    /// Plan mode was entered or left.
    PlanMode(PlanMode) = "plan/mode",
    /// Deferred tools were loaded and join from the next request.
    ToolsLoaded(ToolsLoaded) = "tools/loaded",
    /// A background shell was started.
    ShellStarted(ShellStarted) = "shell/started",
    /// A background shell ended, and how.
    ShellExited(ShellExited) = "shell/exited",
    /// An MCP tool call's request was sent to its server.
    McpRequest(McpRequest) = "mcp/request",
    /// A model request and its batch are done.
    StepEnd(StepEnd) = "step/end",
    /// A user turn ended, and how.
    TurnEnd(TurnEnd) = "turn/end",
    /// Recovery appended synthetic results or repaired the file.
    RecoveryRepaired(RecoveryRepaired) = "recovery/repaired",
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut envelope = serializer.serialize_struct("Event", 7)?;
        envelope.serialize_field("seq", &self.seq)?;
        envelope.serialize_field("ts", &self.ts)?;
        envelope.serialize_field("kind", self.data.kind())?;
        if let Some(turn) = &self.turn {
            envelope.serialize_field("turn", turn)?;
        }
        if let Some(step) = &self.step {
            envelope.serialize_field("step", step)?;
        }
        if let Some(call_id) = &self.call_id {
            envelope.serialize_field("call_id", call_id)?;
        }
        envelope.serialize_field("data", &DataRef(&self.data))?;
        envelope.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EventVisitor)
    }
}

/// The envelope's fields; anything else is ignored (a newer writer may add fields).
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    Seq,
    Ts,
    Kind,
    Turn,
    Step,
    CallId,
    Data,
    #[serde(other)]
    Other,
}

/// Reads an envelope. Our writer puts `kind` before `data`, so `data` is decoded straight
/// into its typed payload; a line from elsewhere with `data` first is buffered and decoded
/// after.
struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a session event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let (mut seq, mut ts, mut kind) = (None, None, None::<KindName>);
        let (mut turn, mut step, mut call_id) = (None, None, None);
        let (mut data, mut early_data) = (None, None::<Value>);
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Seq => seq = Some(map.next_value::<u64>()?),
                Field::Ts => ts = Some(map.next_value::<Timestamp>()?),
                Field::Kind => kind = Some(map.next_value::<KindName>()?),
                Field::Turn => turn = map.next_value::<Option<TurnId>>()?,
                Field::Step => step = map.next_value::<Option<StepId>>()?,
                Field::CallId => call_id = map.next_value::<Option<CallId>>()?,
                Field::Data => match &kind {
                    Some(kind) => {
                        data = Some(map.next_value_seed(DataSeed {
                            kind: kind.as_str(),
                        })?)
                    }
                    None => early_data = Some(map.next_value::<Value>()?),
                },
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kind = kind.ok_or_else(|| A::Error::missing_field("kind"))?;
        let data = match data {
            Some(data) => data,
            None => EventData::from_parts(kind.as_str(), early_data.unwrap_or(Value::Null))
                .map_err(A::Error::custom)?,
        };
        Ok(Event {
            seq: seq.ok_or_else(|| A::Error::missing_field("seq"))?,
            ts: ts.ok_or_else(|| A::Error::missing_field("ts"))?,
            turn,
            step,
            call_id,
            data,
        })
    }
}

/// A kind string as read: known kinds without an allocation.
enum KindName {
    Known(&'static str),
    Other(String),
}

impl KindName {
    fn as_str(&self) -> &str {
        match self {
            Self::Known(kind) => kind,
            Self::Other(kind) => kind,
        }
    }
}

impl<'de> Deserialize<'de> for KindName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KindVisitor;
        impl Visitor<'_> for KindVisitor {
            type Value = KindName;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("an event kind")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<KindName, E> {
                Ok(
                    match EventData::KNOWN_KINDS.iter().find(|kind| **kind == text) {
                        Some(kind) => KindName::Known(kind),
                        None => KindName::Other(text.to_owned()),
                    },
                )
            }
        }
        deserializer.deserialize_str(KindVisitor)
    }
}

/// Decodes `data` for a kind already read.
struct DataSeed<'k> {
    kind: &'k str,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = EventData;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<EventData, D::Error> {
        EventData::deserialize_kind(self.kind, deserializer)
    }
}

/// One tool of a tool set, as recorded in `session/start`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolManifestEntry {
    /// The name the model calls the tool by, unique in the tool set.
    pub name: String,
    /// Where the tool came from, written `builtin`, `runtime`, `extension(NAME)` or
    /// `mcp(SERVER)`.
    pub source: ToolSource,
    /// The tool's own version, also recorded with each of its calls.
    pub version: String,
    /// The tool declares it does not change the world. Written only when `true`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub read_only: bool,
    /// Running a call twice has the effect of running it once: recovery tells the model an
    /// interrupted call of it is safe to retry. Written only when `true`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub idempotent: bool,
}

/// Data of `session/start`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionStart {
    /// The vocabulary version the session is written in; the stores write
    /// [`FORMAT_VERSION`] whatever the caller put here, and refuse to open a newer one.
    pub format_version: u32,
    /// The id the session is stored and resumed under.
    pub session_id: SessionId,
    /// The tools offered to the model when the session was created.
    pub tools: Vec<ToolManifestEntry>,
    /// Free-form JSON kept with the session: the runtime records its version and the
    /// session's configuration here (MCP server environments blanked) and a resume reads it
    /// back. A present `null` stays `Some(Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::result::present_value"
    )]
    pub meta: Option<Value>,
}

/// Data of `turn/start`: the user's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The message's blocks, as the model will read them.
    pub user: Vec<ContentBlock>,
    /// The turn's `invoke_agent` span, when the session exports telemetry (absent in older
    /// logs and in sessions that do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRef>,
    /// The span of the client that asked for the turn, as its request's W3C trace context
    /// named it (`params._meta.traceparent` of an MCP `tools/call` to `toolrail mcp serve`):
    /// the turn's trace continues the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<TraceRef>,
    /// The turn is a client's call (`toolrail mcp serve`): its one step's message is the
    /// client's, and no model is asked. Absent (false) for a model's turn and in older logs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client: bool,
}

/// Data of `step/start`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepStart {
    /// The model the request went to, when the writer named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Why the model stopped writing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer (or hit a stop sequence).
    EndTurn,
    /// The model stopped to have its tool calls run.
    ToolCalls,
    /// The output-length limit cut the message: its calls are never executed.
    Length,
    /// The provider's content filter stopped the message.
    ContentFilter,
    /// The model declined to answer.
    Refusal,
    /// A reason this version has no variant for, as the provider wrote it.
    Other(String),
}

/// One block of an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AssistantBlock {
    /// Text the model wrote as its answer.
    Text {
        /// Shown to the user, and sent back to the model with the conversation.
        text: String,
    },
    /// The model's reasoning: logged and shown, never sent back to the model.
    Thinking {
        /// The reasoning text the provider returned.
        text: String,
    },
    /// A request to run a tool.
    ToolCall {
        /// The id the model gave the call. It may repeat within a message: readers take
        /// calls from [`AssistantMessage::tool_calls`], which makes them unique.
        call_id: CallId,
        /// The tool's name as the model wrote it, whether or not the tool set has it.
        name: String,
        /// The argument text exactly as the model sent it, not necessarily JSON.
        arguments_raw: String,
    },
}

/// Data of `assistant/message`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Text, reasoning and tool calls, in the order the model wrote them.
    pub blocks: Vec<AssistantBlock>,
    /// Why the model stopped; [`StopReason::Length`] means none of its calls runs.
    pub stop_reason: StopReason,
}

impl AssistantMessage {
    /// The message's text blocks joined, without its reasoning and tool calls.
    pub fn text(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|block| match block {
                AssistantBlock::Text { text } => Some(text.as_str()),
                AssistantBlock::Thinking { .. } | AssistantBlock::ToolCall { .. } => None,
            })
            .collect()
    }
}

/// Data of `tool/call`. `arguments_raw` is exactly what the model sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Position of the call among its message's calls, from 0 (for a code-mode sub-call,
    /// among its program's calls, in submission order).
    pub index: u32,
    /// The tool's name as the model sent it, whether or not the tool set has it.
    pub name: String,
    /// The argument text, unparsed (an empty string is read as `{}`).
    pub arguments_raw: String,
    /// Absent when the name is not in the tool set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ToolSource>,
    /// The tool's version; absent when the name is not in the tool set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Arc<str>>,
    /// The call's `execute_tool` span, when the session exports telemetry (absent in older
    /// logs and in sessions that do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRef>,
}

/// Data of `tool/args-rewritten`: what the model asked for and what will run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgsRewritten {
    /// The arguments as parsed from the model's text.
    pub original: Value,
    /// The arguments the call runs with, validated again against the input schema.
    pub effective: Value,
    /// The name of the pre-execute hook that rewrote them.
    pub by: String,
    /// Why the hook rewrote them, in its own words.
    pub reason: String,
}

/// Data of `approval/asked`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAsked {
    /// Why the call needs approval, as the hook that asked put it.
    pub reason: String,
    /// The effective arguments the approver sees (shared with the call: asking copies none).
    pub arguments: Arc<Value>,
    /// The key an "approve for session" answer would cover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// When an unanswered question stops waiting and the call is `APPROVAL_EXPIRED` (the
    /// pipeline's approval timeout from when it was first asked); `None`: it waits as long
    /// as the approver takes. Kept so a session reopened after a restart asks again only
    /// until this moment, never longer (DESIGN §6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

/// The approver's answer, as the approval service gives it and as the log records it (one
/// type: what was answered is what is written). Only the two allowed answers let a call go
/// on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// This call may run.
    AllowedOnce,
    /// This call may run, and so may later calls of the session under the same key. Asked
    /// without a `session_key`, such an answer is logged as [`ApprovalAnswer::AllowedOnce`].
    AllowedForSession {
        /// The session key the answer covers (the asked `session_key`).
        key: String,
    },
    /// The approver refused the call.
    Rejected {
        /// Why, when the approver said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The question was withdrawn before an answer, e.g. because the batch was cancelled.
    Cancelled,
    /// No answer came in time.
    Expired,
    /// No one could be asked: no approval service, none listening, or it failed.
    Unavailable,
}

/// Data of `approval/decided`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The answer, written flat in `data`: `{"answer":"rejected","reason":…,"waited_us":…}`.
    #[serde(flatten)]
    pub answer: ApprovalAnswer,
    /// Microseconds from asking to the answer.
    pub waited_us: u64,
    /// Whether the approver gave this answer or toolrail closed the question without one;
    /// written only for [`DecidedBy::Toolrail`], so a log written before it was recorded
    /// reads every answer as the approver's.
    #[serde(default, skip_serializing_if = "DecidedBy::is_approver")]
    pub by: DecidedBy,
}

/// Who decided an approval: what tells a scripted approver's answers already given (a
/// resumed scenario goes on with the next one) from questions nobody answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The approval service answered (a person, a client, a script): its answer is logged,
    /// whichever it is — an approver may answer `expired` or `cancelled` itself.
    #[default]
    Approver,
    /// toolrail closed the question without the approver's answer: the approval timeout,
    /// a cancelled batch, no approval service (or one that panicked), or a restart that
    /// found the question past its deadline.
    Toolrail,
}

impl DecidedBy {
    /// Whether the approval service gave the answer.
    pub fn is_approver(&self) -> bool {
        matches!(self, Self::Approver)
    }
}

/// Data of `tool/start`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolStart {
    /// The deadline the call runs under, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Data of `tool/code-dispatch-start` (the envelope's `call_id` is the sub-call's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodeDispatchStart {
    /// The `run_code` call whose program made the sub-call.
    pub parent_call_id: CallId,
    /// The tool the program called.
    pub name: String,
    /// The arguments the program passed, parsed; text that is not JSON is kept as a JSON
    /// string.
    pub arguments: Value,
}

/// Data of `tool/code-dispatch`: the sub-call's result, so replay can rebuild the program's
/// intermediate values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodeDispatch {
    /// The `run_code` call whose program made the sub-call.
    pub parent_call_id: CallId,
    /// The tool the program called.
    pub name: String,
    /// The sub-call's committed result, `value` included.
    pub result: ToolResultRecord,
}

/// Data of `context/message`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextMessage {
    /// The hook that added it.
    pub source: String,
    /// What the model reads, after every result of the batch.
    pub content: Vec<ContentBlock>,
}

/// The state of a todo item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started yet.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

impl TodoStatus {
    /// The stored text: `pending`, `in_progress`, `completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        }
    }
}

/// One todo item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TodoItem {
    /// The task, in the model's words.
    pub content: String,
    /// Where the task stands.
    pub status: TodoStatus,
}

/// Data of `todo/write`: the whole new list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TodoWrite {
    /// Every item, in the model's order; the previous list is gone.
    pub items: Vec<TodoItem>,
}

/// Data of `question/asked`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionAsked {
    /// The model's name for the question (`db`), unique within its call; the
    /// `question/answered` that settles it carries the same.
    pub question_id: String,
    /// The question as put to the user.
    pub question: String,
    /// The choices offered; empty for a free answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Several options may be chosen.
    #[serde(default, skip_serializing_if = "is_false")]
    pub multi_select: bool,
    /// The digest of the workspace's tracked files when the question was asked: on resume a
    /// question whose workspace changed is withdrawn instead of asked again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_digest: Option<String>,
}

/// The final state of a question. Expiry never answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionState {
    /// The user answered.
    Answered,
    /// Withdrawn unanswered: the batch was cancelled, or on resume the question was not
    /// asked again.
    Cancelled,
    /// No answer came in time.
    Expired,
}

/// Data of `question/answered`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionAnswered {
    /// The `question_id` of the `question/asked` this settles.
    pub question_id: String,
    /// How the question ended.
    pub state: QuestionState,
    /// The user's answer; present only when `state` is `answered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// Data of `fs/observed`: the version of a file a read saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FsObserved {
    /// The file, symlinks resolved: the key the fs tools keep versions under.
    pub path: String,
    /// The version seen: a digest of the content (`blake3:<hex>` from the fs tools).
    pub digest: String,
}

/// Data of `fs/write-intent`, appended before a write so recovery can probe it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FsWriteIntent {
    /// The file about to be written, symlinks resolved.
    pub path: String,
    /// The digest of its content now; absent when the file does not exist yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The digest of the content the write puts there. Recovery compares the file with
    /// this and with `before` to tell whether the write happened.
    pub after: String,
}

/// Data of `plan/mode`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanMode {
    /// `true` when plan mode was entered, `false` when it was left.
    pub active: bool,
}

/// Data of `tools/loaded`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsLoaded {
    /// The deferred tools newly loaded; each is offered from the next model request.
    pub names: Vec<String>,
}

/// Data of `shell/started`: a background shell began (`bash` with `background`, or a
/// foreground command moved to the background).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellStarted {
    /// The shell's id in the session (`sh1`, `sh2`, …), which `shell_output`,
    /// `shell_write` and `shell_kill` name.
    pub id: String,
    /// The command line, run by `bash -c`.
    pub command: String,
    /// The sandbox mode it runs in (`read-only`, `workspace-write`, `full-access`).
    pub mode: String,
    /// Whether it runs on a pseudo-terminal.
    #[serde(default)]
    pub tty: bool,
    /// The PID namespace its processes live in (`pid:[4026532…]`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<String>,
    /// The file its whole output is written to, as it arrives.
    pub output: String,
}

/// Data of `mcp/request`: an MCP tool call's request went to its server, under this
/// JSON-RPC id. It joins the session's log (and trace) with the server's: the id is what
/// the server's own log names the request by, and `trace` is the span the server was told
/// of as its caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpRequest {
    /// The server's name in the MCP configuration (`mcpServers`).
    pub server: String,
    /// The JSON-RPC method (`tools/call`).
    pub method: String,
    /// The tool's name on the server.
    pub tool: String,
    /// The request's JSON-RPC id as sent (a number is written as its digits).
    pub request_id: String,
    /// The protocol revision the connection negotiated (`2025-11-25`, `2026-07-28`).
    pub protocol: String,
    /// The `tools/call` client span, when the session is traced: the server received it as
    /// `params._meta.traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRef>,
}

/// How a background shell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellEnd {
    /// Its command ended by itself.
    Exited,
    /// `shell_kill` stopped it.
    Killed,
    /// It ran past the session's lifetime limit for shells and was stopped.
    LifetimeEnded,
    /// The runtime that ran it ended (closed, dropped or killed) while it ran: its
    /// processes ended with it.
    EndedWithRuntime,
    /// Its sandbox could not be made: the command never ran.
    NeverRan,
}

impl ShellEnd {
    /// The name as stored (`ended_with_runtime`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exited => "exited",
            Self::Killed => "killed",
            Self::LifetimeEnded => "lifetime_ended",
            Self::EndedWithRuntime => "ended_with_runtime",
            Self::NeverRan => "never_ran",
        }
    }
}

/// Data of `shell/exited`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellExited {
    /// The shell's id.
    pub id: String,
    /// How it ended.
    pub end: ShellEnd,
    /// Its exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// The signal that ended it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    /// The file holding its whole output.
    pub output: String,
    /// Bytes it wrote in all.
    pub output_bytes: u64,
}

/// Data of `step/end`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    /// The request's token usage, in the shape the provider reported it. A present `null`
    /// stays `Some(Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::result::present_value"
    )]
    pub usage: Option<Value>,
    /// The server's id of the answer (OpenAI's `chatcmpl-…`, Anthropic's `msg_…`), when it
    /// sent one; what a trace viewer and the provider's own logs both know the answer by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The model that answered, as the server named it (it may differ from the model asked
    /// for: a dated version, a routed one), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
}

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEndKind {
    /// The model answered without calls, or a tool concluded the turn.
    Completed,
    /// Cancelled, while the model answered or during a batch.
    Aborted,
    /// The model request or the scheduler failed; recovery answers any call the failure
    /// left without a result.
    Error,
    /// The session stopped inside the turn; recovery wrote this end.
    Interrupted,
    /// The step limit was reached with the model still calling tools.
    MaxSteps,
    /// The output-length limit cut the model's message; its calls got `TRUNCATED_CALL`.
    Truncated,
}

/// Data of `turn/end`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// How the turn ended, written `completed`, `max_steps`, ….
    pub kind: TurnEndKind,
    /// Why, for people; absent when the turn simply completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Data of `recovery/repaired`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoveryRepaired {
    /// Calls that received a synthetic result, in call order.
    pub calls: Vec<CallId>,
    /// Bytes of a torn last line that were cut off.
    #[serde(default)]
    pub torn_bytes_dropped: u64,
    /// What recovery did, for people: each repaired call with its outcome
    /// (`c2: TOOL_NOT_STARTED`).
    pub note: String,
}
