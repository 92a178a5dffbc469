//! Opening a path beneath a workspace root so that no symlink, present or swapped in at any
//! moment, decides where it lands.
//!
//! The tools act on paths `WorkspaceRoots::confine` already resolved: every symlink the path
//! went through was followed to its target (and refused if that lies outside), so what is
//! left is a real path relative to its root, which passes through no symlink. It is opened
//! from a directory fd of the root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`: a symlink found on the way now was put there since the path was
//! resolved, and the open fails (`ELOOP`) instead of following it. That is stricter than
//! `RESOLVE_BENEATH` alone, on purpose: the claims, the protected-path checks and the
//! observed versions are all keyed by the resolved path, and a symlink that appears later —
//! even one that stays inside, say into `.git` — must not redirect the act away from the
//! path those checks judged. Where `openat2` is missing (`ENOSYS`), the same walk is done
//! one component at a time with `O_NOFOLLOW`.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How `openat2` resolves: beneath the directory, through no symlink of any kind.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Set once `openat2` answered `ENOSYS`: every later open walks.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// What a path names, as `fstat` tells it (the final component never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Folder,
    Symlink,
    Fifo,
    Socket,
    Device,
}

impl Kind {
    pub(crate) fn of(metadata: &Metadata) -> Self {
        let kind = metadata.file_type();
        if kind.is_file() {
            Self::File
        } else if kind.is_dir() {
            Self::Folder
        } else if kind.is_symlink() {
            Self::Symlink
        } else if kind.is_fifo() {
            Self::Fifo
        } else if kind.is_socket() {
            Self::Socket
        } else {
            Self::Device
        }
    }

    /// How a message names it: "a named pipe (FIFO)".
    pub(crate) fn described(self) -> &'static str {
        match self {
            Self::File => "a regular file",
            Self::Folder => "a folder",
            Self::Symlink => "a symlink",
            Self::Fifo => "a named pipe (FIFO)",
            Self::Socket => "a socket",
            Self::Device => "a device",
        }
    }
}

/// Whether an error says a symlink stood in the way (`ELOOP` under `RESOLVE_NO_SYMLINKS` or
/// `O_NOFOLLOW`).
pub(crate) fn is_symlink_in_the_way(error: &io::Error) -> bool {
    Errno::from_io_error(error) == Some(Errno::LOOP)
}

/// Whether an error says the path would leave the directory it is opened beneath.
pub(crate) fn is_escape(error: &io::Error) -> bool {
    Errno::from_io_error(error) == Some(Errno::XDEV)
}

/// A directory fd (`O_PATH`) of a workspace root. The root is a canonical absolute path (no
/// symlinks), so it is opened the same way as anything beneath it, from `/`.
pub(crate) fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let relative = root.strip_prefix("/").map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("workspace root `{}` is not absolute", root.display()),
        )
    })?;
    let slash = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    open_beneath(slash.as_fd(), relative, OFlags::PATH | OFlags::DIRECTORY)
}

/// Opens `relative` beneath `dir` following no symlink, the last component included (with
/// `O_PATH` a symlink there is opened as itself: its [`Kind`] is `Symlink`). `relative`
/// must be made of plain names only (an empty path opens `dir` itself); `O_NOFOLLOW` and
/// `O_CLOEXEC` are always added.
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
) -> io::Result<OwnedFd> {
    let names = names(relative)?;
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let path = if names.is_empty() {
            Path::new(".")
        } else {
            relative
        };
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), RESOLVE) {
            Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            opened => return opened.map_err(io::Error::from),
        }
    }
    walk_and_open(dir, &names, flags)
}

/// Whether opening a folder creates the folders it does not find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Creating {
    No,
    MissingFolders,
}

