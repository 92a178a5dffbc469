//! Deciding one call: the matching rules by precedence (deny over ask over allow, the most
//! specific one reported), then the session's approvals, then the preset. As a pre-execute
//! hook the decision joins the waterfall; the deny rules are also a guard, so no other hook,
//! approval or session key can undo a deny.

use std::path::PathBuf;
use std::sync::Arc;

use toolrail_policy_guards::{CallSubject, DenyEntry, DenyListGuard, Reading, WorkspaceRoots};
use toolrail_tools_core::log::BoxFuture;
use toolrail_tools_core::{
    CallView, HookError, PreExecuteDecision, PreExecuteHook, PreNext, ProtectedPaths,
    command_line::{CommandLine, SimpleCommand},
    protected::ProtectedPatternError,
};

use crate::file::RuleFile;
use crate::preset::Preset;
use crate::rule::{Rule, RuleEffect};
use crate::session::SessionApprovals;

/// The outcome for one call, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// What happens to the call. Where nobody may be asked (`never-ask`, unattended), what
    /// would ask is already a deny.
    pub effect: RuleEffect,
    /// Why, naming the deciding rule (with its origin), the preset, or the session approval:
    /// what the model or the approver reads.
    pub reason: String,
    /// For an ask: what an "approve for session" answer would cover.
    pub session_key: Option<String>,
}

