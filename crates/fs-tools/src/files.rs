//! What every file tool shares: the workspace roots, the paths protected from tools, the
//! versions the session has observed, the limits, the claims, and the tools' error codes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolrail_tools_core::{ToolCode, tool_code};

use parking_lot::Mutex;
use toolrail_tools_core::log::{Event, EventData};
use toolrail_tools_core::{
    ClaimMode, Concurrency, ProtectedPaths, ResourceClaim, ResourceKey, ToolFailure, ToolKind,
    ToolSpec, WorkspaceRoots,
    spec::{SubjectKind, ToolSpecBuilder},
};

/// Output caps, stated in the tools' descriptions.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Lines `read` returns when no limit is given.
    pub read_lines: usize,
    /// Characters of one line `read` shows before cutting it.
    pub line_chars: usize,
    /// Bytes of text one `read` returns at most (default 56 KiB: under the pipeline's
    /// 64 KiB cap on model-facing text, so a window ends with `read`'s own "continue at"
    /// note rather than being cut in the middle).
    pub read_bytes: usize,
    /// Paths `glob` lists at most.
    pub glob_results: usize,
    /// Matching lines (or files, or counts) `grep` returns at most.
    pub grep_results: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            read_lines: 2_000,
            line_chars: 2_000,
            read_bytes: 56 * 1024,
            glob_results: 200,
            grep_results: 200,
        }
    }
}

/// The state the file tools share. Clones share it.
#[derive(Clone, Debug)]
pub struct FileTools {
    pub(crate) roots: WorkspaceRoots,
    pub(crate) observed: Observations,
    pub(crate) limits: Limits,
    pub(crate) protected: Arc<ProtectedPaths>,
}

impl FileTools {
    /// The state of a new session over `roots`: nothing observed yet, the default
    /// [`Limits`], and [`ProtectedPaths::none`].
    pub fn new(roots: WorkspaceRoots) -> Self {
        Self {
            roots,
            observed: Observations::default(),
            limits: Limits::default(),
            protected: Arc::new(ProtectedPaths::none()),
        }
    }

    /// The tools of a resumed session: the versions it read or wrote are read back from its
    /// `fs/observed` events (a write logs the version it left, too).
    pub fn resumed(roots: WorkspaceRoots, events: &[Event]) -> Self {
        let tools = Self::new(roots);
        for event in events {
            if let EventData::FsObserved(observed) = &event.data {
                tools
                    .observed
                    .set(PathBuf::from(&observed.path), observed.digest.clone());
            }
        }
        tools
    }

    /// Other output caps (default [`Limits::default`]); the tools' descriptions state them,
    /// so set them before making the tools.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// What the tools must not read or change inside the workspace (default
    /// [`ProtectedPaths::none`]: every `.git` read-only, nothing hidden). `read` refuses a
    /// hidden path, `grep` and `glob` leave hidden paths out, `write` and `edit` refuse hidden,
    /// read-only and `.git` paths (`FS_PROTECTED`).
    pub fn with_protected(mut self, protected: ProtectedPaths) -> Self {
        self.protected = Arc::new(protected);
        self
    }

    /// What the tools must not read or change (see [`FileTools::with_protected`]).
    pub fn protected(&self) -> &ProtectedPaths {
        &self.protected
    }

    /// The workspace roots every path is resolved inside.
    pub fn roots(&self) -> &WorkspaceRoots {
        &self.roots
    }

    /// The digest the session last saw of `real`, if it read or wrote it.
    pub fn observed(&self, real: &Path) -> Option<String> {
        self.observed.get(real)
    }

    /// A real path as the model names it: relative to the root it lies in (`.` for a root).
    pub(crate) fn shown(&self, real: &Path) -> String {
        match self
            .roots
            .as_slice()
            .iter()
            .find_map(|root| real.strip_prefix(root).ok())
        {
            Some(inside) if inside.as_os_str().is_empty() => ".".to_owned(),
            Some(inside) => inside.display().to_string(),
            None => real.display().to_string(),
        }
    }

    /// A claim on the real path, so the scheduler runs readers of a file together and its
    /// writers one at a time, in model order. A path that does not resolve claims nothing:
    /// its call is refused before it touches anything.
    pub(crate) fn claim(&self, path: &str, mode: ClaimMode) -> Concurrency {
        match self.roots.confine(path) {
            Ok(real) => Concurrency::Shared(vec![ResourceClaim {
                key: ResourceKey::Path(real),
                mode,
            }]),
            Err(_) => Concurrency::Shared(Vec::new()),
        }
    }
}

/// The digests the session has seen, per real path.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observations {
    seen: Arc<Mutex<HashMap<PathBuf, String>>>,
}

impl Observations {
    pub(crate) fn get(&self, real: &Path) -> Option<String> {
        self.seen.lock().get(real).cloned()
    }

    pub(crate) fn set(&self, real: PathBuf, digest: String) {
        self.seen.lock().insert(real, digest);
    }
}

pub(crate) const OUTSIDE_WORKSPACE: ToolCode = tool_code!("FS_OUTSIDE_WORKSPACE");
pub(crate) const NOT_OBSERVED: ToolCode = tool_code!("FS_NOT_OBSERVED");
pub(crate) const STALE_VERSION: ToolCode = tool_code!("FS_STALE_VERSION");
pub(crate) const NOT_FOUND: ToolCode = tool_code!("FS_NOT_FOUND");
pub(crate) const BINARY: ToolCode = tool_code!("FS_BINARY_FILE");
pub(crate) const EDIT_FAILED: ToolCode = tool_code!("FS_EDIT_FAILED");
pub(crate) const NOT_A_REGULAR_FILE: ToolCode = tool_code!("FS_NOT_A_REGULAR_FILE");
pub(crate) const PROTECTED: ToolCode = tool_code!("FS_PROTECTED");
pub(crate) const PATH_CHANGED: ToolCode = tool_code!("FS_PATH_CHANGED");

/// The spec of a tool that only looks (`read`, `glob`, `grep`): read-only, idempotent,
/// its `path` argument the subject rules match, sharing a read claim on what it reads.
pub(crate) fn looking(spec: ToolSpecBuilder, kind: ToolKind, claimed: &str) -> ToolSpec {
    spec.kind(kind)
        .read_only()
        .idempotent()
        .subject("path", SubjectKind::Path)
        .concurrency_note(format!("shared: a read claim on {claimed}"))
        .build()
}

/// The spec of a tool that changes one file (`write`, `edit`): an edit, its `path` argument
/// the subject rules match, holding a write claim on the file.
pub(crate) fn changing(spec: ToolSpecBuilder) -> ToolSpec {
    spec.kind(ToolKind::Edit)
        .concurrency_note("shared: a write claim on the file")
        .subject("path", SubjectKind::Path)
        .build()
}

/// Said beside a name holding U+FFFD: listings show a name that is not UTF-8 with U+FFFD
/// for its bad bytes, and JSON arguments cannot carry those bytes back.
pub(crate) const LOSSY_NAME_NOTE: &str = "a `\u{fffd}` in a name may stand for bytes that are not UTF-8, and such a file cannot be opened by the name shown; rename it with bash to work on it";

/// Whether a shown name may be a lossy rendering of one that is not UTF-8.
pub(crate) fn maybe_lossy(shown: &str) -> bool {
    shown.contains('\u{fffd}')
}

/// Runs blocking work (reading, hashing, writing, syncing) off the scheduler's thread.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ToolFailure::new(format!("{what} stopped: {error}")))?
}
