//! The agent loop and its batch scheduler (DESIGN §5): the calls of one assistant message
//! are prepared one at a time in model order, started as soon as their concurrency allows,
//! and committed strictly in model order — with an honest outcome for every call whatever
//! happens; the loop asks the model, runs its batches and feeds the results back.
//!
//! Depends on `toolrail-tools-core` (the single-call pipeline it drives) and
//! `toolrail-session-log`. Model clients and scripted models implement [`ModelClient`].

mod agent;
mod model;
mod scheduler;
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
pub use tool_search::{ToolSearch, ToolSearchArgs};
