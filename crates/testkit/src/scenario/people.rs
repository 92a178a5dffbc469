//! The people side of a scenario: scripted approvals and answers to questions, permission
//! rules with their guards, and plan mode.

use std::path::Path;
use std::sync::Arc;

use toolrail_interaction::{PlanMode, QuestionOutcome, ScriptedApprovals, ScriptedQuestions};
use toolrail_permissions::{Permissions, Preset, RememberApprovals, RuleFile};
use toolrail_policy_guards::{PlanModeGuard, WorkspacePathGuard, WorkspaceRoots};
use toolrail_session_log::BoxFuture;
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalService, CallView, HookError, PipelineBuilder, PlanModeSwitch,
    PreExecuteDecision, PreExecuteHook, PreNext, ProtectedPaths,
};

use super::{ScenarioConfig, ScenarioError};

pub(super) struct People {
    approvals: Arc<dyn ApprovalService>,
    /// The permission rules and the workspace they guard, read before anything runs.
    rules: Option<(Arc<Permissions>, WorkspaceRoots)>,
    pub questions: Arc<ScriptedQuestions>,
    pub plan: PlanMode,
}

impl People {
    /// Checks and reads everything first, so a bad scenario writes no session at all.
    /// `approvals` replaces the scripted answers (a terminal, for a real session).
    pub fn new(
        config: &ScenarioConfig,
        workspace: &Path,
        approvals: Option<Arc<dyn ApprovalService>>,
    ) -> Result<Self, ScenarioError> {
        let answers = match &config.approval {
            None => Vec::new(),
            Some(approval) if approval.mode == "scripted" => approval
                .answers
                .iter()
                .map(|answer| parse_answer(answer))
                .collect::<Result<_, _>>()?,
            Some(approval) => {
                return Err(ScenarioError::Invalid(format!(
                    "approval mode `{}`: only `scripted` is known",
                    approval.mode
                )));
            }
        };
        let questions = config.questions.iter().map(|answer| match answer {
            Some(text) => QuestionOutcome::Answered(text.clone()),
            None => QuestionOutcome::Expired,
        });
        let rules = match &config.permissions {
            None => None,
            Some(rules) => {
                let file = RuleFile::from_json(&rules.to_string(), "the scenario's permissions")
                    .map_err(|error| ScenarioError::Invalid(error.to_string()))?;
                let roots = WorkspaceRoots::new([workspace])
                    .map_err(|error| ScenarioError::Invalid(error.to_string()))?;
                let permissions = Permissions::from_file(file, Preset::Untrusted, &roots);
                Some((Arc::new(permissions), roots))
            }
        };
        Ok(Self {
            approvals: approvals.unwrap_or_else(|| {
                Arc::new(ScriptedApprovals::new(answers)) as Arc<dyn ApprovalService>
            }),
            rules,
            questions: Arc::new(ScriptedQuestions::new(questions)),
            plan: PlanMode::new(PlanModeSwitch::new()),
        })
    }

    /// `protected` with what the deny rules name for `read` hidden too, so `grep`, `glob`
    /// and commands skip it as `read` must.
    pub fn protect(&self, protected: ProtectedPaths) -> Result<ProtectedPaths, ScenarioError> {
        match &self.rules {
            Some((permissions, _)) => permissions
                .protect(protected)
                .map_err(|error| ScenarioError::Invalid(error.to_string())),
            None => Ok(protected),
        }
    }

    /// Adds the configured policy to the pipeline. With permission rules: their hook, their
    /// deny guard, the workspace path guard, and the scripted approver remembering session
    /// approvals. With only an approval script: every call asks. With plan mode: its guard.
    pub fn install(
        &self,
        mut pipeline: PipelineBuilder,
        config: &ScenarioConfig,
    ) -> PipelineBuilder {
        if let Some((permissions, roots)) = &self.rules {
            pipeline = pipeline
                .pre_hook(Arc::new(permissions.hook()))
                .guard(Arc::new(permissions.deny_guard()))
                .guard(Arc::new(WorkspacePathGuard::new(roots.clone())))
                .approval(Arc::new(RememberApprovals::new(
                    Arc::clone(&self.approvals),
                    permissions.session().clone(),
                )));
        } else if config.approval.is_some() {
            pipeline = pipeline
                .pre_hook(Arc::new(AskEveryCall))
                .approval(Arc::clone(&self.approvals) as _);
        } else if config.plan_mode {
            // Leaving plan mode asks; with no script nobody answers, and it stays on.
            pipeline = pipeline.approval(Arc::clone(&self.approvals) as _);
        }
        if config.plan_mode {
            pipeline = pipeline.guard(Arc::new(PlanModeGuard::new(self.plan.switch().clone())));
        }
        pipeline
    }
}

fn parse_answer(answer: &str) -> Result<ApprovalAnswer, ScenarioError> {
    Ok(match answer {
        "allowed_once" => ApprovalAnswer::AllowedOnce,
        // An empty key stands for the key the request offers.
        "allowed_for_session" => ApprovalAnswer::AllowedForSession { key: String::new() },
        "rejected" => ApprovalAnswer::Rejected { reason: None },
        "cancelled" => ApprovalAnswer::Cancelled,
        "expired" => ApprovalAnswer::Expired,
        "unavailable" => ApprovalAnswer::Unavailable,
        other => {
            return Err(ScenarioError::Invalid(format!(
                "approval answer `{other}` is not known"
            )));
        }
    })
}

/// Asks for every call (a scenario with an approval script and no rules tests the approval
/// path).
struct AskEveryCall;

impl PreExecuteHook for AskEveryCall {
    fn name(&self) -> &str {
        "scenario-approval"
    }

    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        _next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        let reason = format!(
            "the scenario asks before every call ({})",
            call.identity.name
        );
        Box::pin(async move {
            Ok(PreExecuteDecision::Ask {
                reason,
                session_key: None,
            })
        })
    }
}
