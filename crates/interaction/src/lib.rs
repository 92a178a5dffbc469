//! The seams to people (DESIGN §2, §7): approval services (scripted, a channel for UIs, an
//! interactive terminal), questions (`ask_user`), the todo board (`todo_write`) and plan mode
//! (`exit_plan_mode`). Defaults are closed: a request nobody can answer is never approved,
//! and a question nobody answers never gets an answer made up for it.
//!
//! Depends on `tools-core` only.

mod approvals;
mod digest;
mod pending;
mod plan;
mod questions;
mod todo;

pub use approvals::{
    ApprovalInbox, ChannelApprovals, PendingApproval, ScriptedApprovals, TerminalApprovals,
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
