//! The benches' shared pieces: the `BENCH_ROW` lines and statistics (from the leaf
//! `toolrail-test-support`, for crates below this one), and a tool that does nothing.

pub use toolrail_test_support::bench::{BenchRow, growth_exponent, median};

/// A tool that does nothing and may overlap with anything: the benches measure the
/// runtime's own cost per call with it.
pub struct NoopTool(pub toolrail_tools_core::ToolSpec);

impl toolrail_tools_core::Tool for NoopTool {
    fn spec(&self) -> &toolrail_tools_core::ToolSpec {
        &self.0
    }
    fn concurrency(&self, _args: &serde_json::Value) -> toolrail_tools_core::Concurrency {
        toolrail_tools_core::Concurrency::shared()
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a toolrail_tools_core::ToolContext,
        _args: &'a serde_json::Value,
    ) -> toolrail_session_log::BoxFuture<'a, toolrail_tools_core::ToolResult> {
        Box::pin(async { Ok(toolrail_tools_core::ToolOutput::text("ok")) })
    }
}
