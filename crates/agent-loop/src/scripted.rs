//! A model that answers from a script and remembers what it was asked: the embedded
//! default of `toolrail demo`, scenario files, and tests of every layer that drives a model.

use std::collections::VecDeque;

use crate::model::{ModelClient, ModelError, ModelRequest, ModelResponse};
use parking_lot::Mutex;
use toolrail_session_log::{
    BoxFuture,
    event::{AssistantBlock, AssistantMessage, StopReason},
};
use toolrail_tools_core::CancellationToken;

/// Answers with its scripted messages in order; once they run out, it ends the turn with
/// the text "done".
///
/// ```
/// use toolrail_agent_loop::{ModelClient, ModelRequest, ScriptedModel};
/// use toolrail_tools_core::CancellationToken;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let model = ScriptedModel::new([ScriptedModel::text("Hello.")]);
/// let request = ModelRequest { system: None, messages: Default::default(), tools: Default::default() };
/// let cancel = CancellationToken::new();
/// let first = model.complete(&request, &cancel).await?;
/// assert_eq!(first.message.text(), "Hello.");
/// // Once the script runs out, it ends the turn.
/// assert_eq!(model.complete(&request, &cancel).await?.message.text(), "done");
/// assert_eq!(model.requests().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct ScriptedModel {
    script: Mutex<VecDeque<AssistantMessage>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedModel {
    /// A model that answers with `script`, one message per request.
    pub fn new(script: impl IntoIterator<Item = AssistantMessage>) -> Self {
        Self {
            script: Mutex::new(script.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Replaces what is left of the script (a scenario loads each turn's answers before the
    /// turn runs, so one turn never eats the next turn's script).
    pub fn load(&self, script: impl IntoIterator<Item = AssistantMessage>) {
        *self.script.lock() = script.into_iter().collect();
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().clone()
    }

    /// An assistant message with one tool call, asking for its result.
    pub fn tool_call(call_id: &str, name: &str, arguments: &str) -> AssistantMessage {
        AssistantMessage {
            blocks: vec![AssistantBlock::ToolCall {
                call_id: call_id.into(),
                name: name.to_owned(),
                arguments_raw: arguments.to_owned(),
            }],
            stop_reason: StopReason::ToolCalls,
        }
    }

    /// An assistant message with text only, ending the turn.
    pub fn text(text: &str) -> AssistantMessage {
        AssistantMessage {
            blocks: vec![AssistantBlock::Text {
                text: text.to_owned(),
            }],
            stop_reason: StopReason::EndTurn,
        }
    }
}

impl ModelClient for ScriptedModel {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            self.requests.lock().push(request.clone());
            if cancel.is_cancelled() {
                return Err(ModelError::Cancelled);
            }
            let message = self
                .script
                .lock()
                .pop_front()
                .unwrap_or_else(|| Self::text("done"));
            Ok(ModelResponse {
                message,
                usage: None,
                response_id: None,
                response_model: None,
            })
        })
    }
}
