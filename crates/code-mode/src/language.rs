//! The languages a `run_code` program may be written in: what the tool's arguments name,
//! and what the presentation writes an SDK for.

use schemars::JsonSchema;
use serde::Deserialize;

/// The languages a program may be written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// The body of an async function, run in the embedded QuickJS engine (the `javascript`
    /// feature).
    #[default]
    Javascript,
    /// A module with top-level `await`, run by a sandboxed `python3`
    /// ([`PythonRuntime`](crate::PythonRuntime)).
    Python,
}

impl Language {
    /// The language as `run_code`'s `language` argument and its details name it:
    /// `javascript`, `python`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Javascript => "javascript",
            Self::Python => "python",
        }
    }
}
