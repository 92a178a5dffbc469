//! `cargo xtask layering`: DESIGN §2 says a crate may depend only on crates below it. The
//! table below is that picture as data; the check compares every `crates/*` package's
//! direct toolrail dependencies against it.

use std::fmt;
use std::path::Path;

use anyhow::{Result, bail};

use crate::workspace::{self, DepKind, Package};

/// Which toolrail crates a crate may depend on (normal and build dependencies).
#[derive(Clone, Copy, Debug)]
pub enum Allowed {
    /// Exactly these crate directories (package `toolrail-<dir>`).
    Only(&'static [&'static str]),
    /// Every crate of the table except `cli`: the test kit may drive any library.
    EveryLibrary,
    /// Every library of the table but the test kit, in its code and in its tests: the
    /// shipped binary is assembled by the runtime, never by test support.
    Product,
    /// This crate, and every crate it may use itself (a facade over it).
    Through(&'static str),
}

/// Every library crate the runtime puts together.
const BELOW_RUNTIME: &[&str] = &[
    "agent-loop",
    "code-mode",
    "providers",
    "mcp",
    "fs-tools",
    "shell-tool",
    "interaction",
    "permissions",
    "policy-guards",
    "presenters",
    "tools-core",
    "session-store",
    "session-log",
];

/// The layer table, top to bottom of DESIGN §2 reversed. A new crate must be added here
/// with the crates it may use; the check refuses crates it does not know.
pub const LAYERS: &[(&str, Allowed)] = &[
    // What tests and benches share, below everything: it depends on no toolrail crate.
    ("test-support", Allowed::Only(&[])),
    ("session-log", Allowed::Only(&[])),
    // The stores keep the vocabulary's events; nothing of the tools.
    ("session-store", Allowed::Only(&["session-log"])),
    ("tools-core", Allowed::Only(&["session-log"])),
    // The probe tool, for the tests of every layer above that runs tools.
    ("tool-probe", Allowed::Only(&["tools-core", "session-log"])),
    (
        "policy-guards",
        Allowed::Only(&["tools-core", "session-log"]),
    ),
    (
        "permissions",
        Allowed::Only(&["policy-guards", "tools-core", "session-log"]),
    ),
    ("interaction", Allowed::Only(&["tools-core", "session-log"])),
    // Cards are made from the log alone.
    ("presenters", Allowed::Only(&["session-log"])),
    ("shell-tool", Allowed::Only(&["tools-core", "session-log"])),
    ("fs-tools", Allowed::Only(&["tools-core", "session-log"])),
    // Servers run as process trees that end whole: the shell tool's kill path (issue 25).
    (
        "mcp",
        Allowed::Only(&["shell-tool", "tools-core", "session-log"]),
    ),
    ("agent-loop", Allowed::Only(&["tools-core", "session-log"])),
    // Python programs run under the shell tool's sandbox and kill path (issue 9).
    (
        "code-mode",
        Allowed::Only(&["agent-loop", "shell-tool", "tools-core", "session-log"]),
    ),
    (
        "providers",
        Allowed::Only(&["agent-loop", "tools-core", "session-log"]),
    ),
    // The composition root: every library crate below it.
    ("runtime", Allowed::Only(BELOW_RUNTIME)),
    // The facade people `cargo add`: the runtime and the crates whose names an embedder
    // writes.
    ("toolrail", Allowed::Through("runtime")),
    ("testkit", Allowed::EveryLibrary),
    ("cli", Allowed::Product),
];

/// What every crate may use in its tests, on top of what it may use in its code: the leaf
/// test support, which depends on no toolrail crate.
const TEST_SUPPORT: &str = "test-support";

/// The probe tool, which any crate above it may use in its tests; the product never does.
const TOOL_PROBE: &str = "tool-probe";

/// The stores, which any crate above them may use in its tests (a real log to check what a
/// layer wrote) without using them in its code.
const STORES: &str = "session-store";

/// The test kit, which the product (`cli`) never depends on.
const TESTKIT: &str = "testkit";

const PACKAGE_PREFIX: &str = "toolrail-";

/// The facade crate's directory and package name.
const FACADE: &str = "toolrail";

