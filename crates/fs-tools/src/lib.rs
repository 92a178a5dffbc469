//! File tools (DESIGN §7): `read`, `write`, `edit`, `glob`, `grep`.
//!
//! Every path is resolved inside the workspace roots (symlinks and all) before anything is
//! touched; claims are on the real path, so the scheduler runs readers of a file together and
//! its writers one at a time. The tools then act through a directory fd of the root, on that
//! real path only (`openat2` beneath the root, through no symlink): a symlink swapped in at
//! any moment cannot make an act land elsewhere (`FS_PATH_CHANGED`). Only regular files are
//! read or written (`FS_NOT_A_REGULAR_FILE`: a FIFO is never opened). What
//! [`ProtectedPaths`](toolrail_tools_core::ProtectedPaths) hides is refused to `read` and left
//! out by `grep` and `glob`; hidden, read-only and `.git` paths are refused to `write` and
//! `edit` (`FS_PROTECTED`). Changing a file the session has not read, or that changed since,
//! is refused (`FS_NOT_OBSERVED`, `FS_STALE_VERSION`); observations are logged and rebuilt on
//! resume. A change logs its intent (digests before and after) durably, replaces the file
//! atomically and reports the effect; [`FsEffectProbe`] lets recovery tell whether an
//! interrupted change happened. `edit` streams the file, so its memory does not grow with it.
//!
//! Depends on `tools-core` only.
//!
//! # Example
//!
//! The five tools over a workspace, called through the pipeline: `edit` refuses a file the
//! session has not read, and goes through once `read` has shown it.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use toolrail_fs_tools::FileTools;
//! use toolrail_tools_core::log::MemorySink;
//! use toolrail_tools_core::{CallRequest, Pipeline, RegistryBuilder, WorkspaceRoots, pipeline::BatchControl};
//!
//! let workspace = tempfile::tempdir()?;
//! std::fs::write(workspace.path().join("notes.txt"), "alpha\nbeta\n")?;
//! let files = FileTools::new(WorkspaceRoots::new([workspace.path()])?);
//! let builder = files.tools().into_iter().fold(RegistryBuilder::new(), RegistryBuilder::builtin);
//! let (registry, _warnings) = builder.build()?;
//! let pipeline = Pipeline::builder(Arc::new(MemorySink::new())).build();
//! let (tools, control) = (registry.snapshot(), BatchControl::default());
//! let edit = json!({"path": "notes.txt", "edits": [{"old": "beta", "new": "gamma"}]});
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let call = |id: &str, name: &str, arguments: &serde_json::Value| {
//!     let request = CallRequest::new(id, 0, name, arguments.to_string());
//!     pipeline.execute_one(&tools, request, &control)
//! };
//!
//! let unread = call("c1", "edit", &edit).await?;
//! let code = unread.record().error_code().map(|code| code.as_str());
//! assert_eq!(code, Some("FS_NOT_OBSERVED"));
//!
//! let read = call("c2", "read", &json!({"path": "notes.txt"})).await?;
//! assert_eq!(read.record().text(), "     1\talpha\n     2\tbeta\n"); // numbered lines
//! assert_eq!(call("c3", "edit", &edit).await?.record().error_code(), None);
//! assert_eq!(std::fs::read_to_string(workspace.path().join("notes.txt"))?, "alpha\ngamma\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod atomic;
mod beneath;
mod edit;
mod files;
mod glob;
mod grep;
mod probe;
mod read;
mod target;
mod version;
mod write;

use std::sync::Arc;

use toolrail_tools_core::{Tool, Typed};

pub use atomic::atomic_replace;
pub use edit::{EditArgs, EditTool, Replacement};
pub use files::{FileTools, Limits};
pub use glob::{GlobArgs, GlobTool};
pub use grep::{GrepArgs, GrepOutput, GrepTool};
pub use probe::FsEffectProbe;
pub use read::{ReadArgs, ReadTool};
pub use target::Target;
pub use version::{file_digest, version_of};
pub use write::{WriteArgs, WriteTool};

impl FileTools {
    /// The five tools, sharing this state.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(Typed::new(ReadTool::new(self.clone()))),
            Arc::new(Typed::new(WriteTool::new(self.clone()))),
            Arc::new(Typed::new(EditTool::new(self.clone()))),
            Arc::new(Typed::new(GlobTool::new(self.clone()))),
            Arc::new(Typed::new(GrepTool::new(self.clone()))),
        ]
    }
}
