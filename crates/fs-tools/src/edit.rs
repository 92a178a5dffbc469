//! `edit {path, edits: [{old, new, replace_all?}]}`: exact, unique replacements matched
//! against the file as it is, applied all together or not at all. CRLF line endings and a
//! UTF-8 BOM are kept; the result carries a unified diff for the diff card.
//!
//! The file is streamed, never held: one pass for its version and spelling (`shape`), one to
//! find the occurrences (`plan`), one to write the edited file into a staged temporary file
//! with the diff built beside it (`output`, `hunks`). Memory is a piece of the file, the
//! edits' strings and the lines around each change, whatever the file's size.

mod hunks;
mod output;
mod plan;
mod shape;
mod stream;

use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use toolrail_tools_core::log::details;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::{
    ClaimMode, Concurrency, ToolContext, ToolFailure, ToolOutput, ToolResult, ToolSpec, TypedTool,
    arguments::violations,
};

use crate::atomic::{Staged, stage};
use crate::beneath::Creating;
use crate::files::{BINARY, EDIT_FAILED, FileTools, NOT_FOUND, STALE_VERSION, blocking, changing};
use crate::target::{Existing, Target};
use output::write_edited;
use plan::{closest_lines, problems, survey, wanted_line};
use shape::{Shape, ShapeError, shape_of};
use stream::Normalized;

/// Bytes of the file read at a time.
const CHUNK: usize = 1 << 20;
/// Files up to this size are searched for the line closest to an `old` that was not found.
const CLOSEST_LINE_BYTES: u64 = 8 << 20;

/// The arguments of `edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file, relative to the workspace root (or absolute, inside it).
    pub path: String,
    /// The replacements, each matched against the file as it is now (not as earlier edits
    /// in this list leave it).
    pub edits: Vec<Replacement>,
}

/// One replacement: exact text of the file, and what replaces it.
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

/// `edit`: exact, unique replacements in a file the session read, applied all together or
/// not at all.
pub struct EditTool {
    files: FileTools,
}

impl EditTool {
    /// The tool's name, as the model calls it and rules match it.
    pub const NAME: &'static str = "edit";

    /// `edit` over `files`.
    pub fn new(files: FileTools) -> Self {
        Self { files }
    }
}

impl TypedTool for EditTool {
    type Args = EditArgs;

    fn spec(&self) -> ToolSpec {
        changing(ToolSpec::for_args::<EditArgs>(
            Self::NAME,
            "Replace exact text in a file. Each `old` must occur exactly once (or set replace_all), edits must not overlap, and all of them apply or none does. Read the file first in this session; if it changed since, read it again. Line endings and a byte-order mark are kept. Files inside any `.git` folder, and paths hidden or read-only to tools, cannot be edited.",
        ))
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

    async fn preview(&self, args: EditArgs) -> Option<String> {
        let target = self.files.target_to_write(&args.path).ok()?;
        blocking("previewing", move || Ok(preview(&target, &args.edits)))
            .await
            .ok()
    }

    async fn run(&self, ctx: &ToolContext, args: EditArgs) -> ToolResult {
        let target = self.files.target_to_write(&args.path)?;
        let count = args.edits.len();
        let (files, editing) = (self.files.clone(), target.clone());
        let prepared = blocking("editing", move || prepare(&files, &editing, &args.edits)).await?;
        if prepared.after == prepared.before {
            return Err(ToolFailure::with_code(
                EDIT_FAILED,
                format!(
                    "the edits leave `{}` as it is; nothing was written",
                    target.shown
                ),
            ));
        }
        let Prepared {
            before,
            after,
            staged,
            diff,
            added,
            removed,
        } = prepared;
        let committing = target.clone();
        self.files
            .replace(ctx, &target, Some(&before), &after, move || {
                staged
                    .commit()
                    .map_err(|error| committing.io_failure("writing", &error))
            })
            .await?;
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
        .with_details(details::Diff {
            files: vec![details::FileDiff {
                path: target.shown.clone(),
                diff,
                added,
                removed,
            }],
        }))
    }
}

/// An edit ready to be put in place.
struct Prepared {
    before: String,
    after: String,
    staged: Staged,
    diff: String,
    added: u64,
    removed: u64,
}

