//! An assistant message as a stream builds it: text, thinking and tool calls in the order
//! they began, each grown by fragments. Both wire formats assemble into one.

use serde_json::Value;
use toolrail_agent_loop::{ModelDelta, ModelResponse};
use toolrail_session_log::{
    CallId,
    event::{AssistantBlock, AssistantMessage, StopReason},
};

/// Why a stream could not be made into a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The server sent something that is not the format.
    #[error("the server sent a malformed stream: {0}")]
    Malformed(String),
    /// The server reported an error inside the stream.
    #[error("the server reported an error mid-stream: {0}")]
    Server(String),
    /// The server reported, mid-stream, an error that passes (overloaded, a server error,
    /// a rate limit): the request may be tried again.
    #[error("the server reported a passing error mid-stream: {0}")]
    Transient(String),
    /// The stream ended before the message did, with no tool call to mark as cut.
    #[error("the stream ended before the model finished its message")]
    Ended,
}

#[derive(Debug)]
enum Block {
    Prose(Prose, String),
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

/// The blocks that grow by plain text: what the model says, and what it thinks first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prose {
    Text,
    Thinking,
}

impl Prose {
    fn delta(self, fragment: &str) -> ModelDelta {
        let fragment = fragment.to_owned();
        match self {
            Self::Text => ModelDelta::Text(fragment),
            Self::Thinking => ModelDelta::Reasoning(fragment),
        }
    }

    fn block(self, text: String) -> AssistantBlock {
        match self {
            Self::Text => AssistantBlock::Text { text },
            Self::Thinking => AssistantBlock::Thinking { text },
        }
    }
}

/// Whether an error type a server names mid-stream passes, so the request may be tried
/// again: overloaded, internal and rate-limit errors of either format.
pub(crate) fn passes(error_type: &str) -> bool {
    matches!(
        error_type,
        "overloaded_error"
            | "api_error"
            | "rate_limit_error"
            | "server_error"
            | "overloaded"
            | "rate_limit_exceeded"
            | "internal_error"
            | "service_unavailable"
    )
}

/// The message so far, and the deltas that grew it since they were last taken.
#[derive(Debug, Default)]
pub(crate) struct Draft {
    blocks: Vec<Block>,
    pub stop: Option<StopReason>,
    pub usage: Option<Value>,
    /// The server's id of the answer, once one arrived.
    response_id: Option<String>,
    /// The model that answered, as the server named it, once it did.
    response_model: Option<String>,
    deltas: Vec<ModelDelta>,
    /// The place among the message's calls of each call block, by block slot.
    call_index: Vec<(usize, u32)>,
}

impl Draft {
    /// The deltas since the last call, in arrival order.
    pub(crate) fn take_deltas(&mut self) -> Vec<ModelDelta> {
        std::mem::take(&mut self.deltas)
    }

    fn index_of(&self, slot: usize) -> Option<u32> {
        self.call_index
            .iter()
            .find(|(at, _)| *at == slot)
            .map(|(_, index)| *index)
    }

    /// Takes the answer's id and model from wherever the format puts them (every OpenAI
    /// chunk, Anthropic's `message_start`). The first of each that is a non-empty string
    /// holds: a server that sends a placeholder `""` first (a content-filter chunk) has not
    /// named the answer yet, and one that repeats them is not renaming it.
    pub(crate) fn served(&mut self, id: Option<&Value>, model: Option<&Value>) {
        let named = |value: Option<&Value>| {
            value
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
                .map(str::to_owned)
        };
        if self.response_id.is_none() {
            self.response_id = named(id);
        }
        if self.response_model.is_none() {
            self.response_model = named(model);
        }
    }

    /// Appends text, to the last block if it is text.
    pub(crate) fn text(&mut self, fragment: &str) {
        self.prose(Prose::Text, fragment);
    }

    /// Appends reasoning, to the last block if it is reasoning.
    pub(crate) fn thinking(&mut self, fragment: &str) {
        self.prose(Prose::Thinking, fragment);
    }