/// One `crates/*` package as the rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrateDeps {
    /// The directory under `crates/` (`tools-core`).
    pub dir: String,
    /// The package name (`toolrail-tools-core`).
    pub package: String,
    /// Direct dependencies on other packages, all kinds.
    pub dependencies: Vec<(String, DepKind)>,
}

/// A broken layering rule, phrased for the developer who has to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "layering: {}", self.0)
    }
}

/// Runs the check on the real workspace.
pub fn run() -> Result<()> {
    let root = workspace::root();
    let crates = crates_of(&workspace::packages()?, &root);
    let violations = check(&crates);
    if violations.is_empty() {
        println!("layering: {} crates follow DESIGN §2", crates.len());
        return Ok(());
    }
    for violation in &violations {
        eprintln!("{violation}");
    }
    bail!("layering: {} violation(s) of DESIGN §2", violations.len())
}

/// The packages that live under `crates/`; xtask and examples are not layers.
pub fn crates_of(packages: &[Package], workspace_root: &Path) -> Vec<CrateDeps> {
    packages
        .iter()
        .filter_map(|package| {
            let dir = package.crate_dir_name(workspace_root)?;
            let dependencies = package
                .dependencies
                .iter()
                .map(|dep| (dep.name.clone(), dep.kind))
                .collect();
            Some(CrateDeps {
                dir,
                package: package.name.clone(),
                dependencies,
            })
        })
        .collect()
}

/// The layering rule: returns every violation, in input order, or none.
pub fn check(crates: &[CrateDeps]) -> Vec<Violation> {
    let mut violations = Vec::new();
    for krate in crates {
        // The facade is the one crate people name without the prefix: `toolrail`.
        let expected_name = if krate.dir == FACADE {
            FACADE.to_owned()
        } else {
            format!("{PACKAGE_PREFIX}{}", krate.dir)
        };
        if krate.package != expected_name {
            violations.push(Violation(format!(
                "the package in crates/{} is named {}; crates/<dir> must be named {expected_name}",
                krate.dir, krate.package
            )));
            continue;
        }
        let Some(allowed) = allowed_for(&krate.dir) else {
            violations.push(Violation(format!(
                "{} (crates/{}) is not in the layering table: add it to LAYERS in \
                 xtask/src/layering.rs with the crates it may depend on (DESIGN §2)",
                krate.package, krate.dir
            )));
            continue;
        };
        for (dep, kind) in &krate.dependencies {
            let Some(dep_dir) = dep.strip_prefix(PACKAGE_PREFIX) else {
                continue; // not a toolrail crate: third-party dependencies are deny.toml's job
            };
            if !may_depend(&krate.dir, allowed, dep_dir, *kind) {
                violations.push(Violation(format!(
                    "{} -> {dep}{} is not allowed ({} may depend on: {})",
                    krate.package,
                    kind_suffix(*kind),
                    krate.dir,
                    describe(allowed, *kind)
                )));
            }
        }
    }
    violations
}

fn allowed_for(dir: &str) -> Option<Allowed> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == dir)
        .map(|(_, allowed)| *allowed)
}

fn may_depend(dir: &str, allowed: Allowed, dep_dir: &str, kind: DepKind) -> bool {
    let known = allowed_for(dep_dir).is_some();
    let by_layer = match allowed {
        Allowed::Only(list) => list.contains(&dep_dir),
        Allowed::EveryLibrary => known && dep_dir != "cli",
        Allowed::Product => known && dep_dir != TESTKIT && dep_dir != TOOL_PROBE && dep_dir != dir,
        Allowed::Through(inner) => {
            dep_dir == inner
                || allowed_for(inner)
                    .is_some_and(|below| may_depend(inner, below, dep_dir, DepKind::Normal))
        }
    };
    // A crate's own tests may use the test support (but not test it with itself), and the
    // stores and the probe tool when they sit below it. The test kit sits above every
    // library: only whole-session tests (the kit's own, the runtime's, the examples') use it.
    let dev_extra = kind == DepKind::Dev
        && dep_dir != dir
        && (dep_dir == TEST_SUPPORT
            || ([STORES, TOOL_PROBE].contains(&dep_dir) && layer_of(dep_dir) < layer_of(dir)));
    by_layer || dev_extra
}

