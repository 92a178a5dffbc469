//! `write {path, content}`, and the one way any file tool changes a file: log the intent
//! (digests before and after) durably, replace the file atomically (temporary file in the same
//! folder, fsync, rename, fsync the folder), then report the effect. A crash at any point
//! leaves the old or the new content, and an intent the recovery probe can check.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::log::{AppendUrgency, Effect, EventData, FsWriteIntent};
use toolrail_tools_core::{
    ClaimMode, Concurrency, SubjectKind, ToolContext, ToolFailure, ToolKind, ToolOutput,
    ToolResult, ToolSpec, TypedTool,
};

use crate::files::{FileTools, Target, io_failure};
use crate::version::{file_digest, version_of};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file, relative to the workspace root (or absolute, inside it).
    pub path: String,
    /// The whole new content.
    pub content: String,
}

pub struct WriteTool {
    spec: ToolSpec,
    files: FileTools,
}

impl WriteTool {
    pub const NAME: &'static str = "write";

    pub fn new(files: FileTools) -> Self {
        let spec = ToolSpec::for_args::<WriteArgs>(
            Self::NAME,
            "Write a file with the given content, creating missing folders; the file is replaced whole and atomically. To overwrite an existing file, read it first in this session; if it changed since, read it again. Prefer edit for changes to part of a file.",
        )
        .kind(ToolKind::Edit)
        .concurrency_note("shared: a write claim on the file")
        .subject("path", SubjectKind::Path);
        Self { spec, files }
    }
}

impl TypedTool for WriteTool {
    type Args = WriteArgs;

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn concurrency(&self, args: &WriteArgs) -> Concurrency {
        self.files.claim(&args.path, ClaimMode::Write)
    }

    async fn run(&self, ctx: &ToolContext, args: WriteArgs) -> ToolResult {
        let target = self.files.target(&args.path)?;
        if target.real.is_dir() {
            return Err(ToolFailure::new(format!(
                "`{}` is a folder; write needs a file path",
                target.shown
            )));
        }
        let before =
            file_digest(&target.real).map_err(|error| io_failure("reading", &target, &error))?;
        self.files.check_version(&target, before.as_deref())?;
        let bytes = args.content.as_bytes();
        let change = self
            .files
            .replace(ctx, &target, before.as_deref(), bytes)
            .await?;
        let lines = args.content.lines().count();
        let verb = if before.is_some() {
            "Overwrote"
        } else {
            "Created"
        };
        Ok(ToolOutput {
            value: Some(json!({
                "path": target.shown, "bytes": bytes.len(), "lines": lines,
                "created": before.is_none(), "digest": change,
            })),
            ..ToolOutput::text(format!(
                "{verb} `{}` ({} bytes, {lines} lines).",
                target.shown,
                bytes.len()
            ))
        })
    }
}

impl FileTools {
    /// Changes `target` from the version `before` (`None`: it does not exist) to `bytes`:
    /// intent logged durably, atomic replace, effect reported, the new version observed.
    /// Returns the new digest.
    pub(crate) async fn replace(
        &self,
        ctx: &ToolContext,
        target: &Target,
        before: Option<&str>,
        bytes: &[u8],
    ) -> Result<String, ToolFailure> {
        let after = version_of(bytes);
        let path = target.real.display().to_string();
        let intent = EventData::FsWriteIntent(FsWriteIntent {
            path: path.clone(),
            before: before.map(str::to_owned),
            after: after.clone(),
        });
        ctx.record(intent, AppendUrgency::Durable)
            .await
            .map_err(|error| {
                ToolFailure::new(format!("could not log the write intent: {error}"))
            })?;
        // Writing and syncing block: off the scheduler's thread.
        let (real, content) = (target.real.clone(), bytes.to_vec());
        tokio::task::spawn_blocking(move || atomic_replace(&real, &content))
            .await
            .map_err(|error| ToolFailure::new(format!("writing stopped: {error}")))?
            .map_err(|error| io_failure("writing", target, &error))?;
        ctx.report_effect(Effect::FileWritten {
            path,
            before: before.map(str::to_owned),
            after: after.clone(),
        });
        // The session knows what it wrote, also after a resume.
        self.observe(ctx, target, &after).await?;
        Ok(after)
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over `path` and
/// syncs the folder. Missing folders are created. The file keeps its permissions if it
/// existed.
pub fn atomic_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let folder = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(folder)?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = folder.join(format!(
        ".{name}.toolrail-{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        if let Ok(existing) = fs::metadata(path) {
            file.set_permissions(existing.permissions())?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        File::open(folder)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}
