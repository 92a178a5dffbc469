//! Paths that stay out of reach even inside the workspace: what no tool may read (credentials,
//! the session folder, what a deny rule names for `read`) and what no tool may write (every
//! `.git`). One value shared by the file tools, which refuse them, and the shell sandbox, which
//! masks them from commands, so both refuse the same things.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::workspace::{WorkspaceRoots, lexical_clean, resolve};

/// Credential locations under a user's home folder, hidden by default: a prompt-injected
/// model must not be able to read them into its context.
pub const CREDENTIAL_LOCATIONS: [&str; 11] = [
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
];

/// A glob that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hidden path pattern `{pattern}` is not a valid glob: {why}")]
pub struct ProtectedPatternError {
    /// The glob, as given (a leading `./` removed).
    pub pattern: String,
    /// What globset found wrong with it.
    pub why: String,
}

/// What stays out of reach. Build it with [`ProtectedPaths::for_home`] (the credential
/// locations of a home folder hidden, every `.git` read-only) and add the session folder and
/// the deny rules' paths:
///
/// ```
/// use toolrail_tools_core::ProtectedPaths;
/// let protected = ProtectedPaths::for_home("/home/ada")
///     .hide("/home/ada/.toolrail/sessions")
///     .hide_matching("**/.env")
///     .expect("a valid glob");
/// assert!(protected.hidden().iter().any(|path| path.ends_with(".ssh")));
/// ```
#[derive(Clone, Debug)]
pub struct ProtectedPaths {
    hidden: Vec<PathBuf>,
    /// Inside a hidden folder, shown again read-only (the session's spill folder).
    readable: Vec<PathBuf>,
    globs: Vec<String>,
    matcher: GlobSet,
    git_writable: bool,
}

impl Default for ProtectedPaths {
    fn default() -> Self {
        Self::none()
    }
}

impl ProtectedPaths {
    /// Nothing hidden; every `.git` still read-only.
    pub fn none() -> Self {
        Self {
            hidden: Vec::new(),
            readable: Vec::new(),
            globs: Vec::new(),
            matcher: GlobSet::empty(),
            git_writable: false,
        }
    }

    /// The credential locations of `home` hidden ([`CREDENTIAL_LOCATIONS`]), every `.git`
    /// read-only.
    pub fn for_home(home: impl AsRef<Path>) -> Self {
        let home = home.as_ref();
        let mut protected = Self::none();
        for location in CREDENTIAL_LOCATIONS {
            protected = protected.hide(home.join(location));
        }
        protected
    }

    /// [`for_home`](Self::for_home) with this process's `$HOME`; with no `$HOME`, nothing
    /// hidden but `.git` read-only.
    pub fn for_current_user() -> Self {
        match std::env::var_os("HOME").filter(|home| !home.is_empty()) {
            Some(home) => Self::for_home(PathBuf::from(home)),
            None => Self::none(),
        }
    }

    /// Hides `path` (a file or a folder, absolute): reading it gives nothing, writing it is
    /// refused. Symlinks in it are resolved where they exist, so the real place is hidden.
    pub fn hide(mut self, path: impl AsRef<Path>) -> Self {
        let path = absolute(path.as_ref());
        if !self.hidden.contains(&path) {
            self.hidden.push(path);
        }
        self
    }

    /// Shows `path` again (one of the credential locations, say, for a tool that needs it).
    pub fn unhide(mut self, path: impl AsRef<Path>) -> Self {
        let path = absolute(path.as_ref());
        self.hidden.retain(|hidden| *hidden != path);
        self
    }

    /// Hides every file whose path matches `glob`: relative to a workspace root
    /// (`**/.env`, `secrets/*`), or absolute (`/etc/shadow`). Used for the deny rules of
    /// `read`, so `grep`, `glob` and commands skip what `read` may not see.
    pub fn hide_matching(mut self, glob: &str) -> Result<Self, ProtectedPatternError> {
        let pattern = glob.trim_start_matches("./").to_owned();
        if self.globs.contains(&pattern) {
            return Ok(self);
        }
        self.globs.push(pattern);
        let mut set = GlobSetBuilder::new();
        for pattern in &self.globs {
            let glob = GlobBuilder::new(pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|error| ProtectedPatternError {
                    pattern: pattern.clone(),
                    why: error.kind().to_string(),
                })?;
            set.add(glob);
        }
        self.matcher = set.build().map_err(|error| ProtectedPatternError {
            pattern: glob.to_owned(),
            why: error.to_string(),
        })?;
        Ok(self)
    }

    /// Shows `path`, inside a hidden folder, again read-only: the spill folder of a session
    /// whose folder is hidden, so the model can read the full outputs it is pointed to.
    pub fn show_read_only(mut self, path: impl AsRef<Path>) -> Self {
        let path = absolute(path.as_ref());
        if !self.readable.contains(&path) {
            self.readable.push(path);
        }
        self
    }

