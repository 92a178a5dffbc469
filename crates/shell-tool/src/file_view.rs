//! What a sandboxed command sees of the file system, decided once per call and built by
//! either tier: everything read-only; in `workspace-write` the roots writable again (the
//! roots themselves, so `touch NEW` works at the top) but every `.git` below them — nested
//! repositories too — read-only; the hidden paths (credentials, the session folder, what a
//! deny rule names for reading) masked; the spill folder read-only; the call's private temp
//! folder writable.
//!
//! Nothing here follows a symlink to decide where a grant lands: roots are canonical, the
//! walk that finds `.git` folders and hidden files never follows links, a hidden file reached
//! through a link is hidden where it really is, and every path is opened again without
//! following symlinks when the mounts are made.

use std::collections::HashMap;
use std::fs::FileType;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toolrail_tools_core::ProtectedPaths;

/// One change to the read-only view, in the order it is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ViewStep {
    /// Bound writable: a root in `workspace-write`, the private temp folder.
    Writable(PathBuf),
    /// Bound read-only on top of what came before: a `.git`, the spill folder, a path
    /// shown again inside a hidden folder.
    ReadOnly(PathBuf),
    /// Masked: an empty read-only folder, or an empty file. `mount_points` (relative) are
    /// made inside a masked folder for the read-only or writable binds that follow.
    Hide {
        path: PathBuf,
        folder: bool,
        mount_points: Vec<PathBuf>,
    },
}

/// The inputs of one call's view.
pub(crate) struct ViewPlan<'a> {
    pub workspace_write: bool,
    pub roots: &'a [PathBuf],
    pub protected: &'a ProtectedPaths,
    pub spill_dir: &'a Path,
    pub private_tmp: &'a Path,
    /// Listings kept from earlier calls of the same tool.
    pub cache: Option<&'a WalkCache>,
}

impl ViewPlan<'_> {
    /// The steps, in order: writable roots, read-only `.git`s, hidden paths, read-only
    /// folders, the private temp folder.
    pub(crate) fn steps(&self) -> Vec<ViewStep> {
        let mut writable = Vec::new();
        let mut gits = Vec::new();
        let mut hidden: Vec<(PathBuf, bool)> = Vec::new();
        if self.workspace_write {
            writable.extend(self.roots.iter().cloned());
        }
        for path in self.protected.hidden() {
            hide_around_roots(&mut hidden, path, self.roots);
        }
        // A deny rule naming one absolute path (`read(/etc/app/secret)`) hides that file
        // wherever it is; the walk below only reaches the workspace.
        for glob in self.protected.hidden_globs() {
            if glob.starts_with('/') && !glob.contains(['*', '?', '[', '{', '\\']) {
                hide_around_roots(
                    &mut hidden,
                    &toolrail_tools_core::workspace::resolve(Path::new(glob)),
                    self.roots,
                );
            }
        }
        let walk_for_gits = self.workspace_write && !self.protected.git_writable();
        let walk_for_globs = !self.protected.hidden_globs().is_empty();
        if walk_for_gits || walk_for_globs {
            let mut walker = Walker {
                cache: self.cache,
                protected: self.protected,
                skip: [self.spill_dir]
                    .into_iter()
                    .chain(self.protected.hidden().iter().map(PathBuf::as_path))
                    .collect(),
                gits: walk_for_gits.then_some(&mut gits),
                hidden: walk_for_globs.then_some(&mut hidden),
            };
            for root in self.roots {
                walker.walk(root, root);
            }
        }
        gits.sort();
        gits.dedup();
        // Shown again read-only: the embedder's readable paths inside hidden folders, and
        // the spill folder unless it lies hidden (then only the temp folder is bound there).
        let mut shown: Vec<PathBuf> = self
            .protected
            .readable()
            .iter()
            .filter(|path| path.exists())
            .cloned()
            .collect();
        let spill_hidden = hidden
            .iter()
            .any(|(path, _)| self.spill_dir.starts_with(path));
        let spill_shown = shown.iter().any(|path| self.spill_dir.starts_with(path));
        if !spill_hidden && !spill_shown {
            shown.push(self.spill_dir.to_path_buf());
        }
        let mut steps: Vec<ViewStep> = writable.into_iter().map(ViewStep::Writable).collect();
        steps.extend(gits.into_iter().map(ViewStep::ReadOnly));
        // A hidden path shown again whole is simply read-only: its bind below covers it.
        // (Hiding it first would put the mask inside the bind's recursive clone.)
        hidden.retain(|(path, _)| !shown.contains(path));
        for (path, folder) in &hidden {
            let mount_points = if *folder {
                mount_points(path, &shown, self.private_tmp)
            } else {
                Vec::new()
            };
            steps.push(ViewStep::Hide {
                path: path.clone(),
                folder: *folder,
                mount_points,
            });
        }
        steps.extend(shown.into_iter().map(ViewStep::ReadOnly));
        steps.push(ViewStep::Writable(self.private_tmp.to_path_buf()));
        steps
    }
}

