//! What toolrail's own tests (and users' conformance tests) drive the runtime with: a
//! scripted model, a `probe` tool configured per call by its arguments, gated tools whose
//! bodies wait for the test, and scenario files that run whole sessions.
//!
//! May depend on every library crate; the others use it as a dev-dependency.

pub mod bench;
pub mod fleet;
mod model;
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod pg;
mod probe;
pub mod processes;
mod rng;
mod scenario;

pub use model::ScriptedModel;
pub use probe::{Probe, ProbeArgs};
pub use rng::SeededRng;
pub use scenario::{
    ApprovalSpec, Begun, Expectations, JsonlPlace, ModelStep, RESUME_MESSAGE, RunOptions,
    SandboxRuleSpec, Scenario, ScenarioConfig, ScenarioError, ScenarioReport, SessionPlace,
    ToolCallSpec, TurnSpec, WorkspaceSpec,
};
/// Scripted approval answers, for crates that may not depend on `interaction` themselves.
pub use toolrail_interaction::ScriptedApprovals;

/// `(kind, call id)` of every event, in order: the shape most tests compare a log by.
pub fn trail(events: &[toolrail_session_log::Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|event| {
            (
                event.data.kind().to_owned(),
                event
                    .call_id
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// The batch scheduler, for tests of crates below the agent loop (tool crates, MCP) that
/// must show how their tools schedule; the layering lets them reach it only through here.
pub mod scheduling {
    pub use toolrail_agent_loop::{BatchOutcome, Scheduler, SchedulerConfig};
}
