//! Presets: what happens to a call no rule covers, and whether anything may ask at all.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};
use toolrail_tools_core::{ToolKind, ToolSpec, spec::SubjectKind};

use crate::rule::RuleEffect;

/// A starting point for a set of rules. Explicit rules apply under every preset, and the
/// deny rules are enforced a second time by a guard whatever the preset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Preset {
    /// Read-only tools run; everything else asks.
    #[default]
    Untrusted,
    /// Read-only tools and edits of tools whose subject is a path (the path guard keeps them
    /// inside the workspace) run; shell, fetch, edits without a path, and anything else ask.
    Workspace,
    /// Like `workspace`, but nothing asks: what would ask is denied. For runs with no one
    /// to answer.
    NeverAsk,
    /// Everything runs unless a rule says otherwise; guards still apply.
    FullAuto,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 4] = [
        Self::Untrusted,
        Self::Workspace,
        Self::NeverAsk,
        Self::FullAuto,
    ];

    /// The name written in rule files and configuration (`never-ask`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Untrusted => "untrusted",
            Self::Workspace => "workspace",
            Self::NeverAsk => "never-ask",
            Self::FullAuto => "full-auto",
        }
    }

    /// What a call no rule covers gets.
    pub fn default_for(self, spec: &ToolSpec) -> RuleEffect {
        if spec.is_read_only() {
            return RuleEffect::Allow;
        }
        match self {
            Self::Untrusted => RuleEffect::Ask,
            Self::Workspace | Self::NeverAsk => match spec.kind() {
                ToolKind::Read | ToolKind::Search | ToolKind::Think => RuleEffect::Allow,
                // Edits are allowed only where the path guard can keep them inside the
                // workspace: the tool must name its path as its subject.
                ToolKind::Edit | ToolKind::Delete | ToolKind::Move => {
                    let confined = spec
                        .subject()
                        .is_some_and(|subject| subject.kind == SubjectKind::Path);
                    if confined {
                        RuleEffect::Allow
                    } else {
                        RuleEffect::Ask
                    }
                }
                ToolKind::Execute | ToolKind::Fetch | ToolKind::Other => RuleEffect::Ask,
            },
            Self::FullAuto => RuleEffect::Allow,
        }
    }

    /// Whether an ask may reach a person; under `never-ask` it is a deny.
    pub fn may_ask(self) -> bool {
        match self {
            Self::Untrusted | Self::Workspace | Self::FullAuto => true,
            Self::NeverAsk => false,
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Preset {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|preset| preset.as_str() == text)
            .ok_or_else(|| {
                format!("unknown preset `{text}`: use untrusted, workspace, never-ask or full-auto")
            })
    }
}

impl<'de> Deserialize<'de> for Preset {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
