//! Stage 8: post-execute hooks. They change what the model sees, never the recorded effects.

use serde_json::Value;
use toolrail_session_log::{BoxFuture, ContentBlock};

use crate::view::{CallView, HookError};

/// What a post-execute hook does with a result.
#[derive(Clone, Debug, PartialEq)]
pub enum PostExecuteAction {
    /// Keep the result.
    Accept,
    /// Replace the model-facing content.
    ReplaceContent(Vec<ContentBlock>),
    /// Replace the value; it is re-validated against the output schema.
    ReplaceValue(Value),
    /// Withhold the result from the model (`RESULT_BLOCKED`); the model reads the feedback.
    Block {
        /// What the model reads in place of the result.
        feedback: String,
    },
}

/// A post-execute decision, with context messages for the conversation (logged after the
/// whole batch's results).
#[derive(Clone, Debug, PartialEq)]
pub struct PostExecuteDecision {
    /// What happens to the result.
    pub action: PostExecuteAction,
    /// The content of one context message from this hook (its `source` is the hook's name);
    /// empty for none.
    pub context: Vec<ContentBlock>,
}

impl PostExecuteDecision {
    /// Keeps the result, with no context message.
    pub fn accept() -> Self {
        Self {
            action: PostExecuteAction::Accept,
            context: Vec::new(),
        }
    }

    /// Takes `action`, with no context message.
    pub fn action(action: PostExecuteAction) -> Self {
        Self {
            action,
            context: Vec::new(),
        }
    }

    /// Adds a context message.
    pub fn with_context(mut self, block: ContentBlock) -> Self {
        self.context.push(block);
        self
    }
}

/// The result as post-execute hooks see it.
#[derive(Debug)]
pub struct ResultView<'a> {
    /// The model-facing content as it stands: the body's, or what an earlier hook put in its
    /// place. An error result's is its `Error: <message>` text.
    pub content: &'a [ContentBlock],
    /// The value as it stands (an earlier hook may have replaced it); `None` for an error or
    /// a tool that returned none.
    pub value: Option<&'a Value>,
    /// The failure, if the result is one.
    pub error: Option<&'a toolrail_session_log::ToolErrorInfo>,
    /// Effects the tool confirmed: visible, not changeable.
    pub effects: &'a [toolrail_session_log::Effect],
}

impl ResultView<'_> {
    /// The result is a failure (it carries an error).
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The failure's code, if the result is one.
    pub fn error_code(&self) -> Option<&str> {
        self.error.map(|error| error.code.as_str())
    }
}

/// A hook that runs after the body settled.
///
/// Implementors guarantee: the decision depends only on the call and its result; errors and
/// panics are caught and turn the result into `HOOK_FAILED` (effects are kept).
pub trait PostExecuteHook: Send + Sync {
    /// A stable name, given as the `source` of its context messages and in failure messages.
    fn name(&self) -> &str;

    /// Decides what the model sees of `result`, the outcome of `call`. Runs only for calls
    /// whose body started; a refused call never reaches post-execute hooks.
    fn after<'a>(
        &'a self,
        call: &'a CallView<'a>,
        result: &'a ResultView<'a>,
    ) -> BoxFuture<'a, Result<PostExecuteDecision, HookError>>;
}
