//! Deciding one call: the matching rules by precedence (deny over ask over allow, the most
//! specific one reported), then the session's approvals, then the preset. As a pre-execute
//! hook the decision joins the waterfall; the deny rules are also a guard, so no other hook,
//! approval or session key can undo a deny.

use std::path::PathBuf;
use std::sync::Arc;

use toolrail_policy_guards::{DenyEntry, DenyListGuard, Reading, WorkspaceRoots};
use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{CallView, HookError, PreExecuteDecision, PreExecuteHook, PreNext};

use crate::file::RuleFile;
use crate::preset::Preset;
use crate::rule::{Rule, RuleEffect};
use crate::session::SessionApprovals;

/// The outcome for one call, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub effect: RuleEffect,
    pub reason: String,
    /// For an ask: what an "approve for session" answer would cover.
    pub session_key: Option<String>,
}

/// A preset and its rules, checked against calls.
#[derive(Clone, Debug)]
pub struct Permissions {
    preset: Preset,
    rules: Vec<Rule>,
    roots: Vec<PathBuf>,
    session: SessionApprovals,
}

impl Permissions {
    /// Rules in a workspace (whose roots let absolute and symlinked paths match relative
    /// patterns).
    pub fn new(preset: Preset, rules: Vec<Rule>, roots: &WorkspaceRoots) -> Self {
        Self {
            preset,
            rules,
            roots: roots.as_slice().to_vec(),
            session: SessionApprovals::new(),
        }
    }

    /// The rules of a file; its preset, if it names one, wins over `preset`.
    pub fn from_file(file: RuleFile, preset: Preset, roots: &WorkspaceRoots) -> Self {
        Self::new(file.preset.unwrap_or(preset), file.rules, roots)
    }

    /// Remembers session approvals in `session` (shared with the approval service that
    /// learns them, and rebuilt from the log on resume).
    pub fn with_session(mut self, session: SessionApprovals) -> Self {
        self.session = session;
        self
    }

    pub fn preset(&self) -> Preset {
        self.preset
    }

    pub fn session(&self) -> &SessionApprovals {
        &self.session
    }

    /// Decides one call.
    pub fn decide(&self, call: &CallView<'_>) -> Verdict {
        let strongest = self
            .rules
            .iter()
            .filter(|rule| {
                let reading = match rule.effect {
                    RuleEffect::Allow => Reading::Permit,
                    RuleEffect::Ask | RuleEffect::Deny => Reading::Restrict,
                };
                rule.pattern.matches(call, &self.roots, reading)
            })
            .max_by_key(|rule| (rule.effect, rule.pattern.specificity()));
        let (effect, because) = match strongest {
            Some(rule) => (rule.effect, describe(rule)),
            None => (
                self.preset.default_for(call.spec),
                format!("the `{}` preset", self.preset),
            ),
        };
        let tool = call.spec.name();
        match effect {
            RuleEffect::Deny => Verdict {
                effect,
                reason: format!("`{tool}` is denied by {because}"),
                session_key: None,
            },
            RuleEffect::Allow => Verdict {
                effect,
                reason: format!("`{tool}` is allowed by {because}"),
                session_key: None,
            },
            RuleEffect::Ask => {
                if let Some(key) = self.session.covering(call, &self.roots) {
                    return Verdict {
                        effect: RuleEffect::Allow,
                        reason: format!("`{key}` was approved for this session"),
                        session_key: None,
                    };
                }
                if !self.preset.may_ask() {
                    return Verdict {
                        effect: RuleEffect::Deny,
                        reason: format!(
                            "`{tool}` needs an approval ({because}), and the `{}` preset asks no one",
                            self.preset
                        ),
                        session_key: None,
                    };
                }
                Verdict {
                    effect,
                    reason: format!("`{tool}` needs an approval: {because}"),
                    session_key: Some(session_key(call)),
                }
            }
        }
    }

    /// The deny rules as a guard, so they hold whatever the hooks and approvals say.
    pub fn deny_guard(&self) -> DenyListGuard {
        let entries = self
            .rules
            .iter()
            .filter(|rule| rule.effect == RuleEffect::Deny)
            .map(|rule| DenyEntry {
                pattern: rule.pattern.clone(),
                reason: rule
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("a permission rule ({})", describe(rule))),
            })
            .collect();
        DenyListGuard::new(entries, self.roots.clone())
    }

    /// The rules as a pre-execute hook.
    pub fn hook(self: &Arc<Self>) -> PermissionHook {
        PermissionHook {
            permissions: Arc::clone(self),
        }
    }
}

/// `` `deny bash(rm -rf *)` (rules.toml:4): no recursive deletes ``.
fn describe(rule: &Rule) -> String {
    let mut text = format!("`{rule}`");
    if let Some(origin) = &rule.origin {
        text.push_str(&format!(" ({origin})"));
    }
    if let Some(reason) = &rule.reason {
        text.push_str(&format!(": {reason}"));
    }
    text
}

/// What "approve for session" covers by default: this tool with exactly this subject (glob
/// characters escaped), or the tool when it has no subject.
fn session_key(call: &CallView<'_>) -> String {
    let tool = call.spec.name();
    match call.subject() {
        Some(subject) => {
            let mut escaped = String::with_capacity(subject.text.len());
            for c in subject.text.chars() {
                if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
                    escaped.push('\\');
                }
                escaped.push(c);
            }
            format!("{tool}({escaped})")
        }
        None => tool.to_owned(),
    }
}

/// The permission rules in the pre-execute waterfall. A deny ends the chain; otherwise the
/// rest of the chain runs and the more restrictive of the two decisions is returned (the
/// pipeline keeps every decision anyway: nothing later can launder a deny or an ask).
pub struct PermissionHook {
    permissions: Arc<Permissions>,
}

impl PreExecuteHook for PermissionHook {
    fn name(&self) -> &str {
        "permissions"
    }

    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            let verdict = self.permissions.decide(call);
            let ours = match verdict.effect {
                RuleEffect::Deny => {
                    return Ok(PreExecuteDecision::Deny {
                        reason: verdict.reason,
                    });
                }
                RuleEffect::Ask => PreExecuteDecision::Ask {
                    reason: verdict.reason,
                    session_key: verdict.session_key,
                },
                RuleEffect::Allow => PreExecuteDecision::Allow,
            };
            let theirs = next.run().await?;
            Ok(match (&ours, &theirs) {
                (_, PreExecuteDecision::Deny { .. }) => theirs,
                (PreExecuteDecision::Ask { .. }, _) => ours,
                _ => theirs,
            })
        })
    }
}
