//! Rule files, TOML or JSON, of one shape:
//!
//! ```toml
//! preset = "workspace"          # untrusted | workspace | never-ask | full-auto
//! allow = ["bash(git status*)", "read"]
//! ask = ["write(src/**)"]
//! deny = [
//!   "bash(rm -rf *)",
//!   { rule = "read(**/.env)", reason = "secrets stay out of the conversation" },
//! ]
//! ```
//!
//! Anything wrong is an error naming the file, the line and what to do; nothing is half
//! loaded.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::preset::Preset;
use crate::rule::{Rule, RuleEffect, RuleOrigin};

/// A rule file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}{}: {why}", line.map(|line| format!(":{line}")).unwrap_or_default())]
pub struct RulesError {
    /// The file (or label) the rules came from.
    pub source_name: String,
    /// The 1-based line of the problem, when it can be told.
    pub line: Option<usize>,
    /// What is wrong, and what to do about it.
    pub why: String,
}

/// The rules of one file, with its preset if it names one.
#[derive(Clone, Debug, Default)]
pub struct RuleFile {
    /// The file's `preset`; `None` when it names none, and the embedder's choice stands
    /// ([`Permissions::from_file`](crate::Permissions::from_file)).
    pub preset: Option<Preset>,
    /// The `allow`, then the `ask`, then the `deny` entries, each list in file order, each rule
    /// with its origin (the file and line).
    pub rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    preset: Option<Preset>,
    #[serde(default)]
    allow: Vec<RawEntry>,
    #[serde(default)]
    ask: Vec<RawEntry>,
    #[serde(default)]
    deny: Vec<RawEntry>,
}

/// `"PATTERN"` or `{rule = "PATTERN", reason = "…"}`.
struct RawEntry {
    pattern: String,
    reason: Option<String>,
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = RawEntry;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(
                    "a pattern like \"bash(git status*)\" or a table {rule = \"…\", reason = \"…\"}",
                )
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<RawEntry, E> {
                Ok(RawEntry {
                    pattern: text.to_owned(),
                    reason: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEntry, A::Error> {
                let (mut pattern, mut reason) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "rule" => pattern = Some(map.next_value::<String>()?),
                        "reason" => reason = Some(map.next_value::<String>()?),
                        other => {
                            return Err(de::Error::custom(format!(
                                "unknown field `{other}` in a rule; a rule has `rule` and `reason`"
                            )));
                        }
                    }
                }
                let pattern = pattern.ok_or_else(|| de::Error::missing_field("rule"))?;
                Ok(RawEntry { pattern, reason })
            }
        }
        deserializer.deserialize_any(EntryVisitor)
    }
}

impl RuleFile {
    /// Reads a `.toml` or `.json` file.
    pub fn load(path: &Path) -> Result<Self, RulesError> {
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| RulesError {
            source_name: source_name.clone(),
            line: None,
            why: format!("cannot be read: {error}"),
        })?;
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("toml") => Self::from_toml(&text, &source_name),
            Some("json") => Self::from_json(&text, &source_name),
            _ => Err(RulesError {
                source_name,
                line: None,
                why: "a rule file ends in .toml or .json".to_owned(),
            }),
        }
    }

    /// Reads rules from TOML text; `source_name` names the text in errors and in the rules'
    /// origins.
    pub fn from_toml(text: &str, source_name: &str) -> Result<Self, RulesError> {
        let raw: RawFile = toml::from_str(text).map_err(|error| RulesError {
            source_name: source_name.to_owned(),
            line: error.span().map(|span| line_at(text, span.start)),
            why: error.message().to_owned(),
        })?;
        Self::from_raw(raw, text, source_name)
    }

    /// Reads rules from JSON text; `source_name` names the text in errors and in the rules'
    /// origins.
    pub fn from_json(text: &str, source_name: &str) -> Result<Self, RulesError> {
        let raw: RawFile = serde_json::from_str(text).map_err(|error| RulesError {
            source_name: source_name.to_owned(),
            line: Some(error.line()).filter(|line| *line > 0),
            // serde_json's text ends with its own "at line L column C"; the line is ours.
            why: strip_position(&error.to_string()),
        })?;
        Self::from_raw(raw, text, source_name)
    }

    fn from_raw(raw: RawFile, text: &str, source_name: &str) -> Result<Self, RulesError> {
        let mut rules = Vec::new();
        let mut search_from = 0;
        for (effect, entries) in [
            (RuleEffect::Allow, raw.allow),
            (RuleEffect::Ask, raw.ask),
            (RuleEffect::Deny, raw.deny),
        ] {
            for entry in entries {
                let found = text
                    .get(search_from..)
                    .and_then(|rest| rest.find(&entry.pattern))
                    .map(|offset| search_from + offset)
                    .or_else(|| text.find(&entry.pattern));
                if let Some(at) = found {
                    search_from = at + entry.pattern.len();
                }
                let line = found.map(|at| line_at(text, at));
                let origin = RuleOrigin {
                    source: source_name.to_owned(),
                    line,
                };
                let rule = Rule::new(effect, &entry.pattern).map_err(|error| RulesError {
                    source_name: source_name.to_owned(),
                    line,
                    why: format!("in `{effect}`: {error}"),
                })?;
                let rule = rule.with_origin(origin);
                rules.push(match entry.reason {
                    Some(reason) => rule.with_reason(reason),
                    None => rule,
                });
            }
        }
        Ok(Self {
            preset: raw.preset,
            rules,
        })
    }
}

/// The 1-based line holding byte `at`.
fn line_at(text: &str, at: usize) -> usize {
    text.get(..at)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}

fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}