/// Opens the folder `relative` beneath `dir` for writing into it (`O_RDONLY | O_DIRECTORY`,
/// so it can be synced), following no symlink; with [`Creating::MissingFolders`] the folders
/// that do not exist are made, one at a time. A symlink where a folder should be is `ELOOP`,
/// anything else that is not a folder `ENOTDIR`: the folder is first opened `O_PATH`
/// (which opens a final symlink as itself) and its kind read from that very fd, then
/// reopened from it (`openat(fd, ".")`), so nothing can be swapped in between.
pub(crate) fn open_folder(
    dir: BorrowedFd<'_>,
    relative: &Path,
    creating: Creating,
) -> io::Result<OwnedFd> {
    let names = names(relative)?;
    let path_fd = match open_beneath(dir, relative, OFlags::PATH) {
        Err(error)
            if creating == Creating::MissingFolders && error.kind() == io::ErrorKind::NotFound =>
        {
            walk(dir, &names, Creating::MissingFolders)?
        }
        opened => folder_only(opened?)?,
    };
    Ok(rustix::fs::openat(
        &path_fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `fd` when it is a folder; `ELOOP` for a symlink, `ENOTDIR` for anything else.
fn folder_only(fd: OwnedFd) -> io::Result<OwnedFd> {
    use rustix::fs::FileType;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind == FileType::Directory {
        Ok(fd)
    } else if kind == FileType::Symlink {
        Err(Errno::LOOP.into())
    } else {
        Err(Errno::NOTDIR.into())
    }
}

/// The plain names of `relative`; anything else (`..`, a root, `.`) is refused, since
/// nothing the tools open beneath a root is spelled that way.
fn names(relative: &Path) -> io::Result<Vec<&OsStr>> {
    relative
        .components()
        .map(|component| match component {
            Component::Normal(name) => Ok(name),
            Component::CurDir
            | Component::ParentDir
            | Component::RootDir
            | Component::Prefix(_) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not a plain relative path", relative.display()),
            )),
        })
        .collect()
}

/// Walks to the last of `names` one component at a time, every folder on the way opened
/// `O_PATH | O_NOFOLLOW` and its kind read from that fd: a symlink anywhere fails the walk
/// with `ELOOP`, as `RESOLVE_NO_SYMLINKS` would, and single names cannot climb (`..` never
/// reaches here), so the walk stays beneath `dir`. Returns an `O_PATH` fd of the last folder.
fn walk(dir: BorrowedFd<'_>, names: &[&OsStr], creating: Creating) -> io::Result<OwnedFd> {
    let mut current = rustix::fs::openat(dir, ".", OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    for name in names {
        current = folder_only(open_name(current.as_fd(), name, creating)?)?;
    }
    Ok(current)
}

/// One name in `at`, `O_PATH | O_NOFOLLOW`; a missing folder is made first when asked.
fn open_name(at: BorrowedFd<'_>, name: &OsStr, creating: Creating) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(at, name, flags, Mode::empty()) {
        Err(Errno::NOENT) if creating == Creating::MissingFolders => {
            match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(error) => return Err(error.into()),
            }
            Ok(rustix::fs::openat(at, name, flags, Mode::empty())?)
        }
        opened => Ok(opened?),
    }
}

/// The fallback of [`open_beneath`] where `openat2` is missing: the folders walked, then the
/// last name opened with `flags` (which hold `O_NOFOLLOW`), as `openat2` would open it.
fn walk_and_open(dir: BorrowedFd<'_>, names: &[&OsStr], flags: OFlags) -> io::Result<OwnedFd> {
    let Some((last, folders)) = names.split_last() else {
        return Ok(rustix::fs::openat(dir, ".", flags, Mode::empty())?);
    };
    let folder = walk(dir, folders, Creating::No)?;
    Ok(rustix::fs::openat(&folder, *last, flags, Mode::empty())?)
}

/// What `relative` beneath `dir` is, without opening it for reading (an `O_PATH` fd and
/// `fstat`: a FIFO or a device is not opened, a final symlink is not followed).
pub(crate) fn probe(dir: BorrowedFd<'_>, relative: &Path) -> io::Result<Metadata> {
    metadata(open_beneath(dir, relative, OFlags::PATH)?)
}

/// A regular file opened for reading, or what stood there instead.
#[derive(Debug)]
pub(crate) enum Opened {
    File(File, Metadata),
    /// Not a regular file: nothing was opened for reading.
    Other(Kind),
    /// A different file stood there when it was opened than when it was probed.
    Changed,
}

/// Opens the regular file `relative` beneath `dir` for reading. Its kind is probed first
/// through an `O_PATH` fd, so a FIFO, socket or device is never opened; the open itself is
/// `O_NONBLOCK | O_NOCTTY` and checked to be the same regular file, so one swapped in
/// between cannot block or take a terminal either.
pub(crate) fn open_regular(dir: BorrowedFd<'_>, relative: &Path) -> io::Result<Opened> {
    let probed = probe(dir, relative)?;
    let kind = Kind::of(&probed);
    if kind != Kind::File {
        return Ok(Opened::Other(kind));
    }
    let fd = open_beneath(
        dir,
        relative,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
    )?;
    let file = File::from(fd);
    let metadata = file.metadata()?;
    if Kind::of(&metadata) != Kind::File
        || (metadata.dev(), metadata.ino()) != (probed.dev(), probed.ino())
    {
        return Ok(Opened::Changed);
    }
    Ok(Opened::File(file, metadata))
}

