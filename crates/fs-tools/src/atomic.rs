//! Replacing a file atomically inside an open parent folder: the new content is written to a
//! temporary file in that folder and synced, then renamed over the name (`renameat`, which
//! replaces a symlink there rather than following it) and the folder synced.
//!
//! Temporary files are made with `O_TMPFILE` where the filesystem has it: they have no name
//! until they are whole, so a crash while writing leaves nothing behind. Only the two calls
//! that publish one (`linkat` to a temporary name, `renameat` over the file) leave it named,
//! for microseconds. Where `O_TMPFILE` is refused, the temporary file is named from the
//! start. Either way the name is recognisable (`.<name>.toolrail-<pid>-<n>.tmp`), and before
//! staging into a folder the temporaries there of processes that are gone (or older than an
//! hour, should a pid have been reused) are removed: an interrupted write leaves a temporary
//! file at most until the next write into the same folder.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, CWD, Mode, OFlags};
use rustix::io::Errno;

/// The marker in a temporary file's name.
const MARK: &str = ".toolrail-";
/// A temporary file older than this is stale even when its pid is alive (reused).
const STALE_AFTER: Duration = Duration::from_secs(3600);
/// Bytes of the file's own name kept in its temporary's name (`NAME_MAX` is 255).
const NAME_KEPT: usize = 160;

/// New content for `name`, written and synced in a temporary file of its folder, not yet
/// visible. [`commit`](Staged::commit) puts it in place; dropping it discards it.
#[derive(Debug)]
pub(crate) struct Staged {
    parent: OwnedFd,
    name: OsString,
    file: File,
    /// The temporary's name, once it has one.
    temporary: Option<OsString>,
}

/// Stages new content for `name` in `parent` (a folder opened `O_RDONLY | O_DIRECTORY`):
/// `fill` writes it; the file gets `mode` (the permission bits of the file it replaces,
/// without setuid/setgid/sticky) or the default of a new file.
pub(crate) fn stage<T>(
    parent: OwnedFd,
    name: &OsStr,
    mode: Option<u32>,
    fill: impl FnOnce(&mut File) -> io::Result<T>,
) -> io::Result<(Staged, T)> {
    stage_as(Temporary::UnnamedIfPossible, parent, name, mode, fill)
}

/// How the temporary file is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Temporary {
    /// `O_TMPFILE`, or a named file where the filesystem refuses it.
    UnnamedIfPossible,
    /// Named from the start (what a filesystem without `O_TMPFILE` gets; for tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Named,
}

fn stage_as<T>(
    temporary: Temporary,
    parent: OwnedFd,
    name: &OsStr,
    mode: Option<u32>,
    fill: impl FnOnce(&mut File) -> io::Result<T>,
) -> io::Result<(Staged, T)> {
    remove_stale_temporaries(&parent);
    let unnamed = match temporary {
        Temporary::UnnamedIfPossible => rustix::fs::openat(
            &parent,
            ".",
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ),
        Temporary::Named => Err(Errno::OPNOTSUPP),
    };
    let (file, temporary) = match unnamed {
        Ok(fd) => (File::from(fd), None),
        // Not supported here (EOPNOTSUPP), or a kernel that reads O_TMPFILE as O_DIRECTORY.
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {
            let temporary = temporary_name(name);
            let fd = rustix::fs::openat(
                &parent,
                &temporary,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )?;
            (File::from(fd), Some(temporary))
        }
        Err(error) => return Err(error.into()),
    };
    let mut staged = Staged {
        parent,
        name: name.to_owned(),
        file,
        temporary,
    };
    if let Some(mode) = mode {
        rustix::fs::fchmod(&staged.file, Mode::from_raw_mode(mode & 0o777))?;
    }
    let value = fill(&mut staged.file)?;
    staged.file.flush()?;
    staged.file.sync_all()?;
    Ok((staged, value))
}

impl Staged {
    /// Puts the content in place: renamed over the name, the folder synced.
    pub(crate) fn commit(mut self) -> io::Result<()> {
        let temporary = match self.temporary.clone() {
            Some(temporary) => temporary,
            None => {
                let temporary = temporary_name(&self.name);
                link_unnamed(&self.file, &self.parent, &temporary)?;
                self.temporary = Some(temporary.clone());
                temporary
            }
        };
        rustix::fs::renameat(&self.parent, &temporary, &self.parent, &self.name)?;
        self.temporary = None;
        rustix::fs::fsync(&self.parent)?;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(temporary) = self.temporary.take() {
            let _ = rustix::fs::unlinkat(&self.parent, &temporary, AtFlags::empty());
        }
    }
}

/// Gives an `O_TMPFILE` file a name: `linkat(AT_EMPTY_PATH)` (allowed without privileges
/// since Linux 6.10), else through `/proc/self/fd`, as `open(2)` documents.
fn link_unnamed(file: &File, parent: &OwnedFd, name: &OsStr) -> io::Result<()> {
    match rustix::fs::linkat(file, "", parent, name, AtFlags::EMPTY_PATH) {
        Err(Errno::NOENT | Errno::PERM) => link_through_proc(file, parent, name),
        linked => Ok(linked?),
    }
}

fn link_through_proc(file: &File, parent: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let by_proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    Ok(rustix::fs::linkat(
        CWD,
        by_proc.as_str(),
        parent,
        name,
        AtFlags::SYMLINK_FOLLOW,
    )?)
}

/// `.<name>.toolrail-<pid>-<n>.tmp`, unique within this process.
fn temporary_name(name: &OsStr) -> OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let kept = name
        .as_bytes()
        .get(..NAME_KEPT)
        .unwrap_or_else(|| name.as_bytes());
    let mut bytes = Vec::with_capacity(kept.len() + 40);
    bytes.push(b'.');
    bytes.extend_from_slice(kept);
    bytes.extend_from_slice(
        format!(
            "{MARK}{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
        .as_bytes(),
    );
    OsString::from_vec(bytes)
}

