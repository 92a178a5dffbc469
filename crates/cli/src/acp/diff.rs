//! A file change as ACP `diff` content: `{type: "diff", path, oldText, newText}` per hunk
//! of the unified diff a `write` or `edit` result carries — each hunk's old side (context
//! and removed lines) and new side (context and added lines), which is what an editor
//! needs to show the change in place. A new file (a hunk from nothing) has no old text.

use std::path::Path;

use serde_json::{Value, json};
use toolrail_session_log::details::Diff;

/// Each file's hunks as ACP `diff` content, under the file's absolute path.
pub(crate) fn diff_contents(diff: &Diff, root: &Path) -> Vec<Value> {
    diff.files
        .iter()
        .flat_map(|file| {
            let path = root.join(&file.path).display().to_string();
            hunks(&file.diff).into_iter().map(move |hunk| {
                json!({
                    "type": "diff",
                    "path": path,
                    "oldText": hunk.old,
                    "newText": hunk.new,
                })
            })
        })
        .collect()
}

/// One hunk's two sides.
#[derive(Debug, PartialEq)]
struct Hunk {
    /// `None` for a hunk of a file that did not exist (`@@ -0,0 …`).
    old: Option<String>,
    new: String,
}

fn hunks(unified: &str) -> Vec<Hunk> {
    let mut hunks = Vec::new();
    let mut current: Option<(bool, Vec<&str>, Vec<&str>)> = None;
    let finish = |current: Option<(bool, Vec<&str>, Vec<&str>)>, hunks: &mut Vec<Hunk>| {
        if let Some((created, old, new)) = current {
            hunks.push(Hunk {
                old: (!created).then(|| joined(&old)),
                new: joined(&new),
            });
        }
    };
    for line in unified.lines() {
        if let Some(header) = line.strip_prefix("@@") {
            finish(current.take(), &mut hunks);
            let created = header.trim_start().starts_with("-0,0 ");
            current = Some((created, Vec::new(), Vec::new()));
            continue;
        }
        let Some((_, old, new)) = current.as_mut() else {
            // The `---`/`+++` headers and anything before the first hunk.
            continue;
        };
        if let Some(kept) = line.strip_prefix(' ') {
            old.push(kept);
            new.push(kept);
        } else if let Some(removed) = line.strip_prefix('-') {
            old.push(removed);
        } else if let Some(added) = line.strip_prefix('+') {
            new.push(added);
        } else if line.is_empty() {
            // A context line that was empty, written without its space by some diffs.
            old.push("");
            new.push("");
        }
        // `\ No newline at end of file` and anything else: not a line of either side.
    }
    finish(current, &mut hunks);
    hunks
}

fn joined(lines: &[&str]) -> String {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolrail_session_log::details::FileDiff;

    #[test]
    fn each_hunk_becomes_its_old_and_new_sides() {
        let unified = "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n fn a() {}\n-fn b() {}\n+fn b() { 1 }\n fn c() {}\n@@ -10,2 +10,3 @@\n x\n+y\n z\n";
        assert_eq!(
            hunks(unified),
            vec![
                Hunk {
                    old: Some("fn a() {}\nfn b() {}\nfn c() {}\n".to_owned()),
                    new: "fn a() {}\nfn b() { 1 }\nfn c() {}\n".to_owned(),
                },
                Hunk {
                    old: Some("x\nz\n".to_owned()),
                    new: "x\ny\nz\n".to_owned(),
                },
            ]
        );
    }

    #[test]
    fn a_new_file_has_no_old_text_and_paths_are_absolute() {
        let diff = Diff {
            files: vec![FileDiff {
                path: "notes/new.txt".to_owned(),
                diff: "--- /dev/null\n+++ b/notes/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n".to_owned(),
                added: 2,
                removed: 0,
            }],
        };
        assert_eq!(
            diff_contents(&diff, Path::new("/w")),
            vec![json!({
                "type": "diff",
                "path": "/w/notes/new.txt",
                "oldText": null,
                "newText": "one\ntwo\n",
            })]
        );
    }
}
