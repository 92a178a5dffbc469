//! What an MCP tool is called in the registry: `mcp__<server>__<tool>`, made of the
//! characters every provider accepts (`A-Z a-z 0-9 _ -`), at most 64 of them — a name that
//! belongs to one server and tool whatever else runs and whatever order servers start in.
//!
//! A *plain* pair keeps its names as they are: the server's name is made of those
//! characters, has no `__` and does not end in `_`, and neither name has `--`; the first `__`
//! after `mcp__` then ends the server's name, so two plain pairs never share a name (server
//! `a` with tool `b__t` is `mcp__a__b__t`; server `a__b` is not plain). Any other pair gets
//! its names sanitized and cut, then `--` and 12 hex digits of SHA-256 over both names
//! exactly: a plain name never holds `--`, so it never meets such a name, and two such
//! names meet only if their hashes do.

use sha2::{Digest, Sha256};

/// The longest name providers accept.
pub const MAX_NAME: usize = 64;

const PREFIX: &str = "mcp__";

/// The mark between a sanitized name and its hash; no plain name has it.
const HASH_MARK: &str = "--";

/// Hex digits of the hash a name that is not plain carries.
const HASH_DIGITS: usize = 12;

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `text` with every character providers refuse replaced by `_`.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect()
}

/// Whether the pair is named as it is (see the module's rule).
fn plain(server: &str, tool: &str) -> bool {
    let clean =
        |text: &str| !text.is_empty() && text.chars().all(allowed) && !text.contains(HASH_MARK);
    clean(server)
        && clean(tool)
        && !server.contains("__")
        && !server.ends_with('_')
        && PREFIX.len() + server.len() + 2 + tool.len() <= MAX_NAME
}

/// `HASH_DIGITS` hex digits of SHA-256 over the two names, each with its length first, so no
/// two pairs hash the same text.
fn hash(server: &str, tool: &str) -> String {
    let mut digest = Sha256::new();
    for part in [server, tool] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    let bytes = digest.finalize();
    let mut hex = String::with_capacity(HASH_DIGITS);
    for byte in bytes.iter().take(HASH_DIGITS / 2) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// The registry name of `tool` of `server`.
///
/// ```
/// use toolrail_mcp::name_of;
///
/// assert_eq!(name_of("github", "search_code"), "mcp__github__search_code");
/// // The pair an outside test found sharing `mcp__a__b__t`: no longer.
/// assert_eq!(name_of("a", "b__t"), "mcp__a__b__t");
/// assert!(name_of("a__b", "t").starts_with("mcp__a__b__t--"));
/// ```
pub fn name_of(server: &str, tool: &str) -> String {
    let name = format!("{PREFIX}{server}__{tool}");
    if plain(server, tool) {
        return name;
    }
    let tag = hash(server, tool);
    let stem = format!("{PREFIX}{}__{}", sanitize(server), sanitize(tool));
    let room = MAX_NAME - HASH_MARK.len() - HASH_DIGITS;
    // ASCII only after sanitizing, so any byte index is a character boundary.
    format!("{}{HASH_MARK}{tag}", &stem[..stem.len().min(room)])
}

/// A server's name as a file name: sanitized, with the hash when that changed it.
pub(crate) fn file_name(server: &str) -> String {
    let clean = sanitize(server);
    if clean == server && !server.is_empty() {
        clean
    } else {
        format!("{clean}{HASH_MARK}{}", hash(server, ""))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::{MAX_NAME, name_of};

    #[test]
    fn plain_names_stay_and_the_rest_carry_a_hash() {
        assert_eq!(name_of("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(name_of("my-server", "x-y"), "mcp__my-server__x-y");
        for (server, tool) in [
            ("file system", "read.file"),
            ("ünï", "a/b"),
            ("a_", "b"),
            ("a", "b--c"),
            ("", "t"),
            ("s", ""),
            ("server", &*"x".repeat(100)),
        ] {
            let name = name_of(server, tool);
            assert!(name.len() <= MAX_NAME, "{name}");
            assert!(name.contains("--"), "{server:?} {tool:?}: {name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{name}"
            );
        }
        // Sanitizing alone would merge these; the hash keeps them apart.
        assert_ne!(name_of("a", "read.file"), name_of("a", "read_file"));
        assert_ne!(
            name_of("server", &"x".repeat(100)),
            name_of("server", &"x".repeat(101))
        );
    }

    #[test]
    fn the_pair_that_collided_now_has_two_names() {
        let one = name_of("a", "b__t");
        let other = name_of("a__b", "t");
        assert_ne!(one, other);
        // Whichever starts first: the names are functions of the pair alone.
        assert_eq!(one, "mcp__a__b__t");
    }

    fn part() -> impl Strategy<Value = String> {
        // Few letters, so that collisions of shape are likely: `_`, `-`, `.` and `a`.
        prop::collection::vec(prop::sample::select(vec!['a', '_', '-', '.', 'b']), 0..8)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        /// Two different pairs never share a name.
        #[test]
        fn names_are_injective(pairs in prop::collection::vec((part(), part()), 1..40)) {
            let distinct: BTreeSet<(String, String)> = pairs.into_iter().collect();
            let names: BTreeSet<String> =
                distinct.iter().map(|(server, tool)| name_of(server, tool)).collect();
            prop_assert_eq!(names.len(), distinct.len());
        }
    }
}
