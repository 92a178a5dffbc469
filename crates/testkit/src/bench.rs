//! The benches' shared pieces: the `BENCH_ROW` lines and statistics (from the leaf
//! `toolrail-test-support`, for crates below this one), and a tool that does nothing.

pub use toolrail_test_support::bench::{BenchRow, growth_exponent, median};

/// A tool that does nothing and may overlap with anything (from `toolrail-tool-probe`).
pub use toolrail_tool_probe::NoopTool;
