//! Content blocks: what a model reads, in a tool result or a message.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One block of model-facing content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// What the model reads.
        text: String,
    },
    /// An image, base64-encoded, with its media type (`image/png`).
    Image {
        /// The MIME type of the decoded bytes, e.g. `image/png`.
        media_type: String,
        /// The image bytes, base64-encoded.
        data: String,
    },
    /// A JSON value shown to the model as data.
    Json {
        /// Sent to the model as its compact JSON text.
        value: Value,
    },
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
