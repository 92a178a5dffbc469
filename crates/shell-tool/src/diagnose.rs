//! Which sandbox tier can run here, what it enforces, and — when it cannot run — why, in the
//! machine's terms, with what to do about it.

use std::fmt;
use std::path::Path;

use crate::namespace::{landlock_abi, running_as_root};
use crate::sandbox::{SandboxTier, trial};

/// What a tier can do on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// `namespaces` or `bubblewrap`.
    pub tier: &'static str,
    /// `None` when a trial command ran in the tier's full sandbox; otherwise why not, and
    /// what to do.
    pub problem: Option<String>,
    /// What the tier enforces here, layer by layer.
    pub layers: Vec<String>,
    /// Limits of the tier worth knowing (a process limit that does not bind, say).
    pub notes: Vec<String>,
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            None => writeln!(f, "sandbox tier `{}`: usable", self.tier)?,
            Some(problem) => writeln!(f, "sandbox tier `{}`: UNAVAILABLE — {problem}", self.tier)?,
        }
        for layer in &self.layers {
            writeln!(f, "  enforces: {layer}")?;
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}

/// Tries `tier` with a trial command and describes it. Starts processes: call it off the
/// async workers (as [`TierCheck`](crate::TierCheck) does).
///
/// ```no_run
/// use toolrail_shell_tool::{SandboxTier, diagnose};
/// let diagnosis = diagnose(&SandboxTier::Namespaces);
/// print!("{diagnosis}");
/// ```
pub fn diagnose(tier: &SandboxTier) -> Diagnosis {
    let root = running_as_root();
    let mut layers = Vec::new();
    let mut notes = Vec::new();
    match tier {
        SandboxTier::Namespaces => {
            layers.push(
                "user, PID, mount, IPC, UTS and (without network) network namespaces".to_owned(),
            );
            layers.push("file system read-only but the granted folders; every `.git` read-only; hidden paths masked; fresh /proc".to_owned());
            layers.push("no capabilities, NoNewPrivs, inherited descriptors closed".to_owned());
            match landlock_abi() {
                0 => notes
                    .push("the kernel has no Landlock: the mounts alone confine files".to_owned()),
                abi => layers.push(format!("Landlock (ABI {abi}) under the mounts")),
            }
            layers.push("seccomp: io_uring, ptrace, mounts, new namespaces and (without network) sockets but netlink refused".to_owned());
            layers
                .push("limits: processes (pid_max of the namespace), memory, file size".to_owned());
        }
        SandboxTier::Bubblewrap(program) => {
            layers.push(format!("bubblewrap ({})", program.display()));
            layers.push("the same view and seccomp filter as the namespaces tier".to_owned());
            notes.push("no Landlock layer: bubblewrap execs the command itself".to_owned());
            if root {
                notes.push(
                    "running as root: the process limit (RLIMIT_NPROC) does not bind".to_owned(),
                );
            }
        }
    }
    let problem = trial(tier).err().map(|why| explain(tier, &why));
    Diagnosis {
        tier: tier.as_str(),
        problem,
        layers,
        notes,
    }
}

/// `why` a trial failed, with what the machine says about the likely cause.
fn explain(tier: &SandboxTier, why: &str) -> String {
    let mut text = why.to_owned();
    if let SandboxTier::Bubblewrap(program) = tier
        && !program.is_file()
    {
        text.push_str(&format!(
            ". bubblewrap is not installed at {}: install it (Debian: `apt-get install bubblewrap`) or use the namespaces tier",
            program.display()
        ));
        return text;
    }
    let read = |path: &str| {
        std::fs::read_to_string(Path::new(path))
            .ok()
            .map(|text| text.trim().to_owned())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        text.push_str(". User namespaces are off (user.max_user_namespaces = 0): set it above 0 (`sysctl -w user.max_user_namespaces=15000`)");
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        text.push_str(". Unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0): `sysctl -w kernel.unprivileged_userns_clone=1`, or use a setuid bubblewrap (the bubblewrap tier)");
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        text.push_str(". AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1): give this program an AppArmor profile that allows `userns`, or use the bubblewrap tier (its package carries such a profile)");
    }
    if let Some(release) = read("/proc/sys/kernel/osrelease")
        && kernel_older_than(&release, (5, 12))
    {
        text.push_str(&format!(
            ". The kernel ({release}) is older than 5.12, which the namespaces tier needs for mount_setattr: use the bubblewrap tier"
        ));
    }
    text
}

fn kernel_older_than(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse::<u32>().ok());
    match (parts.next(), parts.next()) {
        (Some(have_major), Some(have_minor)) => (have_major, have_minor) < (major, minor),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_compare_by_number() {
        assert!(kernel_older_than("5.4.0-150-generic", (5, 12)));
        assert!(!kernel_older_than("6.18.44-fc-v669", (5, 12)));
        assert!(!kernel_older_than("5.12.0", (5, 12)));
        assert!(!kernel_older_than("weird", (5, 12)));
    }
}
