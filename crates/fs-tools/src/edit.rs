//! `edit {path, edits: [{old, new, replace_all?}]}`: exact, unique replacements matched
//! against the file as it is, applied all together or not at all. CRLF line endings and a
//! UTF-8 BOM are kept; the result carries a unified diff for the diff card.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use similar::{ChangeTag, TextDiff};
use toolrail_tools_core::{
    ClaimMode, Concurrency, SubjectKind, ToolContext, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool, violations,
};

use crate::files::{BINARY, EDIT_FAILED, FileTools, NOT_FOUND, failure, io_failure};
use crate::version::version_of;

const BOM: &str = "\u{feff}";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file, relative to the workspace root (or absolute, inside it).
    pub path: String,
    /// The replacements, each matched against the file as it is now (not as earlier edits
    /// in this list leave it).
    pub edits: Vec<Replacement>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Replacement {
    /// The text to find, exactly, whitespace and indentation included.
    pub old: String,
    /// What replaces it.
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

pub struct EditTool {
    spec: ToolSpec,
    files: FileTools,
}

impl EditTool {
    pub const NAME: &'static str = "edit";

    pub fn new(files: FileTools) -> Self {
        let spec = ToolSpec::for_args::<EditArgs>(
            Self::NAME,
            "Replace exact text in a file. Each `old` must occur exactly once (or set replace_all), edits must not overlap, and all of them apply or none does. Read the file first in this session; if it changed since, read it again. Line endings and a byte-order mark are kept.",
        )
        .kind(ToolKind::Edit)
        .concurrency_note("shared: a write claim on the file")
        .subject("path", SubjectKind::Path);
        Self { spec, files }
    }
}

impl TypedTool for EditTool {
    type Args = EditArgs;

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn concurrency(&self, args: &EditArgs) -> Concurrency {
        self.files.claim(&args.path, ClaimMode::Write)
    }

    fn check(&self, args: &EditArgs) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if args.edits.is_empty() {
            problems.push("/edits: give at least one edit".to_owned());
        }
        for (at, edit) in args.edits.iter().enumerate() {
            if edit.old.is_empty() {
                problems.push(format!(
                    "/edits/{at}/old: must not be empty (to create a file, use write)"
                ));
            } else if edit.old == edit.new {
                problems.push(format!("/edits/{at}: old and new are the same"));
            }
        }
        violations(problems)
    }

    async fn run(&self, ctx: &ToolContext, args: EditArgs) -> ToolResult {
        let target = self.files.target(&args.path)?;
        let bytes = std::fs::read(&target.real).map_err(|error| {
            if error.kind() == std::io::ErrorKind::NotFound {
                failure(
                    NOT_FOUND,
                    format!("`{}` does not exist; create it with write", target.shown),
                )
            } else {
                io_failure("reading", &target, &error)
            }
        })?;
        let before = version_of(&bytes);
        self.files.check_version(&target, Some(&before))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            failure(
                BINARY,
                format!(
                    "`{}` is not UTF-8 text; edit changes text files only",
                    target.shown
                ),
            )
        })?;
        let form = TextForm::of(&text);
        let original = form.normalize(&text);
        let edited = apply(&original, &args.edits, form.crlf).map_err(|problems| {
            failure(
                EDIT_FAILED,
                format!(
                    "no edit was applied to `{}`:\n{}",
                    target.shown,
                    problems.join("\n")
                ),
            )
        })?;
        if edited == original {
            return Err(failure(
                EDIT_FAILED,
                format!(
                    "the edits leave `{}` as it is; nothing was written",
                    target.shown
                ),
            ));
        }
        let diff = TextDiff::from_lines(original.as_str(), edited.as_str());
        let (mut added, mut removed) = (0usize, 0usize);
        for change in diff.iter_all_changes() {
            match change.tag() {
                ChangeTag::Insert => added += 1,
                ChangeTag::Delete => removed += 1,
                ChangeTag::Equal => {}
            }
        }
        let unified = diff
            .unified_diff()
            .context_radius(3)
            .header(&target.shown, &target.shown)
            .to_string();
        let written = form.restore(&edited);
        self.files
            .replace(ctx, &target, Some(&before), written.as_bytes())
            .await?;
        let count = args.edits.len();
        Ok(ToolOutput {
            value: Some(json!({
                "path": target.shown, "edits": count, "added": added, "removed": removed,
            })),
            ..ToolOutput::text(format!(
                "Edited `{}`: {count} edit{}, +{added} −{removed} lines.",
                target.shown,
                if count == 1 { "" } else { "s" }
            ))
        }
        .with_details(json!({
            "type": "diff",
            "files": [{"path": target.shown, "diff": unified, "added": added, "removed": removed}],
        })))
    }
}

/// How a file spells its text: a BOM, and CRLF line endings when every line uses them.
struct TextForm {
    bom: bool,
    crlf: bool,
}

impl TextForm {
    fn of(text: &str) -> Self {
        let body = text.strip_prefix(BOM).unwrap_or(text);
        let newlines = body.matches('\n').count();
        Self {
            bom: text.starts_with(BOM),
            crlf: newlines > 0 && body.matches("\r\n").count() == newlines,
        }
    }

