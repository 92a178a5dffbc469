//! `write {path, content}`, and the one way any file tool changes a file: log the intent
//! (digests before and after) durably, replace the file atomically (a temporary file in the
//! same folder fd, synced, renamed over the name, the folder synced: see `atomic`), then
//! report the effect. A crash at any point leaves the old or the new content, and an intent
//! the recovery probe can check.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use toolrail_tools_core::log::details;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::log::{AppendUrgency, Effect, ToolEvent, event::FsWriteIntent};
use toolrail_tools_core::{
    ClaimMode, Concurrency, ToolContext, ToolFailure, ToolOutput, ToolResult, ToolSpec, TypedTool,
};

use crate::atomic::stage;
use crate::beneath::Creating;
use crate::files::{FileTools, blocking, changing};
use crate::target::{Existing, Target};
use crate::version::{digest_of, version_of};

/// The arguments of `write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file, relative to the workspace root (or absolute, inside it).
    pub path: String,
    /// The whole new content.
    pub content: String,
}

/// `write`: a whole file, created or replaced atomically; an existing file only over the
/// version the session read.
pub struct WriteTool {
    files: FileTools,
}

impl WriteTool {
    /// The tool's name, as the model calls it and rules match it.
    pub const NAME: &'static str = "write";

    /// `write` over `files`.
    pub fn new(files: FileTools) -> Self {
        Self { files }
    }
}

impl TypedTool for WriteTool {
    type Args = WriteArgs;

    fn spec(&self) -> ToolSpec {
        changing(ToolSpec::for_args::<WriteArgs>(
            Self::NAME,
            "Write a file with the given content, creating missing folders; the file is replaced whole and atomically. To overwrite an existing file, read it first in this session; if it changed since, read it again. Prefer edit for changes to part of a file. Files inside any `.git` folder, and paths hidden or read-only to tools, cannot be written.",
        ))
    }

    fn concurrency(&self, args: &WriteArgs) -> Concurrency {
        self.files.claim(&args.path, ClaimMode::Write)
    }

    async fn preview(&self, args: WriteArgs) -> Option<String> {
        let target = self.files.target_to_write(&args.path).ok()?;
        blocking("previewing", move || Ok(preview(&target, &args.content)))
            .await
            .ok()
    }

    async fn run(&self, ctx: &ToolContext, args: WriteArgs) -> ToolResult {
        let target = self.files.target_to_write(&args.path)?;
        // Hashing what is there blocks: off the scheduler's thread.
        let looked = target.clone();
        let new_length = args.content.len();
        // One read of what is there: its version, and the text the card's diff starts from.
        let existing = blocking("looking at the file", move || {
            match looked.open_existing()? {
                Existing::Folder => Err(ToolFailure::new(format!(
                    "`{}` is a folder; write needs a file path",
                    looked.shown
                ))),
                Existing::Missing => Ok(None),
                Existing::File(file, metadata) => {
                    let (digest, before) = contents_of(file, metadata.len(), new_length)
                        .map_err(|error| looked.io_failure("reading", &error))?;
                    Ok(Some((digest, metadata.mode(), before)))
                }
            }
        })
        .await?;
        // The diff the card shows, from the content being replaced.
        let diff = match &existing {
            None => Some(unified_diff(&target, "", &args.content, true)),
            Some((_, _, Before::Text(before))) => {
                Some(unified_diff(&target, before, &args.content, false))
            }
            Some((_, _, Before::Missing | Before::Unshown(_))) => None,
        };
        let before = existing.as_ref().map(|(digest, _, _)| digest.clone());
        self.files.check_version(&target, before.as_deref())?;
        let mode = existing.map(|(_, mode, _)| mode);
        let (bytes, lines) = (args.content.len(), args.content.lines().count());
        let after = version_of(args.content.as_bytes());
        let writing = target.clone();
        let content = args.content;
        self.files
            .replace(ctx, &target, before.as_deref(), &after, move || {
                let (parent, name) = writing.open_parent(Creating::MissingFolders)?;
                let (staged, ()) = stage(parent, &name, mode, |file| {
                    file.write_all(content.as_bytes())
                })
                .map_err(|error| writing.io_failure("writing", &error))?;
                staged
                    .commit()
                    .map_err(|error| writing.io_failure("writing", &error))
            })
            .await?;
        let verb = if before.is_some() {
            "Overwrote"
        } else {
            "Created"
        };
        let output = ToolOutput {
            value: Some(json!({
                "path": target.shown, "bytes": bytes, "lines": lines,
                "created": before.is_none(), "digest": after,
            })),
            ..ToolOutput::text(format!(
                "{verb} `{}` ({bytes} bytes, {lines} lines).",
                target.shown,
            ))
        };
        Ok(match diff {
            Some((diff, added, removed)) => output.with_details(details::Diff {
                files: vec![details::FileDiff {
                    path: target.shown.clone(),
                    diff,
                    added,
                    removed,
                }],
            }),
            None => output,
        })
    }
}