/// A preset and its rules, checked against calls.
///
/// # Example
///
/// Deny beats ask beats allow, whatever their order; the preset decides what no rule
/// covers, and `never-ask` turns every ask into a deny.
///
/// ```
/// use serde_json::json;
/// use toolrail_permissions::{Permissions, Preset, Rule, RuleEffect};
/// use toolrail_tools_core::log::ToolSource;
/// use toolrail_tools_core::{
///     CallView, ToolKind, ToolSpec, WorkspaceRoots, context::CallIdentity, spec::SubjectKind,
/// };
///
/// let workspace = tempfile::tempdir()?;
/// let roots = WorkspaceRoots::new([workspace.path()])?;
/// let rules = vec![
///     Rule::parse("allow write(src/**)")?,
///     Rule::parse("ask write(src/generated/**)")?,
///     Rule::parse("deny write(**/.env)")?.with_reason("secrets are edited by hand"),
/// ];
/// let write = ToolSpec::builder("write", "Writes a file.", json!({"type": "object"}))
///     .kind(ToolKind::Edit)
///     .subject("path", SubjectKind::Path)
///     .build();
/// let identity = CallIdentity {
///     call_id: "c1".into(),
///     index: 0,
///     name: "write".to_owned(),
///     turn: None,
///     step: None,
///     source: Some(ToolSource::Builtin),
///     version: None,
/// };
/// let decide = |permissions: &Permissions, path: &str| {
///     permissions.decide(&CallView {
///         identity: &identity,
///         spec: &write,
///         source: &ToolSource::Builtin,
///         arguments: &json!({ "path": path }),
///     })
/// };
///
/// let permissions = Permissions::new(Preset::Untrusted, rules.clone(), &roots);
/// assert_eq!(decide(&permissions, "src/lib.rs").effect, RuleEffect::Allow);
/// assert_eq!(decide(&permissions, "src/generated/api.rs").effect, RuleEffect::Ask);
/// let secret = decide(&permissions, "src/.env");
/// assert_eq!(secret.effect, RuleEffect::Deny);
/// let named = "`write` is denied by `deny write(**/.env)`: secrets are edited by hand";
/// assert_eq!(secret.reason, named);
/// assert_eq!(decide(&permissions, "notes.md").effect, RuleEffect::Ask, "untrusted asks");
///
/// let unattended = Permissions::new(Preset::NeverAsk, rules, &roots);
/// assert_eq!(decide(&unattended, "src/generated/api.rs").effect, RuleEffect::Deny);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Permissions {
    preset: Preset,
    rules: Vec<Rule>,
    roots: Vec<PathBuf>,
    session: SessionApprovals,
    /// Nobody is there to answer: an ask is a deny, whatever the preset.
    unattended: bool,
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
            unattended: false,
        }
    }

    /// Nobody is there to answer: what would ask is denied by the policy (no approval is
    /// asked for), whatever the preset; what the rules and the preset allow still runs.
    pub fn unattended(mut self) -> Self {
        self.unattended = true;
        self
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

    /// The preset that decides what no rule covers.
    pub fn preset(&self) -> Preset {
        self.preset
    }

    /// The "approve for session" keys it consults.
    pub fn session(&self) -> &SessionApprovals {
        &self.session
    }

    /// Decides one call. A command line is decided per simple command, as a shell parses it:
    /// each command gets its strongest matching rule (deny over ask over allow, the most
    /// specific named) or the preset, an ask the session's approvals may cover, and the line
    /// gets the strongest of those. So `allow bash(git status*)` and `allow bash(ls*)` allow
    /// `git status && ls`, and a deny that could name any command denies the line.
    pub fn decide(&self, call: &CallView<'_>) -> Verdict {
        let subject = CallSubject::of(call);
        let commands = subject
            .as_ref()
            .and_then(CallSubject::command_line)
            .map(CommandLine::commands)
            .filter(|commands| !commands.is_empty());
        match (subject.as_ref(), commands) {
            (Some(subject), Some(commands)) => {
                let (decision, asked) = self.decide_commands(call, subject, commands);
                let key = subject
                    .command_line()
                    .and_then(|line| command_session_key(call.spec.name(), line, &asked));
                self.verdict(call, decision, key)
            }
            _ => {
                let decision = self.decide_whole(call, subject.as_ref());
                self.verdict(call, decision, Some(session_key(call)))
            }
        }
    }

    /// A call without a command line (or one that runs no command) as one unit.
    fn decide_whole<'a>(
        &'a self,
        call: &CallView<'_>,
        subject: Option<&CallSubject<'_>>,
    ) -> Decision<'a> {
        let tool = call.spec.name();
        let strongest = self
            .rules
            .iter()
            .filter(|rule| {
                rule.pattern
                    .matches_subject(tool, subject, &self.roots, reading(rule.effect))
            })
            .max_by_key(|rule| (rule.effect, rule.pattern.specificity()));
        let decision = match strongest {
            Some(rule) => Decision::by_rule(rule, None),
            None => Decision::by_preset(self.preset.default_for(call.spec), None),
        };
        if decision.effect == RuleEffect::Ask
            && let Some(key) = self.session.covering(call, &self.roots)
        {
            return Decision::by_session(key, None);
        }
        decision
    }

    /// Each simple command decided on its own; the line gets the strongest decision. Also
    /// returns the commands still asked about (what a session approval would have to cover).
    fn decide_commands<'a, 'c>(
        &'a self,
        call: &CallView<'_>,
        subject: &CallSubject<'_>,
        commands: &'c [SimpleCommand],
    ) -> (Decision<'a>, Vec<&'c SimpleCommand>)
    where
        'c: 'a,
    {
        let tool = call.spec.name();
        let mut line: Option<Decision<'a>> = None;
        let mut asked = Vec::new();
        for command in commands {
            let strongest = self
                .rules
                .iter()
                .filter(|rule| {
                    rule.pattern
                        .matches_command(tool, subject, command, reading(rule.effect))
                })
                .max_by_key(|rule| (rule.effect, rule.pattern.specificity()));
            let mut decision = match strongest {
                Some(rule) => Decision::by_rule(rule, Some(command)),
                None => Decision::by_preset(self.preset.default_for(call.spec), Some(command)),
            };
            if decision.effect == RuleEffect::Ask {
                match self.session.covering_command(tool, subject, command) {
                    Some(key) => decision = Decision::by_session(key, Some(command)),
                    None => asked.push(command),
                }
            }
            line = Some(match line {
                Some(current) if current.rank() >= decision.rank() => current,
                _ => decision,
            });
        }
        let decision =
            line.unwrap_or_else(|| Decision::by_preset(self.preset.default_for(call.spec), None));
        (decision, asked)
    }

    fn verdict(
        &self,
        call: &CallView<'_>,
        decision: Decision<'_>,
        session_key: Option<String>,
    ) -> Verdict {
        let tool = call.spec.name();
        let mut because = match &decision.by {
            DecidedBy::Rule(rule) => describe(rule),
            DecidedBy::Preset | DecidedBy::Session(_) => format!("the `{}` preset", self.preset),
        };
        // A rule that caught a command it can only suspect says so.
        if let (DecidedBy::Rule(_), Some(command)) = (&decision.by, decision.command)
            && let Some(unknown) = command.unknown_program()
        {
            because.push_str(&format!(
                " (it could name `{}`: {unknown})",
                command.canonical()
            ));
        }
        match (decision.effect, decision.by) {
            (RuleEffect::Deny, _) => Verdict {
                effect: RuleEffect::Deny,
                reason: format!("`{tool}` is denied by {because}"),
                session_key: None,
            },
            (RuleEffect::Allow, DecidedBy::Session(key)) => Verdict {
                effect: RuleEffect::Allow,
                reason: format!("`{key}` was approved for this session"),
                session_key: None,
            },
            (RuleEffect::Allow, DecidedBy::Rule(_) | DecidedBy::Preset) => Verdict {
                effect: RuleEffect::Allow,
                reason: format!("`{tool}` is allowed by {because}"),
                session_key: None,
            },
            (RuleEffect::Ask, _) if self.unattended => Verdict {
                effect: RuleEffect::Deny,
                reason: format!(
                    "`{tool}` needs an approval ({because}), and this session asks no one (unattended)"
                ),
                session_key: None,
            },
            (RuleEffect::Ask, _) if !self.preset.may_ask() => Verdict {
                effect: RuleEffect::Deny,
                reason: format!(
                    "`{tool}` needs an approval ({because}), and the `{}` preset asks no one",
                    self.preset
                ),
                session_key: None,
            },
            (RuleEffect::Ask, _) => Verdict {
                effect: RuleEffect::Ask,
                reason: format!("`{tool}` needs an approval: {because}"),
                session_key,
            },
        }
    }

    /// Hides what the deny rules for `read` name from every tool: each deny rule whose tool
    /// pattern covers `read` and has a subject (`deny read(**/.env)`, `deny *(secrets/**)`)
    /// is added with [`ProtectedPaths::hide_matching`], so `grep`, `glob` and the shell
    /// sandbox keep away from what `read` may not see.
    pub fn protect(
        &self,
        protected: ProtectedPaths,
    ) -> Result<ProtectedPaths, ProtectedPatternError> {
        self.rules
            .iter()
            .filter(|rule| rule.effect == RuleEffect::Deny && rule.pattern.tool.matches("read"))
            .filter_map(|rule| rule.pattern.subject.as_ref())
            .try_fold(protected, |protected, subject| {
                protected.hide_matching(subject.as_str())
            })
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

/// How a rule reads a call: allow rules permit, ask and deny rules restrict.
fn reading(effect: RuleEffect) -> Reading {
    match effect {
        RuleEffect::Allow => Reading::Permit,
        RuleEffect::Ask | RuleEffect::Deny => Reading::Restrict,
    }
}

/// What decided a call or one of its commands.
enum DecidedBy<'a> {
    Rule(&'a Rule),
    Preset,
    /// A remembered "approve for session" key.
    Session(String),
}

struct Decision<'a> {
    effect: RuleEffect,
    by: DecidedBy<'a>,
    /// The simple command decided, when the call's command line was decided per command.
    command: Option<&'a SimpleCommand>,
}

