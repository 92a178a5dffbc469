//! The agent loop and its batch scheduler (DESIGN §5): the calls of one assistant message
//! are prepared one at a time in model order, started as soon as their concurrency allows,
//! and committed strictly in model order — with an honest outcome for every call whatever
//! happens; the loop asks the model, runs its batches and feeds the results back.
//!
//! Depends on `toolrail-tools-core` (the single-call pipeline it drives) and
//! `toolrail-session-log`. Model clients and scripted models implement [`ModelClient`].
//!
//! # Example
//!
//! One turn with a model that asks for one tool call, reads its result and ends the turn.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::{Value, json};
//! use toolrail_agent_loop::{
//!     AgentLoop, LoopConfig, ModelClient, ModelError, ModelRequest, ModelResponse, Scheduler,
//!     SchedulerConfig,
//! };
//! use toolrail_session_log::{
//!     BoxFuture, CallId, ContentBlock, ConversationItem, MemorySink,
//!     event::{AssistantBlock, AssistantMessage, StopReason, TurnEndKind},
//! };
//! use toolrail_tools_core::CallArgs;
//! use toolrail_tools_core::{
//!     CancellationToken, Pipeline, RegistryBuilder, Tool, ToolContext, ToolOutput, ToolResult,
//!     ToolSpec,
//! };
//!
//! /// Says its `say` argument back.
//! struct Echo(ToolSpec);
//!
//! impl Tool for Echo {
//!     fn spec(&self) -> &ToolSpec {
//!         &self.0
//!     }
//!
//!     fn execute<'a>(&'a self, _: &'a ToolContext, args: &'a CallArgs) -> BoxFuture<'a, ToolResult> {
//!         let said = args["say"].as_str().unwrap_or_default().to_owned();
//!         Box::pin(async move { Ok(ToolOutput::text(said)) })
//!     }
//! }
//!
//! /// Asks for `echo` first; once it has the result, answers with its text.
//! struct OneCall;
//!
//! impl ModelClient for OneCall {
//!     fn complete<'a>(
//!         &'a self,
//!         request: &'a ModelRequest,
//!         _cancel: &'a CancellationToken,
//!     ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
//!         let message = match request.messages.last() {
//!             Some(ConversationItem::ToolResult { record, .. }) => AssistantMessage {
//!                 blocks: vec![AssistantBlock::Text { text: record.text() }],
//!                 stop_reason: StopReason::EndTurn,
//!             },
//!             _ => AssistantMessage {
//!                 blocks: vec![AssistantBlock::ToolCall {
//!                     call_id: CallId::from("c1"),
//!                     name: "echo".to_owned(),
//!                     arguments_raw: r#"{"say":"hello"}"#.to_owned(),
//!                 }],
//!                 stop_reason: StopReason::ToolCalls,
//!             },
//!         };
//!         Box::pin(async move {
//!             Ok(ModelResponse { message, usage: None, response_id: None, response_model: None })
//!         })
//!     }
//! }
//!
//! let echo = Echo(ToolSpec::builder("echo", "Says it back.", json!({"type": "object"})).build());
//! let (registry, _warnings) = RegistryBuilder::new().builtin(echo).build()?;
//! let log = Arc::new(MemorySink::new());
//! let pipeline = Arc::new(Pipeline::builder(log.clone()).build());
//! let scheduler = Scheduler::new(pipeline, SchedulerConfig::default());
//! let config = LoopConfig::default();
//! let mut agent = AgentLoop::new(registry, scheduler, log.clone(), Arc::new(OneCall), config);
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let user = vec![ContentBlock::text("say hello")];
//! let ended = agent.run_turn(user, CancellationToken::new(), None).await?;
//! assert_eq!(ended, TurnEndKind::Completed);
//! let answer = AssistantBlock::Text { text: "hello".to_owned() };
//! assert!(matches!(
//!     agent.conversation().last(),
//!     Some(ConversationItem::Assistant(message)) if message.blocks == [answer]
//! ));
//! // Two steps, every fact logged: the call and its result, then the answer.
//! assert_eq!(log.kinds(), [
//!     "turn/start",
//!     "step/start", "assistant/message", "tool/call", "tool/start", "tool/result", "step/end",
//!     "step/start", "assistant/message", "step/end",
//!     "turn/end",
//! ]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod admission;
mod agent;
mod batch;
mod model;
mod scheduler;
mod scripted;
mod tool_search;
mod window;

pub use agent::{AgentLoop, LoopConfig, LoopError, PresentedTools, Steering, ToolPresentation};
pub use model::{
    DeltaSink, ModelClient, ModelDelta, ModelError, ModelFailure, ModelRequest, ModelResponse,
    NoDeltas, ToolDefinition, deltas_of,
};
pub use scheduler::{
    BatchOutcome, DEFAULT_MAX_PARALLEL, Live, LiveEvent, LiveSink, Scheduler, SchedulerConfig,
    SchedulerConfigError,
};
pub use scripted::ScriptedModel;
pub use tool_search::{TOOL_SEARCH, ToolSearch, ToolSearchArgs};
