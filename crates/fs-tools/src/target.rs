//! A path argument made into something the tools can act on: resolved inside the workspace
//! (its real path keys claims, observations and the protected-path checks), then opened
//! beneath its root through that real path only, never by the path itself (see `beneath`).

use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use toolrail_tools_core::ToolFailure;

use crate::beneath::{self, Creating, Kind, Opened};
use crate::files::{
    FileTools, LOSSY_NAME_NOTE, NOT_A_REGULAR_FILE, NOT_FOUND, OUTSIDE_WORKSPACE, PATH_CHANGED,
    PROTECTED, maybe_lossy,
};

/// A path argument resolved inside the workspace.
#[derive(Clone, Debug)]
pub struct Target {
    /// Where it really leads, symlinks resolved: the key for claims and observations.
    pub real: PathBuf,
    /// How to name it to the model: relative to its root.
    pub shown: String,
    /// The root it lies in.
    pub(crate) root: PathBuf,
    /// `real` from `root`: plain names, no symlink among them when it was resolved.
    pub(crate) relative: PathBuf,
}

/// What a target is on disk right now.
#[derive(Debug)]
pub(crate) enum Existing {
    Missing,
    Folder,
    File(File, Metadata),
}

impl FileTools {
    /// Resolves a path argument; anything leading outside the roots is refused, untouched.
    pub(crate) fn target(&self, path: &str) -> Result<Target, ToolFailure> {
        let outside = |real: &Path| {
            ToolFailure::with_code(
                OUTSIDE_WORKSPACE,
                format!(
                    "`{path}` leads to `{}`, outside the workspace; nothing was touched. Use a path inside {}",
                    real.display(),
                    self.roots
                        .as_slice()
                        .iter()
                        .map(|root| format!("`{}`", root.display()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        };
        let real = self.roots.confine(path).map_err(|real| outside(&real))?;
        let Some((root, relative)) = self
            .roots
            .as_slice()
            .iter()
            .find_map(|root| Some((root, real.strip_prefix(root).ok()?)))
        else {
            return Err(outside(&real));
        };
        Ok(Target {
            shown: self.shown(&real),
            root: root.clone(),
            relative: relative.to_path_buf(),
            real,
        })
    }

    /// [`target`](Self::target), refused when the path is hidden from tools.
    pub(crate) fn target_to_read(&self, path: &str) -> Result<Target, ToolFailure> {
        let target = self.target(path)?;
        let refusal = self.protected.read_refusal(&target.real, &self.roots);
        refused(target, refusal, |shown, why| {
            format!(
                "`{shown}` cannot be read: {why}; nothing was read. If you need what it holds, ask the user"
            )
        })
    }

    /// [`target`](Self::target), refused when the path is hidden, read-only or in `.git`.
    pub(crate) fn target_to_write(&self, path: &str) -> Result<Target, ToolFailure> {
        let target = self.target(path)?;
        let refusal = self.protected.write_refusal(&target.real, &self.roots);
        refused(target, refusal, |shown, why| {
            format!(
                "`{shown}` cannot be changed: {why}; nothing was written. If the change is needed, ask the user to make it (an embedder can allow `.git` writes with `ProtectedPaths::allow_git_writes`)"
            )
        })
    }

    /// Whether `grep` and `glob` must leave `target` out: it is hidden from tools.
    pub(crate) fn hides(&self, target: &Target) -> bool {
        self.protected.hides(&target.real, &self.roots)
    }
}

impl Target {
    /// A path inside this folder target, `inner` relative to it (from a walk of it).
    pub(crate) fn child(&self, inner: &Path, files: &FileTools) -> Target {
        let real = self.real.join(inner);
        Target {
            shown: files.shown(&real),
            root: self.root.clone(),
            relative: self.relative.join(inner),
            real,
        }
    }

    /// A directory fd of the root this target lies in.
    pub(crate) fn open_root(&self) -> Result<OwnedFd, ToolFailure> {
        beneath::open_root(&self.root).map_err(|error| {
            ToolFailure::new(format!(
                "the workspace root `{}` cannot be opened: {error}",
                self.root.display()
            ))
        })
    }

    /// What stands at the target now: missing, a folder, or a regular file opened for
    /// reading. Anything else is refused (`FS_NOT_A_REGULAR_FILE`), never opened.
    pub(crate) fn open_existing(&self) -> Result<Existing, ToolFailure> {
        let root = self.open_root()?;
        match beneath::open_regular(root.as_fd(), &self.relative) {
            Ok(Opened::File(file, metadata)) => Ok(Existing::File(file, metadata)),
            Ok(Opened::Other(Kind::Folder)) => Ok(Existing::Folder),
            Ok(Opened::Other(Kind::Symlink) | Opened::Changed) => Err(self.changed()),
            Ok(Opened::Other(kind)) => Err(self.not_regular(kind)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Existing::Missing),
            Err(error) => Err(self.io_failure("opening", &error)),
        }
    }

    /// The folder the target is in, opened to write into (missing folders created when
    /// asked), and the target's own name in it.
    pub(crate) fn open_parent(
        &self,
        creating: Creating,
    ) -> Result<(OwnedFd, OsString), ToolFailure> {
        let Some(name) = self.relative.file_name() else {
            return Err(ToolFailure::new(format!(
                "`{}` is a workspace root, not a file",
                self.shown
            )));
        };
        let folder = self.relative.parent().unwrap_or_else(|| Path::new(""));
        let root = self.open_root()?;
        let parent = beneath::open_folder(root.as_fd(), folder, creating)
            .map_err(|error| self.io_failure("opening the folder of", &error))?;
        Ok((parent, name.to_owned()))
    }

    /// `FS_NOT_A_REGULAR_FILE` for what stands here.
    pub(crate) fn not_regular(&self, kind: Kind) -> ToolFailure {
        ToolFailure::with_code(
            NOT_A_REGULAR_FILE,
            format!(
                "`{}` is {}, not a regular file; the file tools read and write regular files only (nothing was opened)",
                self.shown,
                kind.described()
            ),
        )
    }

    /// `FS_PATH_CHANGED`: what stands at the path changed while it was being used.
    pub(crate) fn changed(&self) -> ToolFailure {
        ToolFailure::with_code(
            PATH_CHANGED,
            format!(
                "`{}` changed while it was being opened (a symlink or another file appeared in its path after it was resolved, or it is a symlink that leads nowhere); nothing was touched. Try again; if it keeps happening, something else is changing the workspace",
                self.shown
            ),
        )
    }

    /// An I/O error while acting on the target, with the file tools' codes where one fits.
    pub(crate) fn io_failure(&self, what: &str, error: &io::Error) -> ToolFailure {
        if error.kind() == io::ErrorKind::NotFound {
            let hint = if maybe_lossy(&self.shown) {
                format!("; {LOSSY_NAME_NOTE}")
            } else {
                String::new()
            };
            return ToolFailure::with_code(
                NOT_FOUND,
                format!("`{}` does not exist{hint}", self.shown),
            );
        }
        if beneath::is_symlink_in_the_way(error) {
            return self.changed();
        }
        if beneath::is_escape(error) {
            return ToolFailure::with_code(
                OUTSIDE_WORKSPACE,
                format!(
                    "`{}` leads outside the workspace; nothing was touched",
                    self.shown
                ),
            );
        }
        ToolFailure::new(format!("{what} `{}` failed: {error}", self.shown))
    }
}

/// `target`, or the `PROTECTED` failure `message` words when a refusal stands.
fn refused(
    target: Target,
    refusal: Option<String>,
    message: impl FnOnce(&str, String) -> String,
) -> Result<Target, ToolFailure> {
    match refusal {
        None => Ok(target),
        Some(why) => Err(ToolFailure::with_code(
            PROTECTED,
            message(&target.shown, why),
        )),
    }
}
