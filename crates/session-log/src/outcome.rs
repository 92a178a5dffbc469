//! The words of the outcomes the runtime writes itself, one text each: the pipeline, the
//! scheduler and recovery write the same outcome in the same words, so a model (and a
//! person) reads one meaning for one code wherever it came from.

/// Why a call of an assistant message the output-length limit cut off was not run
/// (`TRUNCATED_CALL`): said when the message arrives, and again by recovery for a call a
/// crash left without it.
pub const TRUNCATED_CALL: &str = "the assistant message was cut off by the output-length limit before this call was complete; it was not run. Send the call again (smaller, if needed).";

/// What whoever goes on should do about a call whose outcome is unknown
/// (`TOOL_OUTCOME_UNKNOWN`): retry it when its tool is safe to run twice, else look first.
pub fn retry_advice(safe_to_retry: bool) -> &'static str {
    if safe_to_retry {
        "the tool is read-only or idempotent: safe to retry"
    } else {
        "it may have acted: verify before retrying"
    }
}

/// Why a call whose approval got no answer in time was not run (`APPROVAL_EXPIRED`): said by
/// the pipeline when its approval timeout passes, and by a reopened session for a question a
/// restart left unanswered past its `expires_at`.
pub const APPROVAL_EXPIRED: &str = "no approval answer came in time; the call was not run";

/// Why a call that needs approval was not run when no one could be asked
/// (`APPROVAL_UNAVAILABLE`): no approval service, or recovery with no one to ask again.
pub const APPROVAL_UNAVAILABLE: &str =
    "this call needs approval and no approval service could be asked; the call was not run";
