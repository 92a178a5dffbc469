//! The languages a `run_code` program may be written in: what the tool's arguments name,
//! and what the presentation writes an SDK for.

use schemars::JsonSchema;
use serde::Deserialize;

/// The languages a program may be written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    #[default]
    Javascript,
    Python,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Javascript => "javascript",
            Self::Python => "python",
        }
    }
}
