//! One permission rule: `allow`, `ask` or `deny` the calls a pattern covers
//! (`deny bash(rm -rf *)`, `allow bash(git status*)`, `ask write(src/**)`).

use std::fmt;

use serde::{Deserialize, Serialize};
use toolrail_policy_guards::{CallPattern, PatternError};

/// What a rule does with the calls it covers. Ordered by precedence: a matching deny beats
/// any ask, an ask beats any allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleEffect {
    /// Run the call without asking.
    Allow,
    /// Ask the approval service first.
    Ask,
    /// Refuse the call (`POLICY_DENIED`); the deny-list guard enforces it a second time.
    Deny,
}

impl RuleEffect {
    /// The word a rule starts with (`allow`, `ask`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

impl fmt::Display for RuleEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a rule was written, so a decision can say which line made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleOrigin {
    /// A file name or another label (`preset`, `code`).
    pub source: String,
    /// The 1-based line, when known.
    pub line: Option<usize>,
}

impl fmt::Display for RuleOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.source),
            None => f.write_str(&self.source),
        }
    }
}

/// One rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// What happens to the calls it covers; among matching rules the strongest effect wins.
    pub effect: RuleEffect,
    /// The calls it covers, `tool` or `tool(subject)`. An allow rule reads a command line as
    /// [`Reading::Permit`](toolrail_policy_guards::Reading::Permit) does, ask and deny rules as
    /// [`Reading::Restrict`](toolrail_policy_guards::Reading::Restrict) does.
    pub pattern: CallPattern,
    /// Said to the model when the rule denies or asks.
    pub reason: Option<String>,
    /// Where it was written, named in the reasons it gives; `None` for a rule made in code
    /// without one.
    pub origin: Option<RuleOrigin>,
}

impl Rule {
    /// A rule from its parts; `pattern` is `tool` or `tool(subject)`.
    pub fn new(effect: RuleEffect, pattern: &str) -> Result<Self, PatternError> {
        Ok(Self {
            effect,
            pattern: CallPattern::parse(pattern)?,
            reason: None,
            origin: None,
        })
    }

    /// Reads `allow PATTERN`, `ask PATTERN` or `deny PATTERN`.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let text = text.trim();
        let (word, pattern) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let effect = match word {
            "allow" => RuleEffect::Allow,
            "ask" => RuleEffect::Ask,
            "deny" => RuleEffect::Deny,
            other => {
                return Err(PatternError {
                    pattern: text.to_owned(),
                    why: format!(
                        "a rule starts with allow, ask or deny, not `{other}` (e.g. `deny bash(rm -rf *)`)"
                    ),
                });
            }
        };
        Self::new(effect, pattern)
    }

    /// Sets what the model is told when the rule denies or asks.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Sets where the rule was written.
    pub fn with_origin(mut self, origin: RuleOrigin) -> Self {
        self.origin = Some(origin);
        self
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.effect, self.pattern)
    }
}
