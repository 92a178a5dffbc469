//! What the agent loop's benches share: one turn run to its end.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::AgentLoop;
use toolrail_session_log::{ContentBlock, event::TurnEndKind};

/// Runs one turn (the user says "go") on `runtime` and checks it completed; how long it
/// took.
pub(crate) fn complete_turn(runtime: &tokio::runtime::Runtime, agent: &mut AgentLoop) -> Duration {
    runtime.block_on(async {
        let started = Instant::now();
        let end = agent
            .run_turn(
                vec![ContentBlock::text("go")],
                CancellationToken::new(),
                None,
            )
            .await
            .unwrap();
        let elapsed = started.elapsed();
        assert_eq!(end, TurnEndKind::Completed);
        elapsed
    })
}
