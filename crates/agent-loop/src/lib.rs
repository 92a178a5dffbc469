//! The agent loop's batch scheduler (DESIGN §5): the calls of one assistant message are
//! prepared one at a time in model order, started as soon as their concurrency allows, and
//! committed strictly in model order — with an honest outcome for every call whatever
//! happens.
//!
//! Depends on `toolrail-tools-core` (the single-call pipeline it drives) and
//! `toolrail-session-log`. The agent loop, model clients and scripted models build on it.

mod scheduler;

pub use scheduler::{BatchOutcome, LiveEvent, Scheduler, SchedulerConfig};
