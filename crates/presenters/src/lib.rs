//! Presenters (DESIGN §8): cards from `(kind, arguments, result)`, pure functions of recorded
//! data, so the card a UI shows live is the card a replay shows. Card kinds: generic,
//! terminal, diff, search, read, web, todo, question, code-run; details in another shape
//! fall back to the generic card. A call on a background shell is a terminal card named by
//! the shell's id. Renderers: plain text, ANSI colour, HTML; and the session page, one
//! self-contained HTML file with the conversation, each batch's timeline, every card and
//! each background shell's life.
//!
//! Depends on `session-log` only (it reads recorded data, never the runtime).
//!
//! # Example
//!
//! A `bash` call's card while it runs, then once recovery wrote its result off after a
//! crash, rendered as plain text.
//!
//! ```
//! use serde_json::json;
//! use toolrail_presenters::{CardKind, CardStatus, present_call, present_result, render_plain};
//! use toolrail_session_log::{ErrorCode, ToolResultRecord};
//!
//! let arguments = json!({"command": "make deploy", "description": "deploy the site"});
//! let kind = CardKind::for_tool("bash");
//! assert_eq!(kind, CardKind::Terminal);
//!
//! let running = present_call(kind, "bash", &arguments);
//! assert_eq!(running.status, CardStatus::Pending);
//! assert_eq!(render_plain(&running), "· $ make deploy\n  deploy the site\n");
//!
//! let mut result = ToolResultRecord::failure(
//!     ErrorCode::ToolOutcomeUnknown,
//!     "the session ended while this call ran; it may have acted",
//! );
//! result.synthetic = true; // written by the runtime, not the tool
//! let written_off = present_result(kind, "bash", &arguments, &result);
//! assert_eq!(render_plain(&written_off), "\
//! ✗ $ make deploy  TOOL_OUTCOME_UNKNOWN (by the runtime)
//!   the session ended while this call ran; it may have acted
//!   deploy the site
//! ");
//! ```

mod card;
mod page;
mod present;
mod registry;
mod render;
mod shell;
mod shell_lives;
mod timeline;
mod walk;

pub use card::{
    Card, CardBody, CardKind, CardStatus, DiffFile, DiffLine, DiffLineKind, QuestionItem,
    SearchFile, SearchLine, SubCall, TerminalShell, TodoItem,
};
pub use page::{session_page, tokens};
pub use present::{effect_line, parse_arguments, present_call, present_result, sandbox_refusals};
pub use registry::{Presenter, Presenters, approval_note};
pub use render::{
    Newlines, colour_wanted, escape_controls, render_ansi, render_html, render_plain,
};
pub use shell_lives::{ShellCall, ShellEnding, ShellLife, ShellStart, ShellTouch, shell_lives};
pub use timeline::{BatchTimeline, Lane, Phase, Segment, Summary, batches, duration};
pub use walk::{SessionItem, session_items};
