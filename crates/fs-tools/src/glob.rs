//! `glob {pattern, path?}`: the files under a folder whose relative path matches, honouring
//! `.gitignore`, newest first, capped with a count of what was left out.

use std::path::Path;
use std::time::SystemTime;

use globset::{Glob, GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::{
    ClaimMode, Concurrency, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool,
};

use crate::files::{FileTools, LOSSY_NAME_NOTE, Target, looking, maybe_lossy};

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

pub struct GlobTool {
    spec: ToolSpec,
    files: FileTools,
}

impl GlobTool {
    pub const NAME: &'static str = "glob";

    pub fn new(files: FileTools) -> Self {
        let description = format!(
            "List files whose path (relative to `path`, default the workspace root) matches a glob: `*` stays in one folder, `**` crosses folders. Files ignored by .gitignore are left out; newest first; at most {} paths, with a count of the rest.",
            files.limits.glob_results
        );
        let spec = looking(
            ToolSpec::for_args::<GlobArgs>(Self::NAME, description),
            ToolKind::Search,
            "the folder searched",
        );
        Self { spec, files }
    }
}

pub(crate) fn path_glob(pattern: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob: Glob| glob.compile_matcher())
        .map_err(|error| format!("`{pattern}` is not a valid glob: {}", error.kind()))
}

/// A walk under `base` honouring ignore files (also outside a git repository), with hidden
/// files included and `.git` itself skipped.
pub(crate) fn walker(base: &Path) -> WalkBuilder {
    let mut walk = WalkBuilder::new(base);
    walk.hidden(false)
        .require_git(false)
        .filter_entry(|entry| entry.file_name() != ".git");
    walk
}

impl TypedTool for GlobTool {
    type Args = GlobArgs;

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
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
        let files = self.files.clone();
        let cancel = ctx.cancellation().clone();
        let walked = base.clone();
        let found = tokio::task::spawn_blocking(move || {
            let base = walked;
            let mut found: Vec<(SystemTime, String)> = Vec::new();
            for entry in walker(&base.real).build().flatten() {
                if cancel.is_cancelled() {
                    break;
                }
                if !entry.file_type().is_some_and(|kind| kind.is_file()) {
                    continue;
                }
                let Ok(relative) = entry.path().strip_prefix(&base.real) else {
                    continue;
                };
                if matcher.is_match(relative) {
                    let modified = entry
                        .metadata()
                        .ok()
                        .and_then(|metadata| metadata.modified().ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    found.push((modified, files.shown(&base.real.join(relative))));
                }
            }
            found
        })
        .await
        .map_err(|error| ToolFailure::new(format!("the search stopped: {error}")))?;
        if ctx.cancellation().is_cancelled() {
            return Err(ToolFailure::new("cancelled while listing files"));
        }
        Ok(listing(
            found,
            &args.pattern,
            &base,
            self.files.limits.glob_results,
        ))
    }
}

fn listing(
    mut found: Vec<(SystemTime, String)>,
    pattern: &str,
    base: &Target,
    cap: usize,
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
    ToolOutput {
        value: Some(json!({"paths": paths, "total": total, "omitted": omitted})),
        ..ToolOutput::text(text)
    }
    .with_details(json!({
        "type": "search",
        "pattern": pattern,
        "files": paths.iter().map(|path| json!({"path": path})).collect::<Vec<_>>(),
        "omitted_files": omitted,
    }))
}