/// Files larger than this are not read for a preview: the size change is said instead.
const PREVIEW_FILE_BYTES: u64 = 4 << 20;
/// The longest a diff may take.
const DIFF_TIME: std::time::Duration = std::time::Duration::from_millis(200);
/// Bytes of preview text kept.
const PREVIEW_BYTES: usize = 64 * 1024;

/// What a file is now, for a diff against new content.
enum Before {
    Text(String),
    Missing,
    /// Not shown as a diff, and why.
    Unshown(String),
}

/// What `target` holds now, read for a diff (up to [`PREVIEW_FILE_BYTES`]).
fn before_of(target: &Target, content: &str) -> Before {
    match target.open_existing() {
        Ok(Existing::Missing) => Before::Missing,
        Ok(Existing::File(mut file, metadata)) => {
            if metadata.len() > PREVIEW_FILE_BYTES {
                return too_large(metadata.len(), content.len());
            }
            let mut bytes = Vec::new();
            match std::io::Read::read_to_end(&mut file, &mut bytes) {
                Ok(_) => text_before(bytes, content.len()),
                Err(error) => Before::Unshown(format!("reading it failed: {error}")),
            }
        }
        Ok(Existing::Folder) => Before::Unshown(format!("`{}` is a folder", target.shown)),
        Err(failure) => Before::Unshown(failure.message().to_owned()),
    }
}

/// A file's version and what a diff can start from, in one read: whole when it is small
/// enough to diff, hashed as a stream when it is not.
fn contents_of(
    mut file: std::fs::File,
    length: u64,
    new_length: usize,
) -> std::io::Result<(String, Before)> {
    if length > PREVIEW_FILE_BYTES {
        return Ok((digest_of(file)?, too_large(length, new_length)));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok((version_of(&bytes), text_before(bytes, new_length)))
}

fn too_large(length: u64, new_length: usize) -> Before {
    Before::Unshown(format!(
        "replaces {length} bytes with {new_length} bytes; too large to show as a diff"
    ))
}

/// The old content as text, when it is UTF-8.
fn text_before(bytes: Vec<u8>, new_length: usize) -> Before {
    match String::from_utf8(bytes) {
        Ok(text) => Before::Text(text),
        Err(_) => Before::Unshown(format!(
            "replaces a file that is not UTF-8 text with {new_length} bytes"
        )),
    }
}

/// The unified diff from `before` to `content` (capped), with the lines it adds and removes.
fn unified_diff(target: &Target, before: &str, content: &str, created: bool) -> (String, u64, u64) {
    let old_name = if created {
        "/dev/null".to_owned()
    } else {
        format!("a/{}", target.shown)
    };
    // Two large, very different texts take long to diff well: past the deadline the diff
    // is a coarser one, never a wait the question or the write has to sit through.
    let diff = similar::TextDiff::configure()
        .timeout(DIFF_TIME)
        .diff_lines(before, content);
    let (mut added, mut removed) = (0u64, 0u64);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&old_name, &format!("b/{}", target.shown))
        .to_string();
    if text.len() > PREVIEW_BYTES {
        let mut end = PREVIEW_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n… (the diff goes on)\n");
    }
    (text, added, removed)
}

/// The unified diff from the file as it is now to `content`, or why there is none.
fn preview(target: &Target, content: &str) -> String {
    match before_of(target, content) {
        Before::Text(before) => unified_diff(target, &before, content, false).0,
        Before::Missing => unified_diff(target, "", content, true).0,
        Before::Unshown(why) => format!("({why})"),
    }
}

impl FileTools {
    /// Changes `target` from the version `before` (`None`: it does not exist) to `after`:
    /// the intent logged durably, then `act` (which puts the new content in place
    /// atomically) run off the scheduler's thread, the effect reported, the new version
    /// observed. Nothing visible changes before the intent is logged: `act` is the first
    /// step that touches the file's folder.
    pub(crate) async fn replace(
        &self,
        ctx: &ToolContext,
        target: &Target,
        before: Option<&str>,
        after: &str,
        act: impl FnOnce() -> Result<(), ToolFailure> + Send + 'static,
    ) -> Result<(), ToolFailure> {
        let path = target.real.display().to_string();
        let intent = ToolEvent::FsWriteIntent(FsWriteIntent {
            path: path.clone(),
            before: before.map(str::to_owned),
            after: after.to_owned(),
        });
        ctx.record(intent, AppendUrgency::Durable)
            .await
            .map_err(|error| {
                ToolFailure::new(format!("could not log the write intent: {error}"))
            })?;
        blocking("writing", act).await?;
        ctx.report_effect(Effect::FileWritten {
            path,
            before: before.map(str::to_owned),
            after: after.to_owned(),
        });
        // The session knows what it wrote, also after a resume.
        self.observe(ctx, target, after).await
    }
}