impl<'a> Decision<'a> {
    fn by_rule(rule: &'a Rule, command: Option<&'a SimpleCommand>) -> Self {
        Self {
            effect: rule.effect,
            by: DecidedBy::Rule(rule),
            command,
        }
    }

    fn by_preset(effect: RuleEffect, command: Option<&'a SimpleCommand>) -> Self {
        Self {
            effect,
            by: DecidedBy::Preset,
            command,
        }
    }

    fn by_session(key: String, command: Option<&'a SimpleCommand>) -> Self {
        Self {
            effect: RuleEffect::Allow,
            by: DecidedBy::Session(key),
            command,
        }
    }

    /// Which decision a line takes: the strongest effect; among equals a rule (the most
    /// specific) is named before a session approval, and that before the preset.
    fn rank(&self) -> (RuleEffect, u8, (bool, usize)) {
        match &self.by {
            DecidedBy::Rule(rule) => (self.effect, 2, rule.pattern.specificity()),
            DecidedBy::Session(_) => (self.effect, 1, (false, 0)),
            DecidedBy::Preset => (self.effect, 0, (false, 0)),
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
        Some(subject) => format!("{tool}({})", escape_glob(subject.text)),
        None => tool.to_owned(),
    }
}

/// What "approve for session" covers for a command line: exactly the commands still asked
/// about (`bash(git push origin)`, or `bash({git push,npm publish})` for several). None when
/// no key could ever cover them again: a command not known before run time, or a line that
/// redirects to a file.
fn command_session_key(tool: &str, line: &CommandLine, asked: &[&SimpleCommand]) -> Option<String> {
    if !line.file_redirections().is_empty() {
        return None;
    }
    let mut texts = Vec::with_capacity(asked.len());
    for command in asked {
        let text = escape_glob(command.permit_text()?);
        if !texts.contains(&text) {
            texts.push(text);
        }
    }
    match texts.as_slice() {
        [] => None,
        [one] => Some(format!("{tool}({one})")),
        many => Some(format!("{tool}({{{}}})", many.join(","))),
    }
}

/// Text as a glob matching exactly it (commas too, so it can stand in a `{…,…}`).
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | ',') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

impl Verdict {
    /// The verdict as a pre-execute hook's decision, the rest of the chain consulted: a deny
    /// ends the chain; otherwise the rest runs and the more restrictive of the two decisions
    /// is returned (a deny of the rest stands, an ask of ours stands). For a hook that judges
    /// a call by the rules as another call — the runtime's judging of shell input as `bash`.
    pub async fn then(self, next: PreNext<'_>) -> Result<PreExecuteDecision, HookError> {
        let ours = match self.effect {
            RuleEffect::Deny => {
                return Ok(PreExecuteDecision::Deny {
                    reason: self.reason,
                });
            }
            RuleEffect::Ask => PreExecuteDecision::Ask {
                reason: self.reason,
                session_key: self.session_key,
            },
            RuleEffect::Allow => PreExecuteDecision::Allow,
        };
        let theirs = next.run().await?;
        Ok(match (&ours, &theirs) {
            (_, PreExecuteDecision::Deny { .. }) => theirs,
            (PreExecuteDecision::Ask { .. }, _) => ours,
            _ => theirs,
        })
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
        Box::pin(self.permissions.decide(call).then(next))
    }
}