/// The pid in a temporary file's name, if the name is one of ours.
fn temporary_pid(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    let at = rest
        .windows(MARK.len())
        .rposition(|window| window == MARK.as_bytes())?;
    let numbers = std::str::from_utf8(rest.get(at + MARK.len()..)?).ok()?;
    let (pid, n) = numbers.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes the temporary files in `parent` that no running write will publish: those of
/// processes that are gone, and any older than [`STALE_AFTER`]. Best effort: a folder that
/// cannot be listed is left as it is.
fn remove_stale_temporaries(parent: &OwnedFd) {
    let Ok(mut entries) = rustix::fs::Dir::read_from(parent) else {
        return;
    };
    let own = std::process::id();
    while let Some(Ok(entry)) = entries.read() {
        let name = entry.file_name().to_bytes();
        let Some(pid) = temporary_pid(name) else {
            continue;
        };
        let Ok(stat) = rustix::fs::statat(parent, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            continue;
        }
        let changed = UNIX_EPOCH + Duration::from_secs(u64::try_from(stat.st_ctime).unwrap_or(0));
        let old = SystemTime::now()
            .duration_since(changed)
            .is_ok_and(|age| age > STALE_AFTER);
        if old || (pid != own && !process_alive(pid)) {
            let _ = rustix::fs::unlinkat(parent, entry.file_name(), AtFlags::empty());
        }
    }
}

fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH))
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over `path` and
/// syncs the folder; missing folders are created and an existing file keeps its permission
/// bits. For callers that trust `path` itself (its folder is opened as written); the tools
/// open the folder beneath a workspace root instead.
pub fn atomic_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` names no file", path.display()),
        )
    })?;
    std::fs::create_dir_all(folder)?;
    let parent = rustix::fs::open(
        folder,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mode = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .filter(|stat| {
            rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile
        })
        .map(|stat| stat.st_mode);
    let (staged, ()) = stage(parent, name, mode, |file| file.write_all(bytes))?;
    staged.commit()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn open_dir(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn temporary_names_are_recognised() {
        let name = temporary_name(OsStr::new("main.rs"));
        assert_eq!(temporary_pid(name.as_bytes()), Some(std::process::id()));
        assert_eq!(temporary_pid(b".a.toolrail-12-3.tmp"), Some(12));
        assert_eq!(temporary_pid(b".a.toolrail-x-3.tmp"), None);
        assert_eq!(temporary_pid(b"a.toolrail-12-3.tmp"), None);
        assert_eq!(temporary_pid(b".a.toolrail-12.tmp"), None);
        let long = OsString::from("x".repeat(255));
        assert!(temporary_name(&long).len() <= 255);
    }

    /// Staged content is invisible until committed, and leaves nothing when dropped.
    #[test]
    fn staged_content_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "old").unwrap();
        let open = || open_dir(dir.path());
        let (staged, ()) = stage(open(), OsStr::new("f.txt"), Some(0o640), |file| {
            file.write_all(b"new")
        })
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "old"
        );
        staged.commit().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "new"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("f.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o640);
        let (dropped, ()) = stage(open(), OsStr::new("f.txt"), None, |file| {
            file.write_all(b"never")
        })
        .unwrap();
        drop(dropped);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "new"
        );
        assert_eq!(names_in(dir.path()), ["f.txt"]);
    }

    /// Where the filesystem has no `O_TMPFILE`, the temporary is named from the start and
    /// removed when discarded; an unnamed one can be linked through `/proc` (the route of
    /// kernels before 6.10 for processes without `CAP_DAC_READ_SEARCH`).
    #[test]
    fn the_named_and_proc_routes_work_too() {
        let dir = tempfile::tempdir().unwrap();
        let open = || open_dir(dir.path());
        let stage_named = || {
            stage_as(
                Temporary::Named,
                open(),
                OsStr::new("f.txt"),
                None,
                |file| file.write_all(b"named"),
            )
            .unwrap()
            .0
        };
        let named = stage_named();
        assert_eq!(names_in(dir.path()).len(), 1, "named while staged");
        drop(named);
        assert!(names_in(dir.path()).is_empty(), "removed when discarded");
        let named = stage_named();
        named.commit().unwrap();
        assert_eq!(names_in(dir.path()), ["f.txt"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "named"
        );

        let parent = open();
        let unnamed = File::from(
            rustix::fs::openat(
                &parent,
                ".",
                OFlags::TMPFILE | OFlags::WRONLY,
                Mode::from_raw_mode(0o600),
            )
            .unwrap(),
        );
        (&unnamed).write_all(b"through proc").unwrap();
        link_through_proc(&unnamed, &parent, OsStr::new("g.txt")).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("g.txt")).unwrap(),
            "through proc"
        );
    }

    /// A temporary file left by a process that is gone is removed by the next write into
    /// its folder; one of a running process is not.
    #[test]
    fn stale_temporaries_are_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait().unwrap();
        let stale = format!(".f.txt.toolrail-{gone_pid}-0.tmp");
        let running = format!(".f.txt.toolrail-{}-999999.tmp", std::process::id());
        std::fs::write(dir.path().join(&stale), "half a write").unwrap();
        std::fs::write(dir.path().join(&running), "in flight").unwrap();
        atomic_replace(&dir.path().join("f.txt"), b"whole").unwrap();
        assert_eq!(names_in(dir.path()), [running.as_str(), "f.txt"]);
    }
}
