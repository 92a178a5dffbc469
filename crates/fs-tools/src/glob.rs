//! `glob {pattern, path?}`: the files under a folder whose relative path matches, honouring
//! `.gitignore`, newest first, capped with a count of what was left out. Paths hidden from
//! tools are left out (and counted); the walk only proposes names, each listed one is checked
//! beneath its root (a regular file, reached through no symlink) before it is shown.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;
use toolrail_tools_core::log::details;

use globset::{Glob, GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::{
    ClaimMode, Concurrency, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool,
};

use crate::beneath::{self, Kind};
use crate::files::{FileTools, LOSSY_NAME_NOTE, blocking, looking, maybe_lossy};
use crate::target::Target;

/// The arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// A glob over paths relative to `path`: `*.rs` (this folder), `**/*.rs` (any depth),
    /// `src/{a,b}/*.toml`.
    pub pattern: String,
    /// The folder to search (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
}

/// `glob`: the files under a folder whose relative path matches, `.gitignore` honoured,
/// newest first.
pub struct GlobTool {
    files: FileTools,
}

impl GlobTool {
    /// The tool's name, as the model calls it and rules match it.
    pub const NAME: &'static str = "glob";

    /// `glob` over `files`, whose result cap its description states.
    pub fn new(files: FileTools) -> Self {
        Self { files }
    }
}

pub(crate) fn path_glob(pattern: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob: Glob| glob.compile_matcher())
        .map_err(|error| format!("`{pattern}` is not a valid glob: {}", error.kind()))
}

/// A walk under `base` honouring ignore files (also outside a git repository), with dot
/// files included, `.git` itself skipped, and paths hidden from tools skipped (a hidden
/// folder is not entered) and counted in `hidden`. Symlinks are not followed.
pub(crate) fn walker(base: &Path, files: &FileTools, hidden: &Arc<AtomicUsize>) -> WalkBuilder {
    let mut walk = WalkBuilder::new(base);
    let (protected, roots, hidden) = (
        Arc::clone(&files.protected),
        files.roots.clone(),
        Arc::clone(hidden),
    );
    walk.hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" {
                return false;
            }
            if protected.hides_entry(entry.path(), &roots) {
                hidden.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            true
        });
    walk
}

/// Said after a listing or search that left hidden paths out.
pub(crate) fn hidden_note(hidden: usize) -> Option<String> {
    (hidden > 0).then(|| {
        format!(
            "[{hidden} path{} hidden from tools left out]",
            if hidden == 1 { "" } else { "s" }
        )
    })
}

impl TypedTool for GlobTool {
    type Args = GlobArgs;

    fn spec(&self) -> ToolSpec {
        let description = format!(
            "List files whose path (relative to `path`, default the workspace root) matches a glob: `*` stays in one folder, `**` crosses folders. Files ignored by .gitignore are left out; paths hidden from tools are left out (and counted); newest first; at most {} paths, with a count of the rest.",
            self.files.limits.glob_results
        );
        looking(
            ToolSpec::for_args::<GlobArgs>(Self::NAME, description),
            ToolKind::Search,
            "the folder searched",
        )
    }

    fn concurrency(&self, args: &GlobArgs) -> Concurrency {
        self.files
            .claim(args.path.as_deref().unwrap_or("."), ClaimMode::Read)
    }

    fn check(&self, args: &GlobArgs) -> Result<(), Vec<String>> {
        path_glob(&args.pattern)
            .map(drop)
            .map_err(|why| vec![format!("/pattern: {why}")])
    }

    async fn run(&self, ctx: &ToolContext, args: GlobArgs) -> ToolResult {
        let base = self.files.target(args.path.as_deref().unwrap_or("."))?;
        let matcher = path_glob(&args.pattern).map_err(ToolFailure::new)?;
        let cap = self.files.limits.glob_results;
        if self.files.hides(&base) {
            return Ok(listing(Vec::new(), &args.pattern, &base, cap, 1));
        }
        let files = self.files.clone();
        let cancel = ctx.cancellation().clone();
        let walked = base.clone();
        let hidden = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hidden);
        let found = blocking("the search", move || {
            let base = walked;
            let root = base.open_root()?;
            let mut found: Vec<(SystemTime, String)> = Vec::new();
            for entry in walker(&base.real, &files, &counted).build().flatten() {
                if cancel.is_cancelled() {
                    break;
                }
                if !entry.file_type().is_some_and(|kind| kind.is_file()) {
                    continue;
                }
                let Ok(relative) = entry.path().strip_prefix(&base.real) else {
                    continue;
                };
                if !matcher.is_match(relative) {
                    continue;
                }
                // Listed only if it is there, beneath the root, reached through no symlink.
                let child = base.child(relative, &files);
                let Ok(metadata) = beneath::probe(root.as_fd(), &child.relative) else {
                    continue;
                };
                if Kind::of(&metadata) != Kind::File {
                    continue;
                }
                let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((modified, child.shown));
            }
            Ok(found)
        })
        .await?;
        if ctx.cancellation().is_cancelled() {
            return Err(ToolFailure::new("cancelled while listing files"));
        }
        Ok(listing(
            found,
            &args.pattern,
            &base,
            cap,
            hidden.load(Ordering::Relaxed),
        ))
    }
}

fn listing(
    mut found: Vec<(SystemTime, String)>,
    pattern: &str,
    base: &Target,
    cap: usize,
    hidden: usize,
) -> ToolOutput {
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let omitted = total.saturating_sub(cap);
    let paths: Vec<String> = found.into_iter().take(cap).map(|(_, path)| path).collect();
    let mut text = if paths.is_empty() {
        format!("No files under `{}` match `{pattern}`.", base.shown)
    } else {
        paths.join("\n")
    };
    if omitted > 0 {
        text.push_str(&format!(
            "\n[{omitted} more files match; narrow the pattern]"
        ));
    }
    if paths.iter().any(|path| maybe_lossy(path)) {
        text.push_str(&format!("\n[{LOSSY_NAME_NOTE}]"));
    }
    if let Some(note) = hidden_note(hidden) {
        text.push_str(&format!("\n{note}"));
    }
    ToolOutput {
        value: Some(json!({"paths": paths, "total": total, "omitted": omitted, "hidden": hidden})),
        ..ToolOutput::text(text)
    }
    .with_details(details::Search {
        pattern: pattern.to_owned(),
        files: paths
            .iter()
            .map(|path| details::SearchHits {
                path: path.clone(),
                ..details::SearchHits::default()
            })
            .collect(),
        omitted_files: omitted as u64,
        omitted_matches: 0,
    })
}