    /// The text edits are matched against: no BOM, `\n` line endings.
    fn normalize(&self, text: &str) -> String {
        let body = text.strip_prefix(BOM).unwrap_or(text);
        if self.crlf {
            body.replace("\r\n", "\n")
        } else {
            body.to_owned()
        }
    }

    fn restore(&self, text: &str) -> String {
        let body = if self.crlf {
            text.replace('\n', "\r\n")
        } else {
            text.to_owned()
        };
        if self.bom {
            format!("{BOM}{body}")
        } else {
            body
        }
    }
}

/// Applies every edit to `original`, or says what is wrong with each one that cannot apply.
/// In a CRLF file (matched as LF) the edits' CRLF are read as LF too; elsewhere they are
/// matched and written as given.
fn apply(original: &str, edits: &[Replacement], crlf: bool) -> Result<String, Vec<String>> {
    let spelled = |text: &str| {
        if crlf {
            text.replace("\r\n", "\n")
        } else {
            text.to_owned()
        }
    };
    let mut problems = Vec::new();
    // (start, end, edit index)
    let mut spans: Vec<(usize, usize, usize)> = Vec::new();
    for (at, edit) in edits.iter().enumerate() {
        let old = spelled(&edit.old);
        let found: Vec<usize> = original
            .match_indices(&old)
            .map(|(start, _)| start)
            .collect();
        match found.len() {
            0 => problems.push(format!(
                "edit {}: `old` was not found{}",
                at + 1,
                closest_line(original, &old)
            )),
            1 => spans.push((found[0], found[0] + old.len(), at)),
            count if edit.replace_all => {
                spans.extend(found.iter().map(|start| (*start, start + old.len(), at)));
                let _ = count;
            }
            count => problems.push(format!(
                "edit {}: `old` was found {count} times (lines {}); include more surrounding text to make it unique, or set replace_all",
                at + 1,
                found
                    .iter()
                    .map(|start| line_of(original, *start).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, first_end, first), (second_start, _, second)) = (pair[0], pair[1]);
        if second_start < first_end && first != second {
            let (early, late) = (first.min(second), first.max(second));
            problems.push(format!("edit {} overlaps edit {}", late + 1, early + 1));
        }
    }
    if !problems.is_empty() {
        problems.dedup();
        return Err(problems);
    }
    let mut edited = String::with_capacity(original.len());
    let mut copied = 0;
    for (start, end, at) in spans {
        edited.push_str(original.get(copied..start).unwrap_or_default());
        edited.push_str(&spelled(&edits[at].new));
        copied = end;
    }
    edited.push_str(original.get(copied..).unwrap_or_default());
    Ok(edited)
}

fn line_of(text: &str, byte: usize) -> usize {
    text.get(..byte)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}

/// `; the closest line is 12: `…`` when some line resembles the first line of `old`.
fn closest_line(original: &str, old: &str) -> String {
    let wanted = old
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or(old)
        .trim();
    if wanted.is_empty() {
        return String::new();
    }
    let best = original
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(at, line)| {
            let ratio = TextDiff::from_chars(wanted, line.trim()).ratio();
            (ratio, at, line)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((ratio, at, line)) if ratio >= 0.6 => {
            format!("; the closest line is {}: `{}`", at + 1, line.trim())
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str) -> Replacement {
        Replacement {
            old: old.to_owned(),
            new: new.to_owned(),
            replace_all: false,
        }
    }

    #[test]
    fn edits_match_the_original_and_apply_together() {
        let original = "a = 1\nb = 2\nc = 3\n";
        let edited = apply(
            original,
            &[edit("a = 1", "a = 10"), edit("c = 3", "c = 30")],
            false,
        )
        .unwrap();
        assert_eq!(edited, "a = 10\nb = 2\nc = 30\n");
    }

    #[test]
    fn every_problem_is_named() {
        let original = "x\nx\nfn main() {}\n";
        let problems = apply(
            original,
            &[
                edit("x", "y"),
                edit("fn mian() {}", "z"),
                edit("x\nfn", "w"),
            ],
            false,
        )
        .unwrap_err();
        assert_eq!(
            problems,
            [
                "edit 1: `old` was found 2 times (lines 1, 2); include more surrounding text to make it unique, or set replace_all",
                "edit 2: `old` was not found; the closest line is 3: `fn main() {}`",
            ]
        );
        let overlapping =
            apply("abcdef", &[edit("abc", "1"), edit("cde", "2")], false).unwrap_err();
        assert_eq!(overlapping, ["edit 2 overlaps edit 1"]);
    }

    #[test]
    fn crlf_and_bom_are_kept() {
        let text = "\u{feff}one\r\ntwo\r\n";
        let form = TextForm::of(text);
        let normalized = form.normalize(text);
        assert_eq!(normalized, "one\ntwo\n");
        let edited = apply(&normalized, &[edit("two\r\n", "2\nthree\n")], form.crlf).unwrap();
        assert_eq!(form.restore(&edited), "\u{feff}one\r\n2\r\nthree\r\n");
        // Mixed endings are matched as they are, CRLF in an edit included.
        let mixed = "a\r\nb\n";
        assert_eq!(
            apply(mixed, &[edit("a\r\n", "A\r\n")], TextForm::of(mixed).crlf).unwrap(),
            "A\r\nb\n"
        );
        assert!(!TextForm::of("a\r\nb\n").crlf);
    }
}
