//! The seams to people (DESIGN §2, §7): approval services (scripted, a channel for UIs, an
//! interactive terminal), questions (`ask_user`), the todo board (`todo_write`) and plan mode
//! (`exit_plan_mode`). Defaults are closed: a request nobody can answer is never approved,
//! and a question nobody answers never gets an answer made up for it.
//!
//! Depends on `tools-core` only.
//!
//! # Example
//!
//! Plan mode, left only with an approval: `exit_plan_mode` always asks, and here a scripted
//! approver (a person, in a real program) rejects the first plan and allows the second.
//!
//! ```
//! use std::sync::Arc;
//!
//! use toolrail_interaction::{PlanMode, ScriptedApprovals};
//! use toolrail_tools_core::log::{ErrorCode, MemorySink};
//! use toolrail_tools_core::{
//!     ApprovalAnswer, CallRequest, Pipeline, PlanModeSwitch, RegistryBuilder,
//!     pipeline::BatchControl,
//! };
//!
//! let plan_mode = PlanMode::new(PlanModeSwitch::default());
//! let approvals = Arc::new(ScriptedApprovals::new([
//!     ApprovalAnswer::Rejected { reason: Some("test first".to_owned()) },
//!     ApprovalAnswer::AllowedOnce,
//! ]));
//! let (registry, _warnings) = RegistryBuilder::new().builtin(plan_mode.exit_tool()).build()?;
//! let log = Arc::new(MemorySink::new());
//! let pipeline = Pipeline::builder(log.clone()).approval(approvals.clone()).build();
//! let (tools, control) = (registry.snapshot(), BatchControl::default());
//! let exit = |id: &str, plan: &str| {
//!     let arguments = serde_json::json!({ "plan": plan }).to_string();
//!     CallRequest::new(id, 0, "exit_plan_mode", arguments)
//! };
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! plan_mode.enter(log.as_ref()).await?;
//!
//! let rejected = pipeline.execute_one(&tools, exit("c1", "1. edit"), &control).await?;
//! assert_eq!(rejected.record().error_code(), Some(&ErrorCode::ApprovalRejected));
//! assert!(plan_mode.is_active());
//!
//! let allowed = pipeline.execute_one(&tools, exit("c2", "1. test 2. edit"), &control).await?;
//! assert_eq!(allowed.record().error_code(), None);
//! assert!(!plan_mode.is_active());
//! assert_eq!(approvals.asked().len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod approvals;
mod digest;
mod pending;
mod plan;
mod questions;
mod script;
mod todo;

pub use approvals::{
    ApprovalEndpoint, ApprovalInbox, ChannelApprovals, EndpointError, PendingApproval,
    ScriptedApprovals, TerminalApprovals, approval_question, parse_reply,
};
pub use digest::workspace_digest;
pub use pending::{Inbox, Pending};
pub use plan::{ExitPlanMode, ExitPlanModeArgs, PlanMode};
pub use questions::{
    AskUser, AskUserArgs, ChannelQuestions, PendingQuestion, Question, QuestionInbox,
    QuestionOutcome, QuestionService, ResumedQuestions, ScriptedQuestions, UnansweredQuestion,
    resume_questions, unanswered_questions,
};
pub use todo::{StatusArg, TodoArg, TodoBoard, TodoWriteArgs, TodoWriteTool};