/// A crate's place in the table, from the bottom (`None` for a crate not in it).
fn layer_of(dir: &str) -> Option<usize> {
    LAYERS.iter().position(|(name, _)| *name == dir)
}

fn kind_suffix(kind: DepKind) -> &'static str {
    match kind {
        DepKind::Normal => "",
        DepKind::Build => " (build-dependency)",
        DepKind::Dev => " (dev-dependency)",
    }
}

fn describe(allowed: Allowed, kind: DepKind) -> String {
    let mut text = match allowed {
        Allowed::Only([]) => "nothing".to_owned(),
        Allowed::Only(list) => list.join(", "),
        Allowed::EveryLibrary => "every crate of the table except cli".to_owned(),
        Allowed::Product => "every library of the table but testkit and tool-probe".to_owned(),
        Allowed::Through(inner) => format!("{inner} and what {inner} may depend on"),
    };
    if kind == DepKind::Dev {
        text.push_str(
            ", plus test-support (and session-store and tool-probe, if below) in dev-dependencies",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(dir: &str, deps: &[(&str, DepKind)]) -> CrateDeps {
        CrateDeps {
            dir: dir.to_owned(),
            package: format!("toolrail-{dir}"),
            dependencies: deps
                .iter()
                .map(|(name, kind)| ((*name).to_owned(), *kind))
                .collect(),
        }
    }

    #[test]
    fn a_layered_workspace_passes() {
        let crates = [
            krate("session-log", &[("serde", DepKind::Normal)]),
            krate("tools-core", &[("toolrail-session-log", DepKind::Normal)]),
            krate(
                "permissions",
                &[
                    ("toolrail-policy-guards", DepKind::Normal),
                    ("toolrail-tools-core", DepKind::Build),
                ],
            ),
            krate("testkit", &[("toolrail-code-mode", DepKind::Normal)]),
            krate(
                "cli",
                &[
                    ("toolrail-runtime", DepKind::Normal),
                    ("toolrail-test-support", DepKind::Dev),
                ],
            ),
        ];
        assert_eq!(check(&crates), vec![]);
    }

    #[test]
    fn the_facade_may_use_the_runtime_and_what_the_runtime_uses_but_nothing_above() {
        // The facade's package is `toolrail` itself, not `toolrail-toolrail`.
        let facade = |deps: &[(&str, DepKind)]| CrateDeps {
            package: "toolrail".to_owned(),
            ..krate("toolrail", deps)
        };
        let fine = [facade(&[
            ("toolrail-runtime", DepKind::Normal),
            ("toolrail-tools-core", DepKind::Normal),
        ])];
        assert_eq!(check(&fine), vec![]);
        let above = [facade(&[("toolrail-cli", DepKind::Normal)])];
        assert_eq!(
            check(&above),
            vec![Violation(
                "toolrail -> toolrail-cli is not allowed (toolrail may depend on: runtime and \
                 what runtime may depend on)"
                    .to_owned()
            )]
        );
    }

    #[test]
    fn the_product_never_depends_on_the_test_kit_not_even_in_its_tests() {
        for kind in [DepKind::Normal, DepKind::Dev] {
            let crates = [krate("cli", &[("toolrail-testkit", kind)])];
            let violations = check(&crates);
            assert_eq!(violations.len(), 1, "{kind:?}: {violations:?}");
            assert!(
                violations[0]
                    .0
                    .contains("every library of the table but testkit and tool-probe"),
                "{violations:?}"
            );
        }
    }

    #[test]
    fn an_upward_edge_is_named() {
        let crates = [krate(
            "session-log",
            &[("toolrail-tools-core", DepKind::Normal)],
        )];
        assert_eq!(
            check(&crates),
            vec![Violation(
                "toolrail-session-log -> toolrail-tools-core is not allowed \
                 (session-log may depend on: nothing)"
                    .to_owned()
            )]
        );
        assert_eq!(
            check(&crates)[0].to_string(),
            "layering: toolrail-session-log -> toolrail-tools-core is not allowed \
             (session-log may depend on: nothing)"
        );
    }

    #[test]
    fn sideways_and_cli_edges_are_refused() {
        let crates = [
            krate("fs-tools", &[("toolrail-shell-tool", DepKind::Normal)]),
            krate("testkit", &[("toolrail-cli", DepKind::Normal)]),
        ];
        let messages: Vec<String> = check(&crates).into_iter().map(|v| v.0).collect();
        assert_eq!(
            messages,
            vec![
                "toolrail-fs-tools -> toolrail-shell-tool is not allowed \
                 (fs-tools may depend on: tools-core, session-log)"
                    .to_owned(),
                "toolrail-testkit -> toolrail-cli is not allowed \
                 (testkit may depend on: every crate of the table except cli)"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn an_unknown_crate_points_at_the_table() {
        let crates = [krate("telemetry", &[])];
        assert_eq!(
            check(&crates),
            vec![Violation(
                "toolrail-telemetry (crates/telemetry) is not in the layering table: add it \
                 to LAYERS in xtask/src/layering.rs with the crates it may depend on (DESIGN §2)"
                    .to_owned()
            )]
        );
    }

    #[test]
    fn a_misnamed_package_is_refused() {
        let crates = [CrateDeps {
            dir: "tools-core".to_owned(),
            package: "tools".to_owned(),
            dependencies: vec![],
        }];
        assert_eq!(check(&crates).len(), 1);
    }

    #[test]
    fn tests_use_the_test_support_and_the_probe_below_them_never_the_testkit() {
        let leaf = [krate(
            "session-log",
            &[("toolrail-test-support", DepKind::Dev)],
        )];
        assert_eq!(check(&leaf), vec![]);
        let probed = [krate("code-mode", &[("toolrail-tool-probe", DepKind::Dev)])];
        assert_eq!(check(&probed), vec![]);
        let kit = [krate("code-mode", &[("toolrail-testkit", DepKind::Dev)])];
        assert_eq!(check(&kit).len(), 1, "the kit is above every library");
        let under = [krate(
            "tools-core",
            &[("toolrail-tool-probe", DepKind::Dev)],
        )];
        assert_eq!(check(&under).len(), 1, "the probe is above tools-core");
        // The bottom crate's tests build nothing above it.
        let up = [krate("session-log", &[("toolrail-testkit", DepKind::Dev)])];
        assert_eq!(
            check(&up),
            vec![Violation(
                "toolrail-session-log -> toolrail-testkit (dev-dependency) is not allowed \
                 (session-log may depend on: nothing, plus test-support (and session-store and tool-probe, if below) in dev-dependencies)"
                    .to_owned()
            )]
        );

        let normal = [krate(
            "session-log",
            &[("toolrail-testkit", DepKind::Normal)],
        )];
        assert_eq!(check(&normal).len(), 1);

        // A dev-dependency may use anything a normal one may, and no more.
        let dev_up = [krate(
            "tools-core",
            &[("toolrail-agent-loop", DepKind::Dev)],
        )];
        assert_eq!(
            check(&dev_up),
            vec![Violation(
                "toolrail-tools-core -> toolrail-agent-loop (dev-dependency) is not allowed \
                 (tools-core may depend on: session-log, plus test-support (and session-store and tool-probe, if below) in dev-dependencies)"
                    .to_owned()
            )]
        );
    }

    #[test]
    fn tests_above_the_stores_may_use_them_and_the_vocabulary_s_may_not() {
        let above = [krate(
            "tools-core",
            &[("toolrail-session-store", DepKind::Dev)],
        )];
        assert_eq!(check(&above), vec![]);
        let in_code = [krate(
            "tools-core",
            &[("toolrail-session-store", DepKind::Normal)],
        )];
        assert_eq!(check(&in_code).len(), 1);
        let below = [krate(
            "session-log",
            &[("toolrail-session-store", DepKind::Dev)],
        )];
        assert_eq!(check(&below).len(), 1);
    }

    #[test]
    fn only_packages_under_crates_are_layers() {
        let root = Path::new("/ws");
        let package = |name: &str, dir: &str| Package {
            name: name.to_owned(),
            dir: root.join(dir),
            dependencies: vec![],
            benches: vec![],
            bench_features: vec![],
            role: None,
        };
        let packages = [
            package("toolrail-session-log", "crates/session-log"),
            package("xtask", "xtask"),
            package("toolrail-examples", "examples"),
        ];
        let crates = crates_of(&packages, root);
        assert_eq!(crates, vec![krate("session-log", &[])]);
    }
}