/// Hides `path`, but never a workspace root: a hidden folder holding one (a session
/// folder with the workspace inside) is hidden entry by entry around it.
fn hide_around_roots(hidden: &mut Vec<(PathBuf, bool)>, path: &Path, roots: &[PathBuf]) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if roots
        .iter()
        .any(|root| path.starts_with(root) && path != root)
        || !meta.is_dir()
    {
        add_hidden(hidden, path.to_path_buf(), meta.is_dir());
        return;
    }
    if !roots.iter().any(|root| root.starts_with(path)) {
        add_hidden(hidden, path.to_path_buf(), true);
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let entry = entry.path();
        if !roots.contains(&entry) {
            hide_around_roots(hidden, &entry, roots);
        }
    }
}

/// Adds a hidden path unless a hidden folder already covers it.
fn add_hidden(hidden: &mut Vec<(PathBuf, bool)>, path: PathBuf, folder: bool) {
    if hidden
        .iter()
        .any(|(covering, is_folder)| *is_folder && path.starts_with(covering))
    {
        return;
    }
    if !hidden.iter().any(|(known, _)| *known == path) {
        hidden.push((path, folder));
    }
}

/// The folders to make inside the masked folder `hidden` so the binds that follow have
/// somewhere to land: for each shown path (or the temp folder) inside it, the components
/// from `hidden` down to it; a temp folder inside a shown folder needs none.
fn mount_points(hidden: &Path, shown: &[PathBuf], private_tmp: &Path) -> Vec<PathBuf> {
    let mut targets: Vec<&Path> = shown
        .iter()
        .map(PathBuf::as_path)
        .filter(|path| path.starts_with(hidden) && *path != hidden)
        .collect();
    let tmp_in_shown = shown.iter().any(|path| private_tmp.starts_with(path));
    if private_tmp.starts_with(hidden) && !tmp_in_shown {
        targets.push(private_tmp);
    }
    let mut points = Vec::new();
    for target in targets {
        let Ok(relative) = target.strip_prefix(hidden) else {
            continue;
        };
        let mut prefix = PathBuf::new();
        for component in relative.components() {
            prefix.push(component);
            if !points.contains(&prefix) {
                points.push(prefix.clone());
            }
        }
    }
    points
}

/// A walk of a root that never follows symlinks, never enters a `.git`, a hidden folder or
/// the spill folder, and collects `.git` entries and files its hidden globs match.
struct Walker<'a> {
    protected: &'a ProtectedPaths,
    skip: Vec<&'a Path>,
    gits: Option<&'a mut Vec<PathBuf>>,
    hidden: Option<&'a mut Vec<(PathBuf, bool)>>,
    cache: Option<&'a WalkCache>,
}

