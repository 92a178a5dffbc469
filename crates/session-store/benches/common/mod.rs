//! What the store benches share: the event they append and a session's start.

use std::sync::Arc;

use serde_json::json;
use toolrail_session_log::event::*;
use toolrail_session_log::*;

/// A `tool/result` of a typical size (a read's summary), numbered.
pub(crate) fn event_draft(n: u32) -> EventDraft {
    let record = ToolResultRecord {
        value: Some(json!({"path": format!("src/file_{n}.rs"), "lines": 120, "bytes": 4096})),
        ..ToolResultRecord::success(vec![ContentBlock::text(format!(
            "read src/file_{n}.rs: 120 lines"
        ))])
    };
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: Some(CallId::from(format!("c{n}"))),
        data: EventData::ToolResult(Arc::new(record)),
    }
}

pub(crate) fn start(id: &str) -> SessionStart {
    SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools: vec![],
        meta: None,
    }
}