/// The metadata of an fd (`fstat`; an `O_PATH` fd too), which is closed after.
pub(crate) fn metadata(fd: OwnedFd) -> io::Result<Metadata> {
    File::from(fd).metadata()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn tree() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("inside/deeper")).unwrap();
        std::fs::write(root.join("inside/file.txt"), "inside").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        std::os::unix::fs::symlink("inside", root.join("in")).unwrap();
        let fd = open_root(&root).unwrap();
        (dir, fd)
    }

    fn both(dir: BorrowedFd<'_>, relative: &str, flags: OFlags) -> (Option<Errno>, Option<Errno>) {
        let errno = |result: io::Result<OwnedFd>| {
            result
                .err()
                .map(|error| Errno::from_io_error(&error).unwrap())
        };
        let names = names(Path::new(relative)).unwrap();
        let by_openat2 = errno(
            rustix::fs::openat2(
                dir,
                relative,
                flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                RESOLVE,
            )
            .map_err(io::Error::from),
        );
        let by_walk = errno(walk_and_open(
            dir,
            &names,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        ));
        (by_openat2, by_walk)
    }

    /// The walk answers as `openat2` does: plain paths open, any symlink on the way is
    /// `ELOOP`, a missing name `ENOENT`.
    #[test]
    fn the_walk_agrees_with_openat2() {
        let (_dir, root) = tree();
        let root = root.as_fd();
        for (relative, flags, expected) in [
            ("inside/file.txt", OFlags::RDONLY, None),
            ("inside/deeper", OFlags::PATH | OFlags::DIRECTORY, None),
            ("out/passwd", OFlags::RDONLY, Some(Errno::LOOP)),
            ("in/file.txt", OFlags::RDONLY, Some(Errno::LOOP)),
            ("out", OFlags::RDONLY, Some(Errno::LOOP)),
            (
                "in",
                OFlags::RDONLY | OFlags::DIRECTORY,
                Some(Errno::NOTDIR),
            ),
            ("inside/missing", OFlags::RDONLY, Some(Errno::NOENT)),
            ("inside/file.txt/x", OFlags::RDONLY, Some(Errno::NOTDIR)),
        ] {
            assert_eq!(
                both(root, relative, flags),
                (expected, expected),
                "{relative}"
            );
        }
        // With O_PATH a final symlink is opened as itself, by both.
        let link = probe(root, Path::new("out")).unwrap();
        assert_eq!(Kind::of(&link), Kind::Symlink);
        let names = names(Path::new("out")).unwrap();
        let walked = walk_and_open(root, &names, OFlags::PATH | OFlags::NOFOLLOW).unwrap();
        assert_eq!(Kind::of(&metadata(walked).unwrap()), Kind::Symlink);
        assert!(open_beneath(root, Path::new("../x"), OFlags::RDONLY).is_err());
    }

    #[test]
    fn creating_walks_make_folders_but_never_follow_a_symlink() {
        let (dir, root) = tree();
        let made = open_folder(
            root.as_fd(),
            Path::new("inside/new/deeper"),
            Creating::MissingFolders,
        )
        .unwrap();
        assert_eq!(Kind::of(&metadata(made).unwrap()), Kind::Folder);
        assert!(dir.path().join("inside/new/deeper").is_dir());
        let through_link =
            open_folder(root.as_fd(), Path::new("out/new"), Creating::MissingFolders).unwrap_err();
        assert_eq!(Errno::from_io_error(&through_link), Some(Errno::LOOP));
        assert!(!Path::new("/etc/new").exists());
        // Where a folder should be: a symlink is ELOOP, a file ENOTDIR, by either route.
        for creating in [Creating::No, Creating::MissingFolders] {
            let link = open_folder(root.as_fd(), Path::new("in"), creating).unwrap_err();
            assert_eq!(Errno::from_io_error(&link), Some(Errno::LOOP));
            let file = open_folder(root.as_fd(), Path::new("inside/file.txt"), creating);
            assert_eq!(
                Errno::from_io_error(&file.unwrap_err()),
                Some(Errno::NOTDIR)
            );
        }
        let names = names(Path::new("in/x")).unwrap();
        let walked = walk(root.as_fd(), &names, Creating::MissingFolders).unwrap_err();
        assert_eq!(Errno::from_io_error(&walked), Some(Errno::LOOP));
    }

    /// The walk (the route where `openat2` is missing) under the symlink race: a folder
    /// swapped with a symlink to outside as fast as a thread can, for a second, while the
    /// walk opens a file in it and creates folders in it. Nothing outside is ever opened
    /// or made.
    #[test]
    fn the_walk_holds_under_the_symlink_race() {
        use std::io::Read;
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;

        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (root, outside) = (base.join("root"), base.join("outside"));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("d/f.txt"), "inside").unwrap();
        std::fs::write(outside.join("f.txt"), "OUTSIDE").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("l")).unwrap();
        let root_fd = open_root(&root).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            let (d, l) = (root.join("d"), root.join("l"));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &d,
                        rustix::fs::CWD,
                        &l,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                }
            })
        };
        let names = names(Path::new("d/f.txt")).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let (mut opened, mut refused, mut n) = (0, 0, 0);
        while std::time::Instant::now() < deadline {
            match walk_and_open(root_fd.as_fd(), &names, OFlags::RDONLY | OFlags::NOFOLLOW) {
                Ok(fd) => {
                    let mut text = String::new();
                    File::from(fd).read_to_string(&mut text).unwrap();
                    assert_eq!(text, "inside");
                    opened += 1;
                }
                Err(_) => refused += 1,
            }
            let made = format!("d/new{n}");
            let _ = open_folder(root_fd.as_fd(), Path::new(&made), Creating::MissingFolders);
            n += 1;
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let outside_names: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
        assert_eq!(outside_names.len(), 1, "only f.txt outside");
        assert!(
            opened > 0 && refused > 0,
            "{opened} opened, {refused} refused"
        );
    }
}