    /// Lets tools write into `.git` folders (off by default: a hook or `core.fsmonitor`
    /// written there runs on the user's next `git` command).
    pub fn allow_git_writes(mut self) -> Self {
        self.git_writable = true;
        self
    }

    /// The hidden paths, absolute.
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// The paths shown read-only inside hidden folders.
    pub fn readable(&self) -> &[PathBuf] {
        &self.readable
    }

    /// The globs of [`hide_matching`](Self::hide_matching), as written.
    pub fn hidden_globs(&self) -> &[String] {
        &self.globs
    }

    /// Whether tools may write into `.git` folders ([`allow_git_writes`](Self::allow_git_writes)).
    pub fn git_writable(&self) -> bool {
        self.git_writable
    }

    /// Whether a file is hidden by a glob: `relative` is its path from a root, `/`-separated.
    pub fn matches_hidden_glob(&self, relative: &Path, real: &Path) -> bool {
        !self.globs.is_empty() && (self.matcher.is_match(relative) || self.matcher.is_match(real))
    }

    /// Why `real` (a resolved absolute path) may not be read, if it may not: it lies in a
    /// hidden path (and is not shown again read-only), or it or a folder it lies in matches a
    /// hidden glob (a glob that names a folder hides what it holds). A workspace root inside a
    /// hidden folder (the demo's `<session>/workspace`) stays visible.
    pub fn read_refusal(&self, real: &Path, roots: &WorkspaceRoots) -> Option<String> {
        match self.hiding(real, roots, Depth::WithFolders)? {
            Hiding::Under(hidden) => Some(format!(
                "`{}` is hidden from tools (it lies in `{}`, which may hold secrets)",
                real.display(),
                hidden.display()
            )),
            Hiding::Glob(matched) if matched == real => Some(format!(
                "`{}` is hidden from tools by a deny rule for reading",
                real.display()
            )),
            Hiding::Glob(matched) => Some(format!(
                "`{}` is hidden from tools by a deny rule for reading (it lies in `{}`)",
                real.display(),
                matched.display()
            )),
        }
    }

    /// Whether [`read_refusal`](Self::read_refusal) refuses `real`, without saying why.
    pub fn hides(&self, real: &Path, roots: &WorkspaceRoots) -> bool {
        self.hiding(real, roots, Depth::WithFolders).is_some()
    }

    /// Whether `real` itself is hidden, its folders' names not matched against the globs:
    /// for walks that skip a hidden folder before entering it, so each entry is matched once.
    pub fn hides_entry(&self, real: &Path, roots: &WorkspaceRoots) -> bool {
        self.hiding(real, roots, Depth::EntryOnly).is_some()
    }

    fn hiding<'a>(
        &'a self,
        real: &'a Path,
        roots: &WorkspaceRoots,
        depth: Depth,
    ) -> Option<Hiding<'a>> {
        if let Some(hidden) = self.hidden_above(real, roots.as_slice()) {
            return Some(Hiding::Under(hidden));
        }
        if self.globs.is_empty() {
            return None;
        }
        let relative = roots
            .as_slice()
            .iter()
            .find_map(|root| real.strip_prefix(root).ok())
            .unwrap_or(real);
        let levels = match depth {
            Depth::EntryOnly => 1,
            Depth::WithFolders => relative.components().count(),
        };
        // `relative` and `real` shortened together, one folder at a time.
        let (mut relative, mut real) = (relative, real);
        for _ in 0..levels.max(1) {
            if self.matches_hidden_glob(relative, real) {
                return Some(Hiding::Glob(real));
            }
            match (relative.parent(), real.parent()) {
                (Some(up), Some(real_up)) if !up.as_os_str().is_empty() => {
                    (relative, real) = (up, real_up);
                }
                _ => break,
            }
        }
        None
    }

    /// Why `real` (a resolved absolute path) may not be written, if it may not: it is
    /// hidden, shown read-only, or inside a `.git` folder.
    pub fn write_refusal(&self, real: &Path, roots: &WorkspaceRoots) -> Option<String> {
        if self
            .readable
            .iter()
            .any(|readable| real.starts_with(readable))
        {
            return Some(format!("`{}` is read-only to tools", real.display()));
        }
        if let Some(why) = self.read_refusal(real, roots) {
            return Some(why);
        }
        if !self.git_writable && in_git_folder(real) {
            return Some(format!(
                "`{}` is inside a `.git` folder, which tools may not change (a hook or config written there would run on the next `git` command)",
                real.display()
            ));
        }
        None
    }

    /// The hidden path `real` lies in, unless it is shown again read-only or lies in a
    /// workspace root inside the hidden path.
    fn hidden_above(&self, real: &Path, roots: &[PathBuf]) -> Option<&Path> {
        let inside_either = |hidden: &Path, inner: &Path| {
            real.starts_with(inner) && inner.starts_with(hidden) && inner != hidden
        };
        self.hidden
            .iter()
            .find(|hidden| {
                real.starts_with(hidden)
                    && !self
                        .readable
                        .iter()
                        .chain(roots)
                        .any(|inner| inside_either(hidden, inner))
            })
            .map(PathBuf::as_path)
    }
}

