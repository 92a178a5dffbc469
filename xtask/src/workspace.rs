//! The workspace as xtask sees it: where its root is, and what `cargo metadata` says about
//! its packages. Every check that needs the package graph reads it through here, so the
//! metadata format is parsed in one place only.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root. xtask lives one directory below it, and `cargo xtask` always builds
/// xtask from the workspace it is run in, so the compile-time manifest dir is reliable.
pub fn root() -> PathBuf {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir
        .parent()
        .map_or_else(|| xtask_dir.to_path_buf(), Path::to_path_buf)
}

/// The `cargo` binary to run: the one that launched us (cargo sets `CARGO`), so that
/// every step uses the same toolchain as `cargo xtask` itself.
pub fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.current_dir(root());
    command
}

/// How a package depends on another, as Cargo distinguishes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepKind {
    /// `[dependencies]`.
    Normal,
    /// `[build-dependencies]`.
    Build,
    /// `[dev-dependencies]`.
    Dev,
}

/// One direct dependency of a workspace package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The package name (not the rename, if any).
    pub name: String,
    /// Which table of the manifest declares it.
    pub kind: DepKind,
}

/// One workspace package, reduced to what xtask's checks need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    /// The package name (`toolrail-tools-core`).
    pub name: String,
    /// The directory holding the package's `Cargo.toml`.
    pub dir: PathBuf,
    /// Its direct dependencies, of every kind, in the manifest's order.
    pub dependencies: Vec<Dependency>,
    /// Names of the package's `[[bench]]` targets.
    pub benches: Vec<String>,
    /// The `required-features` of the benches that have some, by bench name (passed to
    /// `cargo bench --features`, or cargo refuses to build them).
    pub bench_features: Vec<(String, Vec<String>)>,
    /// `[package.metadata.toolrail] role = "..."`, if set.
    pub role: Option<String>,
}

impl Package {
    /// The directory name under `crates/` when the package lives there (`tools-core`),
    /// `None` for packages elsewhere (xtask, examples).
    pub fn crate_dir_name(&self, workspace_root: &Path) -> Option<String> {
        let parent = self.dir.parent()?;
        if parent != workspace_root.join("crates") {
            return None;
        }
        self.dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
    }
}

/// The workspace packages, read with `cargo metadata --no-deps`.
pub fn packages() -> Result<Vec<Package>> {
    let output = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("could not run `cargo metadata`")?;
    if !output.status.success() {
        bail!(
            "`cargo metadata` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    parse_metadata(&output.stdout)
}

/// Parses the JSON of `cargo metadata --format-version 1`.
pub fn parse_metadata(json: &[u8]) -> Result<Vec<Package>> {
    let metadata: raw::Metadata =
        serde_json::from_slice(json).context("`cargo metadata` printed JSON xtask cannot read")?;
    metadata
        .packages
        .into_iter()
        .map(raw::Package::into_package)
        .collect()
}

/// The subset of the `cargo metadata` format xtask reads; unknown fields are ignored so a
/// newer cargo does not break us.
mod raw {
    use std::path::PathBuf;

    use anyhow::{Result, anyhow};
    use serde::Deserialize;

    use super::{DepKind, Dependency};

    #[derive(Deserialize)]
    pub(super) struct Metadata {
        pub(super) packages: Vec<Package>,
    }

    #[derive(Deserialize)]
    pub(super) struct Package {
        name: String,
        manifest_path: PathBuf,
        dependencies: Vec<Dep>,
        targets: Vec<Target>,
        #[serde(default)]
        metadata: Option<PackageMetadata>,
    }

    #[derive(Deserialize)]
    struct Dep {
        name: String,
        kind: Option<String>,
    }

    #[derive(Deserialize)]
    struct Target {
        name: String,
        kind: Vec<String>,
        #[serde(default, rename = "required-features")]
        required_features: Vec<String>,
    }

    #[derive(Deserialize)]
    struct PackageMetadata {
        toolrail: Option<ToolrailMetadata>,
    }

    #[derive(Deserialize)]
    struct ToolrailMetadata {
        role: Option<String>,
    }

    impl Package {
        pub(super) fn into_package(self) -> Result<super::Package> {
            let dir = self
                .manifest_path
                .parent()
                .ok_or_else(|| {
                    anyhow!(
                        "manifest path {} has no parent",
                        self.manifest_path.display()
                    )
                })?
                .to_path_buf();
            let dependencies = self
                .dependencies
                .into_iter()
                .map(|dep| {
                    let kind = match dep.kind.as_deref() {
                        None | Some("normal") => DepKind::Normal,
                        Some("build") => DepKind::Build,
                        Some("dev") => DepKind::Dev,
                        Some(other) => {
                            return Err(anyhow!(
                                "{}: dependency {} has unknown kind {other:?}",
                                self.name,
                                dep.name
                            ));
                        }
                    };
                    Ok(Dependency {
                        name: dep.name,
                        kind,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let bench_targets: Vec<Target> = self
                .targets
                .into_iter()
                .filter(|target| target.kind.iter().any(|kind| kind == "bench"))
                .collect();
            let bench_features = bench_targets
                .iter()
                .filter(|target| !target.required_features.is_empty())
                .map(|target| (target.name.clone(), target.required_features.clone()))
                .collect();
            let benches = bench_targets
                .into_iter()
                .map(|target| target.name)
                .collect();
            let role = self.metadata.and_then(|m| m.toolrail).and_then(|t| t.role);
            Ok(super::Package {
                name: self.name,
                dir,
                dependencies,
                benches,
                bench_features,
                role,
            })
        }
    }
}