impl Walker<'_> {
    fn walk(&mut self, root: &Path, dir: &Path) {
        let Some(listing) = self.listing(root, dir) else {
            return;
        };
        if let Some(gits) = self.gits.as_deref_mut() {
            gits.extend(listing.gits.iter().cloned());
        }
        if let Some(hidden) = self.hidden.as_deref_mut() {
            for (path, kind) in &listing.globbed {
                hide_entry(hidden, path.clone(), *kind);
            }
        }
        for sub in &listing.folders {
            self.walk(root, sub);
        }
    }

    /// What `dir` holds, from the cache when the folder has not changed since it was read.
    fn listing(&self, root: &Path, dir: &Path) -> Option<Arc<Listing>> {
        let stamp = FolderStamp::of(dir)?;
        if let Some(cache) = self.cache
            && let Some(known) = cache.get(dir, &stamp)
        {
            return Some(known);
        }
        let listing = Arc::new(self.read(root, dir)?);
        if let Some(cache) = self.cache {
            cache
                .reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            cache.put(dir, stamp, Arc::clone(&listing));
        }
        Some(listing)
    }

    fn read(&self, root: &Path, dir: &Path) -> Option<Listing> {
        let entries = std::fs::read_dir(dir).ok()?;
        let mut listing = Listing::default();
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if entry.file_name() == ".git" {
                if !kind.is_symlink() {
                    listing.gits.push(path);
                }
                continue;
            }
            if self.skip.iter().any(|skipped| path == *skipped) {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap_or(&path);
            if self.protected.matches_hidden_glob(relative, &path) {
                listing.globbed.push((path, kind));
                continue;
            }
            if kind.is_dir() {
                listing.folders.push(path);
            }
        }
        Some(listing)
    }
}

/// One folder's entries, as the walk sorts them.
#[derive(Debug, Default)]
struct Listing {
    gits: Vec<PathBuf>,
    globbed: Vec<(PathBuf, FileType)>,
    folders: Vec<PathBuf>,
}

/// What says a folder still holds the same names: its identity and change time, which
/// every entry made, removed or renamed in it moves — and which, unlike the modification
/// time, no process can set back (`utimensat` moves it to now).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FolderStamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl FolderStamp {
    fn of(dir: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(dir).ok()?;
        meta.is_dir().then(|| Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Changed less than `window` seconds ago: another change within the same clock tick
    /// would not move the time, so such a listing is not kept (git's "racy" rule).
    fn recent(&self, window: i64) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(i64::MAX, |since| {
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
            });
        self.ctime.0 >= now.saturating_sub(window)
    }
}

/// Folder listings kept between one tool's calls, so a large workspace costs one `lstat`
/// per folder per call, not a read of every entry. A folder is read again whenever its
/// identity or change time differs, or it had changed less than a second before it
/// was read. Bounded: past [`WalkCache::MAX_FOLDERS`] it starts over.
#[derive(Debug)]
pub(crate) struct WalkCache {
    listings: std::sync::Mutex<HashMap<PathBuf, (FolderStamp, Arc<Listing>)>>,
    /// Seconds a change must be old for its listing to be kept.
    racy_window: i64,
    /// Folders read (not taken from the cache), for tests.
    reads: std::sync::atomic::AtomicUsize,
}

