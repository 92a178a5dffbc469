//! The vocabulary of facts every other toolrail layer speaks.
//!
//! This is the bottom layer: it depends on no other toolrail crate. It defines the ids of a
//! session, the content blocks a model sees, the result record of a tool call, the event
//! envelope and every event kind of a session log (DESIGN §6), and the [`EventSink`] trait
//! through which the pipeline turns calls into recorded facts. Durable stores, replay and
//! recovery build on these types.
//!
//! # Example
//!
//! A session kept in a JSONL file: created, appended to, reopened after the process that
//! wrote it stopped in the middle of a turn, and repaired by [`recover`].
//!
//! ```
//! use toolrail_session_log::{
//!     AppendUrgency, ContentBlock, Durability, EventData, EventDraft, EventSink, JsonlStore,
//!     SessionId, SessionStart, SessionStore, Timestamp, TurnId, TurnStart, recover,
//! };
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store = JsonlStore::new(dir.path(), Durability::Strict)?;
//! let id = SessionId::new("demo");
//! let start = SessionStart {
//!     format_version: 0, // the store writes its own
//!     session_id: id.clone(),
//!     tools: vec![],
//!     meta: None,
//! };
//! let log = store.create(start)?;
//! let user = TurnStart { user: vec![ContentBlock::text("hello")] };
//! let draft = EventDraft {
//!     ts: Timestamp::now(),
//!     turn: Some(TurnId(1)),
//!     step: None,
//!     call_id: None,
//!     data: EventData::TurnStart(user),
//! };
//! assert_eq!(log.append(draft, AppendUrgency::Durable).await?, 2);
//! drop(log); // the process stops before the turn ends
//!
//! let opened = store.open(&id)?;
//! let kinds: Vec<_> = opened.events.iter().map(|event| event.data.kind()).collect();
//! assert_eq!(kinds, ["session/start", "turn/start"]);
//! let report = recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log).await?;
//! assert_eq!(report.closed_turn, Some(TurnId(1)));
//! let events = store.read(&id)?.events; // read without taking the lock
//! assert_eq!(events.last().map(|event| event.data.kind()), Some("turn/end"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod content;
pub mod details;
mod digest;
mod elided;
mod event;
mod ids;
mod message_calls;
pub mod outcome;
mod recovery;
mod replay;
mod result;
mod sink;
mod store;
mod time;
mod tool_event;

pub use content::ContentBlock;
pub use digest::{DigestBuilder, digest_of};
pub use elided::{ElidedBlock, model_text_len};
pub use event::{
    ApprovalAnswer, ApprovalAsked, ApprovalDecided, ArgsRewritten, AssistantBlock,
    AssistantMessage, CodeDispatch, CodeDispatchStart, ContextMessage, Event, EventData,
    EventDecodeError, FORMAT_VERSION, FsObserved, FsWriteIntent, PlanMode, QuestionAnswered,
    QuestionAsked, QuestionState, RecoveryRepaired, SessionStart, StepEnd, StepStart, StopReason,
    TodoItem, TodoStatus, TodoWrite, ToolCall, ToolManifestEntry, ToolStart, ToolsLoaded, TurnEnd,
    TurnEndKind, TurnStart, UnknownEvent,
};
pub use ids::{CallId, SessionId, StepId, TurnId};
pub use message_calls::{MessageCall, repeated_call_id_refusal};
pub use recovery::{EffectProbe, InterruptedCall, ProbeVerdict, RecoveryReport, recover};
pub use replay::{CallRecord, ConversationItem, Dispatch, call_records, conversation};
pub use result::{
    BlobRef, CustomCode, Effect, ErrorCode, InvalidErrorCode, Timing, ToolErrorInfo,
    ToolResultRecord, ToolSource, json_len,
};
pub use sink::{
    AppendFuture, AppendUrgency, BoxFuture, EventDraft, EventSink, MemorySink, SinkError,
};
pub use store::jsonl::{DEFAULT_LOCK_WAIT, JsonlLog, JsonlStore, LockHolder, SessionRead};
#[cfg(feature = "postgres")]
pub use store::postgres::{Claimed, Lease, PostgresLog, PostgresStore, SessionSummary};
#[cfg(feature = "sqlite")]
pub use store::sqlite::{SqliteLog, SqliteStore};
pub use store::{
    DEFAULT_BLOB_CAP, Durability, Opened, SessionLog, SessionStore, StoreError, StoreLog,
    error_chain,
};
pub use time::{InvalidTimestamp, Timestamp, format_rfc3339_utc};
pub use tool_event::ToolEvent;
