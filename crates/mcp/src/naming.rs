//! What an MCP tool is called in the registry: `mcp__<server>__<tool>`, made of the
//! characters every provider accepts (`A-Z a-z 0-9 _ -`), at most 64 of them. A name that
//! had to be cut, or that two tools would share, or that a built-in holds, gets a short
//! suffix from a hash of the server's and the tool's own names — the same whatever order
//! the tools arrive in.

use std::collections::BTreeSet;

/// The longest name providers accept.
pub const MAX_NAME: usize = 64;

/// `text` with every character providers refuse replaced by `_`.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Six hex digits of FNV-1a over the server and tool names: stable across runs and builds.
fn suffix(server: &str, tool: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in server.bytes().chain([0]).chain(tool.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:06x}", hash & 0xff_ffff)
}

/// The name before collisions are considered: sanitized, and cut with a suffix if too long.
pub fn base_name(server: &str, tool: &str) -> String {
    let name = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    if name.len() <= MAX_NAME {
        return name;
    }
    let tag = suffix(server, tool);
    // ASCII only after sanitizing, so any byte index is a character boundary.
    format!("{}_{tag}", &name[..MAX_NAME - tag.len() - 1])
}

/// Names for `tools` (server, tool) that are unique among themselves and never one of
/// `taken` (the built-ins and other tools already registered). The result is in the order
/// given; who keeps a contested name does not depend on that order.
pub fn assign(tools: &[(String, String)], taken: &BTreeSet<String>) -> Vec<String> {
    let mut order: Vec<usize> = (0..tools.len()).collect();
    order.sort_by(|&a, &b| tools[a].cmp(&tools[b]));
    let mut given: BTreeSet<String> = BTreeSet::new();
    let mut names = vec![String::new(); tools.len()];
    for index in order {
        let (server, tool) = &tools[index];
        let mut name = base_name(server, tool);
        if taken.contains(&name) || given.contains(&name) {
            let tag = suffix(server, tool);
            let room = MAX_NAME - tag.len() - 1;
            let stem = name[..name.len().min(room)].to_owned();
            name = format!("{stem}_{tag}");
            // Two names sharing a stem and a hash: count up, deterministically.
            let mut n = 2;
            while taken.contains(&name) || given.contains(&name) {
                let tag = format!("{tag}{n}");
                let room = MAX_NAME - tag.len() - 1;
                name = format!("{}_{tag}", &stem[..stem.len().min(room)]);
                n += 1;
            }
        }
        given.insert(name.clone());
        names[index] = name;
    }
    names
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{MAX_NAME, assign, base_name};

    fn pair(server: &str, tool: &str) -> (String, String) {
        (server.to_owned(), tool.to_owned())
    }

    #[test]
    fn names_are_sanitized_and_cut_to_64_characters_with_a_suffix() {
        assert_eq!(
            base_name("file system", "read.file"),
            "mcp__file_system__read_file"
        );
        assert_eq!(base_name("ünï", "a/b"), "mcp___n___a_b");
        let long = base_name("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_NAME);
        assert!(long.starts_with("mcp__server__xxx"));
        assert_ne!(
            long,
            base_name("server", &"x".repeat(101)),
            "the suffix tells them apart"
        );
    }

    #[test]
    fn collisions_get_suffixes_whatever_the_order_and_built_ins_are_never_taken() {
        let tools = [
            pair("a", "read.file"),
            pair("a", "read_file"),
            pair("b", "x"),
        ];
        let taken = BTreeSet::from(["mcp__b__x".to_owned()]);
        let names = assign(&tools, &taken);
        // `read.file` sorts before `read_file`: it keeps the plain name.
        assert_eq!(
            names[0], "mcp__a__read_file",
            "the first in name order keeps it"
        );
        assert!(names[1].starts_with("mcp__a__read_file_") && names[1].len() == 24);
        assert!(names[2].starts_with("mcp__b__x_"), "{}", names[2]);
        let reversed: Vec<(String, String)> = tools.iter().rev().cloned().collect();
        let mut again = assign(&reversed, &taken);
        again.reverse();
        assert_eq!(again, names);
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), 3);
    }
}
