//! How tools are presented to the model, per agent or scope: `native` (tools as usual, no
//! `run_code`), `code` (only `run_code`, with the SDK in the system prompt; a direct call of
//! another tool is `UNKNOWN_TOOL` telling the model to call it from `run_code`), or `both`.

use std::sync::Arc;

use toolrail_agent_loop::{PresentedTools, ToolPresentation};
use toolrail_tools_core::ToolSet;

use crate::sdk::{RUN_CODE, javascript};

/// The presentation mode of an agent or scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PresentationMode {
    /// Tools as usual; `run_code` is not offered.
    #[default]
    Native,
    /// Only `run_code`; the other tools are reachable from programs alone.
    Code,
    /// Every tool, and `run_code` beside them.
    Both,
}

impl PresentationMode {
    /// The tool set one model request is offered in this mode.
    pub fn present(self, tools: &ToolSet) -> ToolSet {
        match self {
            Self::Native => tools.without(RUN_CODE),
            Self::Code => tools.for_code_mode(RUN_CODE),
            Self::Both => tools.clone(),
        }
    }

    /// This mode as the agent loop's presentation of each request's tools.
    pub fn presentation(self) -> ToolPresentation {
        Arc::new(move |tools: &ToolSet| PresentedTools {
            tools: self.present(tools),
            system: self.system_prompt(tools),
        })
    }

    /// What the system prompt must carry in this mode: the SDK a program is written
    /// against, or nothing in native mode.
    pub fn system_prompt(self, tools: &ToolSet) -> Option<String> {
        match self {
            Self::Native => None,
            Self::Code | Self::Both => Some(format!(
                "To use tools, call `{RUN_CODE}` with a JavaScript program (the body of an async function). These functions are available to it:\n\n```javascript\n{}```\n",
                javascript(&tools.for_code_mode(RUN_CODE))
            )),
        }
    }
}