/// Checks the edits against the file and writes the edited file into a staged temporary
/// file of its folder; nothing visible changes.
fn prepare(
    files: &FileTools,
    target: &Target,
    edits: &[Replacement],
) -> Result<Prepared, ToolFailure> {
    let (mut file, metadata) = open_to_edit(target)?;
    // Not read in this session: said before hashing what may be a large file.
    files.require_observed(target)?;
    let reading = |error: std::io::Error| target.io_failure("reading", &error);
    let shape = shape_to_edit(&mut file, target)?;
    files.check_version(target, Some(&shape.digest))?;
    let plan = plan_to_edit(&mut file, &shape, edits, metadata.len(), target)?;
    let (parent, name) = target.open_parent(Creating::No)?;
    let mut source = rewound(&mut file, &shape).map_err(reading)?;
    let (staged, written) = stage(parent, &name, Some(metadata.mode()), |out| {
        write_edited(
            &mut source,
            &shape,
            &plan.patterns,
            &plan.replacements,
            &target.shown,
            out,
        )
    })
    .map_err(|error| target.io_failure("writing the edited copy of", &error))?;
    if changed_since(&file, &metadata) {
        return Err(ToolFailure::with_code(
            STALE_VERSION,
            format!(
                "`{}` changed while it was being edited; nothing was written. Read it again and redo the edit against what is there now",
                target.shown
            ),
        ));
    }
    Ok(Prepared {
        before: shape.digest,
        after: written.digest,
        staged,
        diff: written.hunks.diff,
        added: written.hunks.added,
        removed: written.hunks.removed,
    })
}

/// The diff the edits would make to the file as it is now, written nowhere; or why they
/// would not apply.
fn preview(target: &Target, edits: &[Replacement]) -> String {
    let attempt = || -> Result<String, ToolFailure> {
        let (mut file, metadata) = open_to_edit(target)?;
        let shape = shape_to_edit(&mut file, target)?;
        let plan = plan_to_edit(&mut file, &shape, edits, metadata.len(), target)?;
        let reading = |error: std::io::Error| target.io_failure("reading", &error);
        let mut source = rewound(&mut file, &shape).map_err(reading)?;
        let written = write_edited(
            &mut source,
            &shape,
            &plan.patterns,
            &plan.replacements,
            &target.shown,
            std::io::sink(),
        )
        .map_err(reading)?;
        Ok(written.hunks.diff)
    };
    attempt().unwrap_or_else(|failure| format!("(the edit would not apply: {})", failure.message()))
}

/// The file an edit changes, open: refused when missing or a folder.
fn open_to_edit(target: &Target) -> Result<(File, Metadata), ToolFailure> {
    match target.open_existing()? {
        Existing::File(file, metadata) => Ok((file, metadata)),
        Existing::Missing => Err(ToolFailure::with_code(
            NOT_FOUND,
            format!("`{}` does not exist; create it with write", target.shown),
        )),
        Existing::Folder => Err(ToolFailure::new(format!(
            "`{}` is a folder; edit changes files",
            target.shown
        ))),
    }
}

/// The file's version and spelling: refused when it is not UTF-8 text.
fn shape_to_edit(file: &mut File, target: &Target) -> Result<Shape, ToolFailure> {
    shape_of(file, CHUNK).map_err(|error| match error {
        ShapeError::NotUtf8 => ToolFailure::with_code(
            BINARY,
            format!(
                "`{}` is not UTF-8 text; edit changes text files only",
                target.shown
            ),
        ),
        ShapeError::Io(error) => target.io_failure("reading", &error),
    })
}

/// Where each edit applies, or every reason they cannot apply together.
fn plan_to_edit(
    file: &mut File,
    shape: &Shape,
    edits: &[Replacement],
    size: u64,
    target: &Target,
) -> Result<Plan, ToolFailure> {
    plan(file, shape, edits, size)
        .map_err(|error| target.io_failure("reading", &error))?
        .map_err(|problems| {
            ToolFailure::with_code(
                EDIT_FAILED,
                format!(
                    "no edit was applied to `{}`:\n{}",
                    target.shown,
                    problems.join("\n")
                ),
            )
        })
}

/// The edits spelled as the file's normal form spells text, once every one is known to apply.
struct Plan {
    patterns: Vec<Vec<u8>>,
    replacements: Vec<Vec<u8>>,
}

