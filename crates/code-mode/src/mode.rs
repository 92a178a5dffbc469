//! How tools are presented to the model, per agent or scope: `native` (tools as usual, no
//! `run_code`), `code` (only `run_code`, with the SDK in the system prompt; a direct call of
//! another tool is `UNKNOWN_TOOL` telling the model to call it from `run_code`), or `both`.

use std::sync::Arc;

use toolrail_agent_loop::{PresentedTools, ToolPresentation};
use toolrail_tools_core::ToolSet;

use crate::language::Language;
use crate::sdk::{RUN_CODE, javascript, python};

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

/// What the model is told when it calls a tool directly that code mode keeps for programs.
fn refuse_direct_call(tool: &str, entry_point: &str) -> String {
    format!(
        "`{tool}` is not called directly in code mode: call it from a `{entry_point}` program, e.g. `const result = await {tool}({{...}});`"
    )
}

impl PresentationMode {
    /// The tool set one model request is offered in this mode.
    pub fn present(self, tools: &ToolSet) -> ToolSet {
        match self {
            Self::Native => tools.without(RUN_CODE),
            Self::Code => tools
                .for_code_mode(RUN_CODE)
                .with_code_only_refusal(refuse_direct_call),
            Self::Both => tools.clone(),
        }
    }

    /// This mode as the agent loop's presentation of each request's tools, for programs in
    /// JavaScript (see [`CodeMode::presentation`](crate::CodeMode::presentation) for a
    /// session that also runs Python).
    pub fn presentation(self) -> ToolPresentation {
        self.presentation_for(vec![Language::Javascript])
    }

    pub(crate) fn presentation_for(self, languages: Vec<Language>) -> ToolPresentation {
        Arc::new(move |tools: &ToolSet| PresentedTools {
            tools: self.present(tools),
            system: self.system_prompt_for(tools, &languages),
        })
    }

    /// What the system prompt must carry in this mode for JavaScript programs: the SDK a
    /// program is written against, or nothing in native mode.
    pub fn system_prompt(self, tools: &ToolSet) -> Option<String> {
        self.system_prompt_for(tools, &[Language::Javascript])
    }

    /// The system prompt's part for programs in any of `languages`: one SDK each.
    pub fn system_prompt_for(self, tools: &ToolSet, languages: &[Language]) -> Option<String> {
        match self {
            Self::Native => None,
            Self::Code | Self::Both => {
                let tools = tools.for_code_mode(RUN_CODE);
                let mut prompt = String::new();
                for language in languages {
                    prompt.push_str(&match language {
                        Language::Javascript => format!(
                            "To use tools, call `{RUN_CODE}` with a JavaScript program (the body of an async function). These functions are available to it:\n\n```javascript\n{}```\n",
                            javascript(&tools)
                        ),
                        Language::Python => format!(
                            "{}Call `{RUN_CODE}` with `\"language\": \"python\"` for a Python program (top-level `await` allowed; the value of its last expression comes back). These functions are available to it:\n\n```python\n{}```\n",
                            if prompt.is_empty() { "" } else { "\n" },
                            python(&tools)
                        ),
                    });
                }
                Some(prompt)
            }
        }
    }
}