impl Default for WalkCache {
    fn default() -> Self {
        Self {
            listings: std::sync::Mutex::default(),
            racy_window: 1,
            reads: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl WalkCache {
    const MAX_FOLDERS: usize = 200_000;

    fn get(&self, dir: &Path, stamp: &FolderStamp) -> Option<Arc<Listing>> {
        let listings = self
            .listings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (known, listing) = listings.get(dir)?;
        (known == stamp).then(|| Arc::clone(listing))
    }

    fn put(&self, dir: &Path, stamp: FolderStamp, listing: Arc<Listing>) {
        let mut listings = self
            .listings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if stamp.recent(self.racy_window) {
            listings.remove(dir);
            return;
        }
        if listings.len() >= Self::MAX_FOLDERS {
            listings.clear();
        }
        listings.insert(dir.to_path_buf(), (stamp, listing));
    }
}

/// Hides what a matching entry really is: itself, or where its symlink leads.
fn hide_entry(hidden: &mut Vec<(PathBuf, bool)>, path: PathBuf, kind: FileType) {
    if kind.is_symlink() {
        if let Ok(real) = std::fs::canonicalize(&path)
            && let Ok(meta) = std::fs::metadata(&real)
        {
            add_hidden(hidden, real, meta.is_dir());
        }
        return;
    }
    add_hidden(hidden, path, kind.is_dir());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_view_protects_every_git_hides_and_shows_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let work = base.join("work");
        for folder in [
            "work/.git",
            "work/vendor/lib/.git",
            "work/src",
            "home/.ssh",
            "s/out",
        ] {
            std::fs::create_dir_all(base.join(folder)).unwrap();
        }
        std::fs::write(base.join("work/src/.env"), "SECRET=1").unwrap();
        std::fs::write(base.join("work/sub.git"), "").unwrap();
        std::os::unix::fs::symlink(base.join("home"), work.join("link")).unwrap();
        let protected = ProtectedPaths::for_home(base.join("home"))
            .hide(base.join("s"))
            .show_read_only(base.join("s/out"))
            .hide_matching("**/.env")
            .unwrap();
        let roots = vec![work.clone()];
        let plan = ViewPlan {
            workspace_write: true,
            roots: &roots,
            protected: &protected,
            spill_dir: &base.join("s/out"),
            private_tmp: &base.join("s/out/c1.tmp"),
            cache: None,
        };
        assert_eq!(
            plan.steps(),
            vec![
                ViewStep::Writable(work.clone()),
                ViewStep::ReadOnly(work.join(".git")),
                ViewStep::ReadOnly(work.join("vendor/lib/.git")),
                ViewStep::Hide {
                    path: base.join("home/.ssh"),
                    folder: true,
                    mount_points: vec![]
                },
                ViewStep::Hide {
                    path: base.join("s"),
                    folder: true,
                    mount_points: vec![PathBuf::from("out")]
                },
                ViewStep::Hide {
                    path: work.join("src/.env"),
                    folder: false,
                    mount_points: vec![]
                },
                ViewStep::ReadOnly(base.join("s/out")),
                ViewStep::Writable(base.join("s/out/c1.tmp")),
            ]
        );
        // A hidden folder holding the workspace is hidden around it.
        let session = base.join("session");
        std::fs::create_dir_all(session.join("workspace")).unwrap();
        std::fs::write(session.join("s.jsonl"), "{}").unwrap();
        let roots_inside = vec![session.join("workspace")];
        let around = ProtectedPaths::none().hide(&session);
        let steps = ViewPlan {
            workspace_write: true,
            roots: &roots_inside,
            protected: &around,
            spill_dir: &session.join("outputs"),
            private_tmp: &session.join("outputs/c1.tmp"),
            cache: None,
        }
        .steps();
        assert!(steps.contains(&ViewStep::Hide {
            path: session.join("s.jsonl"),
            folder: false,
            mount_points: vec![]
        }));
        assert!(!steps.iter().any(|step| matches!(step, ViewStep::Hide { path, .. } if *path == session || path.starts_with(session.join("workspace")))));
        // Read-only mode walks for hidden files only, and binds no root.
        let read_only = ViewPlan {
            workspace_write: false,
            ..plan
        };
        let steps = read_only.steps();
        assert!(!steps.contains(&ViewStep::Writable(work.clone())));
        assert!(!steps.contains(&ViewStep::ReadOnly(work.join(".git"))));
    }

    /// Unchanged folders come from the cache; a `.git` made anywhere changes its folder's
    /// change time, and is found on the next walk.
    #[test]
    fn the_walk_cache_reads_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(dir.path()).unwrap();
        for folder in ["a/b/c", "d/e", ".git"] {
            std::fs::create_dir_all(work.join(folder)).unwrap();
        }
        let cache = WalkCache {
            racy_window: -1,
            ..WalkCache::default()
        };
        let protected = ProtectedPaths::none();
        let roots = vec![work.clone()];
        let gits = |cache: &WalkCache| {
            ViewPlan {
                workspace_write: true,
                roots: &roots,
                protected: &protected,
                spill_dir: &work.join("spill"),
                private_tmp: &work.join("spill/t"),
                cache: Some(cache),
            }
            .steps()
            .into_iter()
            .filter(|step| matches!(step, ViewStep::ReadOnly(path) if path.ends_with(".git")))
            .count()
        };
        let reads = |cache: &WalkCache| cache.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(gits(&cache), 1);
        assert_eq!(reads(&cache), 6, "every folder read once");
        assert_eq!(gits(&cache), 1);
        assert_eq!(reads(&cache), 6, "nothing read again");
        std::fs::create_dir_all(work.join("a/b/c/.git")).unwrap();
        assert_eq!(gits(&cache), 2);
        assert_eq!(reads(&cache), 7, "only the changed folder read again");
        // A listing taken within the racy window is never kept.
        let careful = WalkCache {
            racy_window: 3600,
            ..WalkCache::default()
        };
        gits(&careful);
        gits(&careful);
        assert_eq!(reads(&careful), 12);
    }
}
