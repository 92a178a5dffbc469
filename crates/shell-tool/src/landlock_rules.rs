//! Landlock, the second layer under the namespaces tier's mounts: the same promises made
//! again by a different part of the kernel, so one mistake in either is not a hole. Files:
//! everything readable and executable, writable only `/dev/null`, the private temp folder
//! and, in `workspace-write`, the roots. Without network: TCP bind and connect refused, and
//! abstract unix sockets outside the sandbox out of reach. Always: no signals to processes
//! outside it. The ruleset is built in the parent (it allocates and opens paths) and
//! applied by the command just before exec; a kernel without some of it gets the rest.

use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

use crate::sandbox::{Confinement, SandboxMode};

/// The newest ABI this ruleset asks for; older kernels enforce what they have.
const ABI_WANTED: ABI = ABI::V6;

/// The ruleset for `confinement`, or `None` where the kernel has no Landlock at all.
pub(crate) fn ruleset(confinement: &Confinement<'_>) -> Result<Option<OwnedFd>, String> {
    let why = |error: &dyn std::fmt::Display| format!("Landlock: {error}");
    let abi = ABI_WANTED;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|error| why(&error))?
        .scope(Scope::Signal)
        .map_err(|error| why(&error))?;
    if !confinement.network {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|error| why(&error))?
            .scope(Scope::AbstractUnixSocket)
            .map_err(|error| why(&error))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|error| why(&error))?
        .add_rule(PathBeneath::new(
            open(Path::new("/"))?,
            AccessFs::from_read(abi),
        ))
        .map_err(|error| why(&error))?
        .add_rule(PathBeneath::new(
            open(Path::new("/dev/null"))?,
            AccessFs::ReadFile | AccessFs::WriteFile,
        ))
        .map_err(|error| why(&error))?;
    // A command on a pseudo-terminal may open it again, as its path or as `/dev/tty`.
    if let Some(terminal) = confinement.terminal {
        for path in [terminal, Path::new("/dev/tty")] {
            created = created
                .add_rule(PathBeneath::new(
                    open(path)?,
                    AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
                ))
                .map_err(|error| why(&error))?;
        }
    }
    // The shared-memory folder needs a rule of its own: bound over `/dev/shm`, what lies
    // in it is reached through the bind, whose walk up never passes the temp folder.
    let shm = shared_memory_folder(confinement.private_tmp);
    let mut writable: Vec<&Path> = vec![confinement.private_tmp];
    if shm.is_dir() {
        writable.push(&shm);
    }
    if confinement.mode == SandboxMode::WorkspaceWrite {
        writable.extend(confinement.roots.iter().map(|root| root.as_path()));
    }
    for path in writable {
        created = created
            .add_rule(PathBeneath::new(open(path)?, AccessFs::from_all(abi)))
            .map_err(|error| why(&error))?;
    }
    Ok(Option::<OwnedFd>::from(created))
}

/// The call's own shared-memory folder, bound over `/dev/shm` in the namespaces tier
/// (POSIX semaphores and shared memory: Python's multiprocessing needs them).
pub(crate) fn shared_memory_folder(private_tmp: &Path) -> std::path::PathBuf {
    private_tmp.join(".shm")
}

fn open(path: &Path) -> Result<PathFd, String> {
    PathFd::new(path).map_err(|error| format!("Landlock: {}: {error}", path.display()))
}
