//! The vocabulary of facts every other toolrail layer speaks.
//!
//! This is the bottom layer: it depends on no other toolrail crate. It defines the ids of a
//! session, the content blocks a model sees, the result record of a tool call, the event
//! envelope and every event kind of a session log (DESIGN §6), and the [`EventSink`] trait
//! through which the pipeline turns calls into recorded facts; replay and recovery are pure
//! functions of events. The durable stores (JSONL, SQLite, PostgreSQL) are
//! `toolrail-session-store`, one layer up.
//!
//! # Example
//!
//! A session in memory that stopped in the middle of a turn, repaired by [`recover`]: the
//! open turn is closed and the log says what was repaired.
//!
//! ```
//! use toolrail_session_log::{
//!     AppendUrgency, ContentBlock, EventData, EventDraft, EventSink, MemorySink, Timestamp,
//!     TurnId, recover, event::TurnStart,
//! };
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let log = MemorySink::new();
//! let user = TurnStart { user: vec![ContentBlock::text("hello")], trace: None, caller: None, client: false };
//! let draft = EventDraft {
//!     ts: Timestamp::now(),
//!     turn: Some(TurnId(1)),
//!     step: None,
//!     call_id: None,
//!     data: EventData::TurnStart(user),
//! };
//! log.append(draft, AppendUrgency::Durable).await?;
//! // The process stops before the turn ends; the next one repairs the log.
//! let report = recover(&log.events(), 0, &[], &log).await?;
//! assert_eq!(report.closed_turn, Some(TurnId(1)));
//! assert_eq!(log.kinds().last().map(String::as_str), Some("turn/end"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod content;
pub mod details;
pub mod digest;
pub mod elided;
mod error_text;
pub mod event;
mod ids;
pub mod message_calls;
pub mod outcome;
pub mod recovery;
pub mod replay;
mod result;
mod sink;
pub mod time;
mod tool_event;
mod trace;

pub use content::ContentBlock;
pub use error_text::error_chain;
pub use event::{Event, EventData};
pub use ids::{CallId, SessionId, StepId, TurnId};
pub use recovery::recover;
pub use replay::{CallRecord, ConversationItem, call_records, conversation};
pub use result::{
    BlobRef, CustomCode, Effect, ErrorCode, InvalidErrorCode, Timing, ToolErrorInfo,
    ToolResultRecord, ToolSource, json_len,
};
pub use sink::{
    AppendFuture, AppendUrgency, BoxFuture, EventDraft, EventSink, MemorySink, SessionLog, Settle,
    SinkError,
};
pub use time::Timestamp;
pub use tool_event::ToolEvent;
pub use trace::TraceRef;
