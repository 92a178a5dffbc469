//! toolrail's automation, run as `cargo xtask <command>` (the rust-analyzer pattern: plain
//! Rust instead of shell scripts). The library holds every command so tests can call the
//! checks as functions and point them at fixtures; `main.rs` only parses arguments.
//!
//! - `ci`: the whole gate, step by step ([`ci`]).
//! - `layering`: DESIGN §2's "a crate depends only on crates below it" ([`layering`]).
//! - `check-guards`: guards can only refuse ([`check_guards`]).
//! - `diagram`: the pipeline flowchart generated from the stage table ([`diagram`]).
//! - `bench`: every bench, one table, `docs/benchmarks.md` ([`bench`](mod@bench)).
//! - `facade`: each default feature of the `toolrail` crate really removable ([`facade`]).

pub mod bench;
pub mod check_guards;
pub mod ci;
pub mod diagram;
pub mod facade;
pub mod fuzz;
pub mod layering;
pub mod torture;
pub mod workspace;

/// The pipeline's stage table, compiled in from tools-core's own source file: the file has
/// no imports, so xtask renders the diagram from the real data without depending on (and
/// building) tools-core and its dependency tree. The file belongs to tools-core and is
/// formatted there, so rustfmt must not also format it as part of xtask.
#[rustfmt::skip]
#[path = "../../crates/tools-core/src/stages.rs"]
pub mod stages;