    /// Appends a fragment of `kind`, to the last block if it is of that kind.
    fn prose(&mut self, kind: Prose, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        self.deltas.push(kind.delta(fragment));
        match self.blocks.last_mut() {
            Some(Block::Prose(last, text)) if *last == kind => text.push_str(fragment),
            Some(Block::Prose(..) | Block::ToolCall { .. }) | None => {
                self.blocks.push(Block::Prose(kind, fragment.to_owned()));
            }
        }
    }

    /// Starts a tool call; returns its slot for later fragments.
    pub(crate) fn start_call(&mut self, id: &str, name: &str) -> usize {
        self.blocks.push(Block::ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: String::new(),
        });
        let slot = self.blocks.len() - 1;
        let index = u32::try_from(self.call_index.len()).unwrap_or(u32::MAX);
        self.call_index.push((slot, index));
        self.deltas.push(ModelDelta::ToolCallStarted {
            index,
            call_id: id.to_owned(),
            name: name.to_owned(),
        });
        slot
    }

    fn arguments_delta(&mut self, slot: usize, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        if let Some(index) = self.index_of(slot) {
            self.deltas.push(ModelDelta::ToolCallArguments {
                index,
                fragment: fragment.to_owned(),
            });
        }
    }

    /// Adds to the call in `slot`: more of its id or name (formats that send them in
    /// pieces), more of its arguments.
    pub(crate) fn grow_call(&mut self, slot: usize, id: &str, name: &str, arguments: &str) {
        if let Some(Block::ToolCall {
            id: call_id,
            name: call_name,
            arguments: call_arguments,
        }) = self.blocks.get_mut(slot)
        {
            call_id.push_str(id);
            call_name.push_str(name);
            call_arguments.push_str(arguments);
            self.arguments_delta(slot, arguments);
        }
    }

    /// Replaces the arguments of the call in `slot` if it has none yet.
    pub(crate) fn default_arguments(&mut self, slot: usize, arguments: &str) {
        if let Some(Block::ToolCall {
            arguments: call_arguments,
            ..
        }) = self.blocks.get_mut(slot)
            && call_arguments.is_empty()
        {
            call_arguments.push_str(arguments);
            self.arguments_delta(slot, arguments);
        }
    }

    /// The id the call in `slot` has so far.
    pub(crate) fn call_id(&self, slot: usize) -> Option<&str> {
        match self.blocks.get(slot) {
            Some(Block::ToolCall { id, .. }) => Some(id),
            Some(Block::Prose(..)) | None => None,
        }
    }

    pub(crate) fn has_calls(&self) -> bool {
        self.blocks
            .iter()
            .any(|block| matches!(block, Block::ToolCall { .. }))
    }

    /// The message once the stream ended. Without a stop reason, a message with a tool call
    /// was cut inside it, perhaps mid-arguments: it is marked `length`, so nothing of it
    /// runs (DESIGN §5). One without is an error.
    pub(crate) fn finish(self) -> Result<ModelResponse, StreamError> {
        let stop = match self.stop {
            Some(stop) => stop,
            None if self.has_calls() => StopReason::Length,
            None => return Err(StreamError::Ended),
        };
        let blocks = self
            .blocks
            .into_iter()
            .enumerate()
            .map(|(n, block)| match block {
                Block::Prose(kind, text) => kind.block(text),
                Block::ToolCall {
                    id,
                    name,
                    arguments,
                } => AssistantBlock::ToolCall {
                    // A server that sends no id (some local ones) still gets distinct ones.
                    call_id: CallId::from(if id.is_empty() {
                        format!("call_{n}")
                    } else {
                        id
                    }),
                    name,
                    arguments_raw: arguments,
                },
            })
            .collect();
        Ok(ModelResponse {
            message: AssistantMessage {
                blocks,
                stop_reason: stop,
            },
            usage: self.usage,
            response_id: self.response_id,
            response_model: self.response_model,
        })
    }
}
