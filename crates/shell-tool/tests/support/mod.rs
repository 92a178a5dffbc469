//! What both shell test files share: the sandbox tiers to run each case in.

use toolrail_shell_tool::SandboxTier;

/// Every tier this machine has: the namespaces tier always, bubblewrap where installed. CI
/// installs bubblewrap (`.ci/run`), so there its absence fails instead of skipping.
pub(crate) fn tiers() -> Vec<SandboxTier> {
    let bubblewrap = SandboxTier::bubblewrap();
    let installed = match &bubblewrap {
        SandboxTier::Bubblewrap(program) => program.exists(),
        SandboxTier::Namespaces => false,
    };
    if installed {
        return vec![SandboxTier::Namespaces, bubblewrap];
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "bubblewrap is not installed; CI must have it (.ci/run installs it)"
    );
    eprintln!("bubblewrap is not installed: its tier is not tested here");
    vec![SandboxTier::Namespaces]
}
