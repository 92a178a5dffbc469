//! The pipeline's stages and edges as data. `cargo xtask diagram` renders this table as the
//! Mermaid flowchart in `docs/tool-execution-pipeline.md` (xtask includes this file by path, so
//! it must stay free of imports); `tests/stages.rs` checks that the
//! table is connected and that every error code the pipeline can produce travels along an
//! edge listed here.

/// What kind of path an edge is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// The call goes on.
    Continue,
    /// The call is refused before it starts: no side effects.
    Refusal,
    /// Something failed after the start: effects already reported are kept.
    Failure,
}

/// One stage (or terminal node) of the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageInfo {
    /// A short identifier, stable across releases (`parse`, `guards`).
    pub id: &'static str,
    /// The stage's number in DESIGN §3, 0 for nodes that are not stages.
    pub number: u8,
    /// The title shown in the diagram.
    pub title: &'static str,
    /// What the stage may do, and what it may not.
    pub power: &'static str,
    /// The scheduler phase the stage runs in: `prepare`, `dispatch` or `finish`.
    pub phase: &'static str,
}

/// One edge between two stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageEdge {
    /// The `id` of the stage the edge leaves.
    pub from: &'static str,
    /// The `id` of the stage the edge enters.
    pub to: &'static str,
    /// The condition, or the error codes that travel along a refusal or failure edge.
    pub label: &'static str,
    /// Whether the call goes on along the edge, was refused, or failed.
    pub kind: EdgeKind,
}

/// The stages of one call, in order (DESIGN §3).
pub const STAGES: &[StageInfo] = &[
    StageInfo {
        id: "record",
        number: 1,
        title: "Record",
        power: "appends tool/call with the raw arguments; nothing else",
        phase: "prepare",
    },
    StageInfo {
        id: "parse",
        number: 2,
        title: "Parse",
        power: "resolves the name in the snapshot and validates the arguments; refuses only",
        phase: "prepare",
    },
    StageInfo {
        id: "pre_hooks",
        number: 3,
        title: "Pre-execute hooks",
        power: "waterfall deciding allow / deny / ask / rewrite; a deny or ask anywhere stands",
        phase: "prepare",
    },
    StageInfo {
        id: "approval",
        number: 4,
        title: "Approval",
        power: "asks the approval service; only AllowedOnce and AllowedForSession continue",
        phase: "prepare",
    },
    StageInfo {
        id: "guards",
        number: 5,
        title: "Guards",
        power: "deny or abstain; the type has no allow",
        phase: "prepare",
    },
    StageInfo {
        id: "start",
        number: 6,
        title: "Start",
        power: "appends tool/start (durable for calls that may act)",
        phase: "dispatch",
    },
    StageInfo {
        id: "execute",
        number: 7,
        title: "Execute layers + body",
        power: "runs the tool under its deadline and the cancellation token; effects are kept",
        phase: "dispatch",
    },
    StageInfo {
        id: "post_hooks",
        number: 8,
        title: "Post-execute hooks",
        power: "change what the model sees, never the recorded effects",
        phase: "finish",
    },
    StageInfo {
        id: "normalize",
        number: 9,
        title: "Normalize + finalize",
        power: "checks the value against the output schema and byte cap; finalize_content runs once on every outcome; text over the content cap keeps head + tail, the whole kept beside the log",
        phase: "finish",
    },
    StageInfo {
        id: "commit",
        number: 10,
        title: "Commit",
        power: "notifies observers (isolated), appends tool/result: the one record",
        phase: "finish",
    },
];

/// Every edge of the pipeline. Refusals before `start` skip to `normalize` (so finalize
/// still runs once) and have no side effects.
pub const EDGES: &[StageEdge] = &[
    StageEdge {
        from: "record",
        to: "parse",
        label: "recorded",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "record",
        to: "normalize",
        label: "TRUNCATED_CALL (the message was cut off; not parsed)",
        kind: EdgeKind::Refusal,
    },
    StageEdge {
        from: "parse",
        to: "pre_hooks",
        label: "valid arguments",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "parse",
        to: "normalize",
        label: "UNKNOWN_TOOL, SYNTAX_ERROR, INVALID_ARGS",
        kind: EdgeKind::Refusal,
    },
    StageEdge {
        from: "pre_hooks",
        to: "guards",
        label: "Allow / Rewrite (re-validated, logged)",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "pre_hooks",
        to: "approval",
        label: "Ask",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "pre_hooks",
        to: "normalize",
        label: "POLICY_DENIED, HOOK_FAILED, INVALID_ARGS",
        kind: EdgeKind::Refusal,
    },
    StageEdge {
        from: "approval",
        to: "guards",
        label: "AllowedOnce / AllowedForSession",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "approval",
        to: "normalize",
        label: "APPROVAL_REJECTED, APPROVAL_CANCELLED, APPROVAL_EXPIRED, APPROVAL_UNAVAILABLE",
        kind: EdgeKind::Refusal,
    },
    StageEdge {
        from: "guards",
        to: "start",
        label: "all abstain",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "guards",
        to: "normalize",
        label: "GUARD_DENIED, HOOK_FAILED",
        kind: EdgeKind::Refusal,
    },
    StageEdge {
        from: "start",
        to: "execute",
        label: "started",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "start",
        to: "normalize",
        label: "NOT_EXECUTED (cancelled before start)",
        kind: EdgeKind::Refusal,
    },
    StageEdge {
        from: "execute",
        to: "post_hooks",
        label: "settled",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "execute",
        to: "post_hooks",
        label: "TOOL_FAILED, ABORTED, TOOL_TIMEOUT, TOOL_OUTCOME_UNKNOWN",
        kind: EdgeKind::Failure,
    },
    StageEdge {
        from: "post_hooks",
        to: "normalize",
        label: "Accept / Replace / Block",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "post_hooks",
        to: "normalize",
        label: "HOOK_FAILED, RESULT_BLOCKED",
        kind: EdgeKind::Failure,
    },
    StageEdge {
        from: "normalize",
        to: "commit",
        label: "valid",
        kind: EdgeKind::Continue,
    },
    StageEdge {
        from: "normalize",
        to: "commit",
        label: "INVALID_TOOL_OUTPUT",
        kind: EdgeKind::Failure,
    },
];