/// Finds where each edit applies in `source` (`size` bytes, spelled as `shape` says): the
/// plan, or every reason the edits cannot apply together.
fn plan<S: Read + Seek>(
    source: &mut S,
    shape: &Shape,
    edits: &[Replacement],
    size: u64,
) -> std::io::Result<Result<Plan, Vec<String>>> {
    // In a CRLF file (matched as LF) the edits' CRLF are read as LF too; elsewhere they are
    // matched and written as given.
    let spelled = |text: &str| {
        if shape.crlf {
            text.replace("\r\n", "\n").into_bytes()
        } else {
            text.as_bytes().to_vec()
        }
    };
    let patterns: Vec<Vec<u8>> = edits.iter().map(|edit| spelled(&edit.old)).collect();
    let replacements: Vec<Vec<u8>> = edits.iter().map(|edit| spelled(&edit.new)).collect();
    let survey = survey(&mut rewound(source, shape)?, &patterns)?;
    let missing = survey.found.iter().any(|found| found.count == 0);
    let closest = if missing && size <= CLOSEST_LINE_BYTES {
        let olds: Vec<String> = patterns
            .iter()
            .map(|old| String::from_utf8_lossy(old).into_owned())
            .collect();
        let wanted: Vec<Option<&str>> = olds
            .iter()
            .zip(&survey.found)
            .map(|(old, found)| (found.count == 0).then(|| wanted_line(old)))
            .collect();
        closest_lines(&mut rewound(source, shape)?, &wanted)?
    } else {
        Vec::new()
    };
    let problems = problems(edits, &survey, &closest);
    if !problems.is_empty() {
        return Ok(Err(problems));
    }
    Ok(Ok(Plan {
        patterns,
        replacements,
    }))
}

/// The text of `source` from its start.
fn rewound<'a, S: Read + Seek>(
    source: &'a mut S,
    shape: &Shape,
) -> std::io::Result<Normalized<&'a mut S>> {
    source.seek(SeekFrom::Start(0))?;
    Ok(Normalized::new(source, shape, CHUNK))
}

/// Whether the file was written to since `before` was taken (it is read in three passes).
fn changed_since(file: &File, before: &Metadata) -> bool {
    let stamp = |metadata: &Metadata| {
        (
            metadata.len(),
            metadata.mtime(),
            metadata.mtime_nsec(),
            metadata.ctime(),
            metadata.ctime_nsec(),
        )
    };
    file.metadata()
        .map_or(true, |now| stamp(&now) != stamp(before))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::io::Cursor;

    use super::*;

    fn edit(old: &str, new: &str) -> Replacement {
        Replacement {
            old: old.to_owned(),
            new: new.to_owned(),
            replace_all: false,
        }
    }

    /// The three passes over `text` in memory: the edited text, or the problems.
    fn apply(text: &str, edits: &[Replacement]) -> Result<String, Vec<String>> {
        let mut source = Cursor::new(text.as_bytes().to_vec());
        let shape = shape_of(&mut source, 7).unwrap();
        let plan = plan(&mut source, &shape, edits, text.len() as u64).unwrap()?;
        source.seek(SeekFrom::Start(0)).unwrap();
        let mut out = Vec::new();
        let written = write_edited(
            &mut Normalized::new(&mut source, &shape, 5),
            &shape,
            &plan.patterns,
            &plan.replacements,
            "f",
            &mut out,
        )
        .unwrap();
        assert_eq!(written.digest, crate::version::version_of(&out));
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn edits_match_the_original_and_apply_together() {
        let original = "a = 1\nb = 2\nc = 3\n";
        let edited = apply(
            original,
            &[edit("a = 1", "a = 10"), edit("c = 3", "c = 30")],
        );
        assert_eq!(edited.unwrap(), "a = 10\nb = 2\nc = 30\n");
        let all = Replacement {
            replace_all: true,
            ..edit("=", ":=")
        };
        assert_eq!(apply(original, &[all]).unwrap(), "a := 1\nb := 2\nc := 3\n");
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
        )
        .unwrap_err();
        assert_eq!(
            problems,
            [
                "edit 1: `old` was found 2 times (lines 1, 2); include more surrounding text to make it unique, or set replace_all",
                "edit 2: `old` was not found; the closest line is 3: `fn main() {}`",
            ]
        );
        let overlapping = apply("abcdef", &[edit("abc", "1"), edit("cde", "2")]).unwrap_err();
        assert_eq!(overlapping, ["edit 2 overlaps edit 1"]);
        let many = "x\n".repeat(12);
        let listed = apply(&many, &[edit("x", "y")]).unwrap_err();
        assert_eq!(
            listed,
            [
                "edit 1: `old` was found 12 times (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, and 2 more); include more surrounding text to make it unique, or set replace_all"
            ]
        );
    }

    #[test]
    fn crlf_and_bom_are_kept() {
        let text = "\u{feff}one\r\ntwo\r\n";
        assert_eq!(
            apply(text, &[edit("two\r\n", "2\nthree\n")]).unwrap(),
            "\u{feff}one\r\n2\r\nthree\r\n"
        );
        // Mixed endings are matched as they are, CRLF in an edit included.
        assert_eq!(
            apply("a\r\nb\n", &[edit("a\r\n", "A\r\n")]).unwrap(),
            "A\r\nb\n"
        );
    }
}
