//! File tools (DESIGN §7): `read`, `write`, `edit`, `glob`, `grep`.
//!
//! Every path is resolved inside the workspace roots (symlinks and all) before anything is
//! touched; claims are on the real path, so the scheduler runs readers of a file together and
//! its writers one at a time. Changing a file the session has not read, or that changed since,
//! is refused (`FS_NOT_OBSERVED`, `FS_STALE_VERSION`); observations are logged and rebuilt on
//! resume. A change logs its intent (digests before and after) durably, replaces the file
//! atomically and reports the effect; [`FsEffectProbe`] lets recovery tell whether an
//! interrupted change happened.
//!
//! Depends on `tools-core` only.

mod edit;
mod files;
mod glob;
mod grep;
mod probe;
mod read;
mod version;
mod write;

use std::sync::Arc;

use toolrail_tools_core::{Tool, Typed};

pub use edit::{EditArgs, EditTool, Replacement};
pub use files::{FileTools, Limits, Target};
pub use glob::{GlobArgs, GlobTool};
pub use grep::{GrepArgs, GrepOutput, GrepTool};
pub use probe::FsEffectProbe;
pub use read::{ReadArgs, ReadTool};
pub use version::{file_digest, version_of};
pub use write::{WriteArgs, WriteTool, atomic_replace};

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
