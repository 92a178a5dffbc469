//! `sha256:<hex>`: the digests toolrail takes of what it keeps (large values beside the log,
//! whole blocks cut for the model, workspace states). File versions are the file tools'
//! own (`blake3:<hex>` from `fs-tools`).

use sha2::{Digest, Sha256};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Builds a digest from bytes fed in pieces.
#[derive(Clone, Debug, Default)]
pub struct DigestBuilder(Sha256);

impl DigestBuilder {
    /// A builder fed nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds in the next piece; pieces are hashed as if joined.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// `sha256:<hex>` of everything fed in.
    pub fn finish(self) -> String {
        let hash = self.0.finalize();
        let mut text = String::with_capacity(7 + 64);
        text.push_str("sha256:");
        for byte in hash.iter() {
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        text
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    let mut builder = DigestBuilder::new();
    builder.update(bytes);
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_lowercase_hex() {
        assert_eq!(
            digest_of(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut pieces = DigestBuilder::new();
        pieces.update(b"a");
        pieces.update(b"bc");
        assert_eq!(pieces.finish(), digest_of(b"abc"));
    }
}
