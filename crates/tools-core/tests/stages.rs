//! The stage table the pipeline diagram is generated from is connected, ordered, and carries
//! every error code the single-call pipeline produces.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use toolrail_session_log::ErrorCode;

use toolrail_tools_core::stages::{EDGES, STAGES};

#[test]
fn edges_connect_known_stages_in_order() {
    let position = |id: &str| STAGES.iter().position(|stage| stage.id == id);
    for edge in EDGES {
        let (from, to) = (position(edge.from), position(edge.to));
        assert!(
            from.is_some() && to.is_some(),
            "edge {edge:?} names an unknown stage"
        );
        assert!(from < to, "edge {edge:?} goes backwards");
    }
    for (index, stage) in STAGES.iter().enumerate() {
        assert_eq!(
            usize::from(stage.number),
            index + 1,
            "stage {} is out of order",
            stage.id
        );
        if index + 1 < STAGES.len() {
            assert!(
                EDGES.iter().any(|edge| edge.from == stage.id),
                "{} has no way out",
                stage.id
            );
        }
    }
}

#[test]
fn every_pipeline_error_code_travels_along_an_edge() {
    // Codes the single-call pipeline never produces: recovery writes TOOL_NOT_STARTED, tools
    // write STALE_STATE.
    let elsewhere = [ErrorCode::ToolNotStarted, ErrorCode::StaleState];
    for code in ErrorCode::BUILT_IN
        .iter()
        .filter(|code| !elsewhere.contains(code))
    {
        assert!(
            EDGES.iter().any(|edge| edge
                .label
                .split(", ")
                .any(|part| part.starts_with(code.as_str()))),
            "{code} is not on any edge of the stage table"
        );
    }
}
