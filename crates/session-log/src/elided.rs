//! Content cut to fit the model's cap: a result keeps the whole block it cut (beside the log
//! once stored, like a large value), so replay and the session page can still show it while
//! the model, the log line and the UI share the cut content.

use serde::{Deserialize, Serialize};

use crate::content::ContentBlock;
use crate::digest::digest_of;
use crate::result::json_len;

/// A block of a result's `content` that was cut to a head and a tail around a marker, and
/// the whole block it was cut from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElidedBlock {
    /// Where the cut block stands in the result's `content`.
    pub index: usize,
    /// Bytes of the whole block's text as the model would have read it (a JSON block: its
    /// compact JSON).
    pub bytes: u64,
    /// `sha256:<hex>` of the whole block's compact JSON: the name it is kept under beside
    /// the log (a JSONL session: `<session-id>.blobs/<hex>.json`). The marker names it.
    pub digest: String,
    /// The whole block. Absent only in stored form (it is beside the log under `digest`);
    /// reading a session puts it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole: Option<ContentBlock>,
}

impl ElidedBlock {
    /// Records that the block at `index` was cut from `whole`.
    pub fn new(index: usize, whole: ContentBlock) -> Self {
        let bytes = model_text_len(&whole) as u64;
        Self {
            index,
            bytes,
            digest: digest_of(&stored_bytes(&whole)),
            whole: Some(whole),
        }
    }
}

/// How many bytes of text the model reads for `block` (an image: its encoded data).
pub fn model_text_len(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => text.len(),
        ContentBlock::Json { value } => json_len(value),
        ContentBlock::Image { data, .. } => data.len(),
    }
}

/// The compact JSON a whole block is kept as (and hashed over).
pub fn stored_bytes(block: &ContentBlock) -> Vec<u8> {
    // A block holds strings and JSON values only: encoding it cannot fail. Were it to, the
    // empty text's digest would not match on storing, and the store would say so.
    serde_json::to_vec(block).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_names_the_whole_block_as_it_is_kept() {
        let whole = ContentBlock::text("a long text");
        let elided = ElidedBlock::new(2, whole.clone());
        assert_eq!(
            elided,
            ElidedBlock {
                index: 2,
                bytes: 11,
                digest: digest_of(br#"{"type":"text","text":"a long text"}"#),
                whole: Some(whole),
            }
        );
        let json = ElidedBlock::new(
            0,
            ContentBlock::Json {
                value: serde_json::json!({"a": [1, 2]}),
            },
        );
        assert_eq!(json.bytes, r#"{"a":[1,2]}"#.len() as u64);
    }
}
