//! A model that answers from a script and remembers what it was asked.

use std::collections::VecDeque;

use parking_lot::Mutex;
use toolrail_agent_loop::{ModelClient, ModelError, ModelRequest, ModelResponse};
use toolrail_session_log::{
    BoxFuture,
    event::{AssistantBlock, AssistantMessage, StopReason},
};
use toolrail_tools_core::CancellationToken;

/// Answers with its scripted messages in order; once they run out, it ends the turn with
/// the text "done".
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use toolrail_runtime::Agent;
/// use toolrail_runtime::scenario::ScriptedModel;
/// let folder = tempfile::tempdir()?;
/// let model = Arc::new(ScriptedModel::new([ScriptedModel::text("Hello.")]));
/// let agent = Agent::builder()
///     .workspace([folder.path()])
///     .store(toolrail_runtime::Store::jsonl(folder.path().join("sessions"))?)
///     .model_client(model.clone())
///     .build()
///     .await?;
/// assert_eq!(agent.prompt("Hi").await?.text, "Hello.");
/// assert_eq!(model.requests().len(), 1);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
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
            })
        })
    }
}
