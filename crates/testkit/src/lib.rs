//! What toolrail's own tests (and users' conformance tests) drive the runtime with: a
//! scripted model, a `probe` tool configured per call by its arguments, and scenario files
//! (the runtime's, with the probes) that run whole sessions.
//!
//! May depend on every library crate. Only whole-session tests use it (its own, the
//! runtime's, the examples'); a library's tests take the probe from `toolrail-tool-probe`
//! and the scripted model from the agent loop.
//!
//! # Example
//!
//! A scenario: a scripted model asks for two `probe` calls that each need an approval; the
//! scripted approver allows the first and rejects the second. The run checks the scenario's
//! own `expect`, and the markers prove which body ran.
//!
//! ```
//! use toolrail_session_log::event::TurnEndKind;
//! use toolrail_testkit::Scenario;
//!
//! let scenario = Scenario::from_json(
//!     r#"{
//!       "config": {"tools": {"enabled": ["probe"]}, "permissions": {"ask": ["probe"]}},
//!       "approvals": ["allowed_once", "rejected"],
//!       "turns": [{"user": "probe twice", "model": [
//!         {"tool_calls": [
//!           {"id": "c1", "name": "probe", "arguments": "{\"marker\": true}"},
//!           {"id": "c2", "name": "probe", "arguments": "{\"marker\": true}"}
//!         ], "stop_reason": "tool_use"},
//!         {"text": "one ran", "stop_reason": "end_turn"}
//!       ]}],
//!       "expect": {"results": {"c1": "ok", "c2": "APPROVAL_REJECTED"}}
//!     }"#,
//! )?;
//! let folder = tempfile::tempdir()?; // the session's store, workspace and markers
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let report = scenario.run(folder.path()).await?;
//! assert_eq!(report.mismatches, Vec::<String>::new());
//! assert_eq!(report.turn_ends, [TurnEndKind::Completed]);
//! assert!(report.marker_dir.join("c1").exists());
//! assert!(!report.marker_dir.join("c2").exists(), "a rejected call never starts");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod bench;
pub mod fleet;
/// A real PostgreSQL server for a test, and the process table (from `toolrail-test-support`).
pub use toolrail_test_support::{pg, processes};
mod scenario;

pub use scenario::{
    Expectations, ModelStep, RESUME_MESSAGE, RunOptions, SCENARIO_SESSION, Scenario, ScenarioError,
    ScenarioPlace, ScenarioReport, ToolCallSpec, TurnSpec, WorkspaceSpec, probes,
};
/// Scripted approval answers, for crates that may not depend on `interaction` themselves.
pub use toolrail_interaction::ScriptedApprovals;
/// The scripted model scenarios run on.
pub use toolrail_runtime::scenario::ScriptedModel;
pub use toolrail_test_support::rng::SeededRng;
/// The probe tool (from `toolrail-tool-probe`).
pub use toolrail_tool_probe::{Probe, ProbeArgs, trail};

/// The batch scheduler, for tests of crates below the agent loop (tool crates, MCP) that
/// must show how their tools schedule; the layering lets them reach it only through here.
pub mod scheduling {
    pub use toolrail_agent_loop::{BatchOutcome, Scheduler, SchedulerConfig};
}
