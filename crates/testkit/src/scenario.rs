//! Scenario files run by the runtime (`toolrail_runtime::scenario`), with the test kit's
//! probes: a scenario may name `probe` and `probe_idem` in `config.tools.enabled`, and
//! their markers go to `<folder>/markers/`.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toolrail_runtime::scenario as runtime;
use toolrail_tools_core::Tool;

pub use runtime::{
    Expectations, ModelStep, RESUME_MESSAGE, RunOptions, SCENARIO_SESSION, ScenarioError,
    ScenarioPlace, ToolCallSpec, TurnSpec, WorkspaceSpec,
};

use crate::Probe;

/// A scenario file, run with the probes.
#[derive(Clone, Debug)]
pub struct Scenario(pub runtime::Scenario);

impl Deref for Scenario {
    type Target = runtime::Scenario;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// What a run produced, and where the probes' markers are.
#[derive(Debug)]
pub struct ScenarioReport {
    /// The runtime's report of the run.
    pub report: runtime::ScenarioReport,
    /// `<folder>/markers/`: a probe call asked for a marker writes `<call_id>` here when
    /// its body starts.
    pub marker_dir: PathBuf,
}

impl Deref for ScenarioReport {
    type Target = runtime::ScenarioReport;

    fn deref(&self) -> &Self::Target {
        &self.report
    }
}

/// The probes for a session folder: `probe` and `probe_idem`, writing their markers to
/// `<folder>/markers/`.
pub fn probes(folder: &Path) -> Vec<Arc<dyn Tool>> {
    let markers = folder.join("markers");
    vec![
        Arc::new(Probe::new(Some(markers.clone()))),
        Arc::new(Probe::idempotent(Some(markers))),
    ]
}

impl Scenario {
    /// Reads a scenario from JSON text; an unknown field is an error naming it.
    pub fn from_json(text: &str) -> Result<Self, ScenarioError> {
        runtime::Scenario::from_json(text).map(Self)
    }

    /// Runs every turn; see [`runtime::Scenario::run`].
    pub async fn run(&self, folder: &Path) -> Result<ScenarioReport, ScenarioError> {
        self.run_with(folder, RunOptions::default()).await
    }

    /// Runs every turn with `options`, the probes among the tools the scenario may name.
    pub async fn run_with(
        &self,
        folder: &Path,
        mut options: RunOptions,
    ) -> Result<ScenarioReport, ScenarioError> {
        let folder = std::path::absolute(folder)?;
        let marker_dir = folder.join("markers");
        std::fs::create_dir_all(&marker_dir)?;
        options.tools.extend(probes(&folder));
        let report = self.0.run_with(&folder, options).await?;
        Ok(ScenarioReport { report, marker_dir })
    }
}