/// Why a path is hidden.
enum Hiding<'a> {
    /// It lies in this hidden path.
    Under(&'a Path),
    /// This path (itself, or a folder it lies in) matches a hidden glob.
    Glob(&'a Path),
}

/// How much of a path [`ProtectedPaths::hiding`] matches against the globs.
#[derive(Clone, Copy)]
enum Depth {
    EntryOnly,
    WithFolders,
}

/// Whether any component of `path` is `.git`.
pub fn in_git_folder(path: &Path) -> bool {
    path.components()
        .any(|component| matches!(component, Component::Normal(name) if name == ".git"))
}

/// `path` made absolute (from the current folder), cleaned, with the symlinks of its
/// existing part resolved.
fn absolute(path: &Path) -> PathBuf {
    let anchored = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|here| here.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    resolve(&lexical_clean(&anchored))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The temp folder as the one workspace root, and that root.
    fn temp_root() -> (WorkspaceRoots, PathBuf) {
        let roots = WorkspaceRoots::new([std::env::temp_dir()]).unwrap();
        let root = roots.as_slice()[0].clone();
        (roots, root)
    }

    #[test]
    fn credentials_are_hidden_and_git_is_read_only() {
        let (roots, root) = temp_root();
        let protected = ProtectedPaths::for_home(&root);
        let key = root.join(".ssh/id_ed25519");
        assert!(protected.read_refusal(&key, &roots).is_some());
        assert!(protected.write_refusal(&key, &roots).is_some());
        let hook = root.join("repo/.git/hooks/pre-commit");
        assert!(protected.read_refusal(&hook, &roots).is_none());
        assert!(protected.write_refusal(&hook, &roots).is_some());
        assert!(
            protected
                .clone()
                .allow_git_writes()
                .write_refusal(&hook, &roots)
                .is_none()
        );
        let unmasked = protected.unhide(root.join(".ssh"));
        assert!(unmasked.read_refusal(&key, &roots).is_none());
    }

    #[test]
    fn globs_hide_relative_to_a_root_and_readable_folders_show_through() {
        let (roots, root) = temp_root();
        let protected = ProtectedPaths::none()
            .hide_matching("**/.env")
            .unwrap()
            .hide(root.join("sessions"))
            .show_read_only(root.join("sessions/outputs"));
        assert!(
            protected
                .read_refusal(&root.join("app/.env"), &roots)
                .is_some()
        );
        assert!(protected.read_refusal(&root.join(".env"), &roots).is_some());
        assert!(
            protected
                .read_refusal(&root.join("sessions/s.jsonl"), &roots)
                .is_some()
        );
        let spill = root.join("sessions/outputs/c1.stdout");
        assert!(protected.read_refusal(&spill, &roots).is_none());
        assert!(protected.write_refusal(&spill, &roots).is_some());
        assert!(ProtectedPaths::none().hide_matching("src/[").is_err());
    }

    #[test]
    fn a_root_inside_a_hidden_folder_stays_visible() {
        let dir = std::env::temp_dir();
        let base = WorkspaceRoots::new([&dir]).unwrap().as_slice()[0].clone();
        let roots = WorkspaceRoots::new([&dir]).unwrap();
        let protected = ProtectedPaths::none().hide(base.parent().unwrap_or(&base));
        assert!(
            protected
                .read_refusal(&base.join("src/a.rs"), &roots)
                .is_none()
        );
        let outside = base.parent().unwrap_or(&base).join("elsewhere.txt");
        if outside.parent() != Some(&base) && base.parent().is_some() {
            assert!(protected.read_refusal(&outside, &roots).is_some());
        }
    }

    /// A glob that names a folder hides what it holds from `read_refusal` and `hides`;
    /// `hides_entry` looks at the entry alone, for walks that skip the folder itself.
    #[test]
    fn a_glob_naming_a_folder_hides_its_contents() {
        let (roots, root) = temp_root();
        let protected = ProtectedPaths::none().hide_matching("**/secrets").unwrap();
        let inside = root.join("app/secrets/deep/key.pem");
        assert!(protected.hides(&root.join("app/secrets"), &roots));
        assert!(protected.hides(&inside, &roots));
        assert_eq!(
            protected.read_refusal(&inside, &roots).unwrap(),
            format!(
                "`{}` is hidden from tools by a deny rule for reading (it lies in `{}`)",
                inside.display(),
                root.join("app/secrets").display()
            )
        );
        assert!(!protected.hides_entry(&inside, &roots));
        assert!(protected.hides_entry(&root.join("app/secrets"), &roots));
        assert!(!protected.hides(&root.join("app/public/key.pem"), &roots));
        // Hidden folders hide entries either way; nothing hidden hides nothing.
        let home = ProtectedPaths::for_home(&root);
        assert!(home.hides_entry(&root.join(".ssh/id_ed25519"), &roots));
        assert!(!ProtectedPaths::none().hides(&inside, &roots));
    }
}
