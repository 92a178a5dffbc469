//! Whose fault a failed scenario run is — the scenario's own, the store's, or a takeover's:
//! what a fleet decides from whether to mark a session `failed` or give it back to be
//! resumed. Read from the error's types, never from its words.

use toolrail_agent_loop::LoopError;
use toolrail_session_log::SinkError;
use toolrail_session_store::StoreError;
use toolrail_tools_core::PipelineError;

use super::ScenarioError;
use crate::agent::AgentError;
use crate::{BuildError, StoreOpenError};

/// Whose fault a failed run is: what decides, in a fleet, between marking the session
/// `failed` and giving it back to be resumed from its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The session's own: the scenario or its configuration is wrong, its model (a script
    /// that ran out, a provider) failed, or a bug of the runtime's. Running it again the
    /// same way fails the same way.
    Scenario,
    /// The store failed under the session — a dropped connection, a restart, a database
    /// that does not answer — while what was committed stays: the session can be resumed
    /// from its log, recovery first.
    Store,
    /// Another holder took the session's lease over; this run wrote nothing after that.
    TakenOver,
}

impl ScenarioError {
    /// Whose fault the failure is.
    pub fn fault(&self) -> Fault {
        match self {
            Self::Invalid(_) | Self::Workspace(_) => Fault::Scenario,
            Self::Build(error) => build_fault(error),
            Self::Turn(AgentError::Turn(error)) => match error {
                LoopError::Log(error) => sink_fault(error),
                LoopError::Pipeline(PipelineError::Log { source, .. }) => sink_fault(source),
                LoopError::Pipeline(PipelineError::Internal(_)) | LoopError::Model(_) => {
                    Fault::Scenario
                }
            },
            Self::Turn(AgentError::Busy | AgentError::Lost(_)) => Fault::Scenario,
        }
    }
}

fn build_fault(error: &BuildError) -> Fault {
    match error {
        BuildError::Store(StoreOpenError::Store { source, .. }) => store_fault(source),
        BuildError::Recovery(error) => sink_fault(error),
        BuildError::Store(StoreOpenError::Url(_) | StoreOpenError::NotBuilt { .. })
        | BuildError::Config(_)
        | BuildError::NoModel
        | BuildError::Model(_)
        | BuildError::Registry(_)
        | BuildError::Session(_)
        | BuildError::NotBuilt { .. } => Fault::Scenario,
    }
}

fn store_fault(error: &StoreError) -> Fault {
    if error.is_lease_lost() {
        Fault::TakenOver
    } else if error.is_outage() {
        Fault::Store
    } else {
        Fault::Scenario
    }
}

fn sink_fault(error: &SinkError) -> Fault {
    match error {
        SinkError::Refused(_) | SinkError::Closed => Fault::Store,
        SinkError::TakenOver { .. } => Fault::TakenOver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_error(source: StoreError) -> ScenarioError {
        ScenarioError::Build(BuildError::Store(StoreOpenError::Store {
            url: "postgres://x".to_owned(),
            source,
        }))
    }

    fn turn_error(source: SinkError) -> ScenarioError {
        ScenarioError::Turn(AgentError::Turn(LoopError::Pipeline(PipelineError::Log {
            call_id: toolrail_session_log::CallId::new("c1"),
            kind: "tool/result",
            source,
        })))
    }

    /// Each failure is the fault its types say: a dropped connection or a database that
    /// does not answer is the store's, wherever it surfaces; a lost lease a takeover; a
    /// bad scenario, a bad log or a model that failed the scenario's own.
    #[test]
    fn each_failure_is_the_fault_its_types_say() {
        let refused = || SinkError::Refused("connection closed".to_owned());
        let taken = || SinkError::TakenOver {
            session: "s".to_owned(),
            holder: 2,
            held: 1,
        };
        let database = || StoreError::Database {
            path: "postgres://x".into(),
            message: "connection closed".to_owned(),
        };
        let cases = [
            (turn_error(refused()), Fault::Store),
            (turn_error(SinkError::Closed), Fault::Store),
            (turn_error(taken()), Fault::TakenOver),
            (
                ScenarioError::Turn(AgentError::Turn(LoopError::Log(refused()))),
                Fault::Store,
            ),
            (
                ScenarioError::Build(BuildError::Recovery(refused())),
                Fault::Store,
            ),
            (
                ScenarioError::Build(BuildError::Recovery(taken())),
                Fault::TakenOver,
            ),
            (store_error(database()), Fault::Store),
            (
                store_error(StoreError::Fenced {
                    session: "s".to_owned(),
                    token: 1,
                }),
                Fault::TakenOver,
            ),
            (
                store_error(StoreError::Corrupt {
                    path: "postgres://x#s".into(),
                    line: 3,
                    why: "a gap".to_owned(),
                }),
                Fault::Scenario,
            ),
            (
                ScenarioError::Invalid("turns: missing".to_owned()),
                Fault::Scenario,
            ),
            (
                ScenarioError::Build(BuildError::Session("plan mode".to_owned())),
                Fault::Scenario,
            ),
            (
                ScenarioError::Turn(AgentError::Lost("panicked".to_owned())),
                Fault::Scenario,
            ),
        ];
        for (error, fault) in cases {
            assert_eq!(error.fault(), fault, "{error}");
        }
    }
}
