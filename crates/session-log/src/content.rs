//! Content blocks: what a model reads, in a tool result or a message.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One block of model-facing content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text { text: String },
    /// An image, base64-encoded, with its media type (`image/png`).
    Image { media_type: String, data: String },
    /// A JSON value shown to the model as data.
    Json { value: Value },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a text block, `None` for other blocks.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            Self::Image { .. } | Self::Json { .. } => None,
        }
    }
}
