//! The sandbox helper: restricts itself, then becomes the command. The shell tool runs it
//! in the command's PID namespace (or inside bubblewrap), in place of `bash`, which it then
//! becomes: building a Landlock ruleset and a seccomp program allocates, which is not sound
//! between fork and exec in a threaded process, but is in a program of its own.
//!
//! `HELPER [LEADING ARGS] --mode read-only|workspace-write [--write PATH]... [--root PATH]...
//! [--net] [--rlimit-as BYTES] [--rlimit-cpu SECONDS] -- CMD...`: the `toolrail-sandbox` binary, or any program that calls
//! [`sandbox_main`] (the `toolrail` CLI re-executes itself for it).
//!
//! Files: Landlock. Everything is readable and executable; writable are `/dev/null`, the
//! `--write` paths, and in `workspace-write` mode the `--root` folders' entries other than
//! `.git` (Landlock rights are inherited downwards and cannot be taken back below a folder, so
//! a root's `.git` stays read-only only if the root itself is not granted: new top-level
//! entries cannot be created there). Network: a seccomp filter refuses every socket but
//! netlink (inet, and unix sockets, through which a host daemon could act outside the
//! sandbox) unless `--net`; `ptrace` always. If any of it cannot be fully enforced the
//! command does not run: exit status 126 and a `SANDBOX_UNAVAILABLE:` line on stderr.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

struct Plan {
    workspace_write: bool,
    roots: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    network: bool,
    address_space: Option<u64>,
    cpu_seconds: Option<u64>,
    command: Vec<String>,
}

fn parse(args: &[String]) -> Result<Plan, String> {
    let mut plan = Plan {
        workspace_write: false,
        roots: Vec::new(),
        writable: Vec::new(),
        network: false,
        address_space: None,
        cpu_seconds: None,
        command: Vec::new(),
    };
    let number = |flag: &str, value: Option<&String>| {
        value
            .and_then(|value| value.parse::<u64>().ok())
            .ok_or_else(|| format!("{flag} needs a number"))
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--mode" => match rest.next().map(String::as_str) {
                Some("read-only") => plan.workspace_write = false,
                Some("workspace-write") => plan.workspace_write = true,
                other => return Err(format!("unknown mode {other:?}")),
            },
            "--root" => plan
                .roots
                .push(rest.next().ok_or("--root needs a path")?.into()),
            "--write" => plan
                .writable
                .push(rest.next().ok_or("--write needs a path")?.into()),
            "--net" => plan.network = true,
            "--rlimit-as" => plan.address_space = Some(number(arg, rest.next())?),
            "--rlimit-cpu" => plan.cpu_seconds = Some(number(arg, rest.next())?),
            "--" => {
                plan.command = rest.cloned().collect();
                break;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if plan.command.is_empty() {
        return Err("no command after `--`".to_owned());
    }
    Ok(plan)
}

fn landlock(plan: &Plan) -> Result<(), String> {
    let abi = ABI::V5;
    let why = |error: &dyn std::fmt::Display| error.to_string();
    let mut writable: Vec<PathBuf> = plan.writable.clone();
    if plan.workspace_write {
        for root in &plan.roots {
            grant_entries(root, &plan.roots, &mut writable)?;
        }
    }
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|error| why(&error))?
        .create()
        .map_err(|error| why(&error))?
        .add_rule(PathBeneath::new(
            PathFd::new("/").map_err(|error| why(&error))?,
            AccessFs::from_read(abi),
        ))
        .map_err(|error| why(&error))?
        .add_rule(PathBeneath::new(
            PathFd::new("/dev/null").map_err(|error| why(&error))?,
            AccessFs::WriteFile | AccessFs::ReadFile,
        ))
        .map_err(|error| why(&error))?;
    for path in &writable {
        let fd = PathFd::new(path).map_err(|error| format!("{}: {error}", path.display()))?;
        let access = if path.is_dir() {
            AccessFs::from_all(abi)
        } else {
            AccessFs::from_file(abi)
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|error| why(&error))?;
    }
    let status = ruleset.restrict_self().map_err(|error| why(&error))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other @ (RulesetStatus::PartiallyEnforced | RulesetStatus::NotEnforced) => {
            Err(format!("Landlock is only {other:?} here"))
        }
    }
}

/// The entries of `dir` (a root, or a folder holding another root) that may be granted
/// whole: not `.git`, not another root (it has its own turn), and not a folder holding
/// another root, which is entered instead — granting it whole would grant that root's
/// `.git` too.
fn grant_entries(dir: &Path, roots: &[PathBuf], writable: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == ".git" || roots.contains(&path) {
            continue;
        }
        if roots.iter().any(|root| root.starts_with(&path)) {
            grant_entries(&path, roots, writable)?;
        } else {
            writable.push(path);
        }
    }
    Ok(())
}

/// Soft and hard limit alike for memory; for CPU the hard limit a second later, so SIGXCPU
/// comes first and SIGKILL after.
fn rlimits(plan: &Plan) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    if let Some(bytes) = plan.address_space {
        setrlimit(Resource::RLIMIT_AS, bytes, bytes)
            .map_err(|error| format!("RLIMIT_AS: {error}"))?;
    }
    if let Some(seconds) = plan.cpu_seconds {
        setrlimit(Resource::RLIMIT_CPU, seconds, seconds.saturating_add(1))
            .map_err(|error| format!("RLIMIT_CPU: {error}"))?;
    }
    Ok(())
}

fn seccomp(plan: &Plan) -> Result<(), String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    if !plan.network {
        // Without network no socket may reach beyond the process tree: inet, but also unix
        // sockets (a host daemon's socket is a way out of any file sandbox) and every other
        // family. Netlink (asking the kernel) and socketpair stay.
        let not_netlink = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_NETLINK as u64,
        )
        .and_then(|condition| SeccompRule::new(vec![condition]))
        .map_err(|error| error.to_string())?;
        rules.insert(libc::SYS_socket, vec![not_netlink]);
    }
    rules.insert(libc::SYS_ptrace, vec![]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        TargetArch::x86_64,
    )
    .map_err(|error| error.to_string())?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| error.to_string())?;
    seccompiler::apply_filter(&program).map_err(|error| error.to_string())
}

/// The helper's whole program: `args` are its arguments after the program name (and after
/// any leading arguments that chose it). Returns only on failure: on success the process
/// has become the command.
pub fn sandbox_main(args: &[String]) -> ExitCode {
    let plan = match parse(args) {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("toolrail-sandbox: {why}");
            return ExitCode::from(2);
        }
    };
    if let Err(why) = landlock(&plan)
        .and_then(|()| seccomp(&plan))
        .and_then(|()| rlimits(&plan))
    {
        eprintln!("SANDBOX_UNAVAILABLE: {why}");
        return ExitCode::from(126);
    }
    let (program, arguments) = match plan.command.split_first() {
        Some(split) => split,
        None => return ExitCode::from(2),
    };
    // Replaces this process; returns only on failure.
    let error = Command::new(program).args(arguments).exec();
    eprintln!("toolrail-sandbox: {program} could not run: {error}");
    ExitCode::from(127)
}
