//! Presenters (DESIGN §8): cards from `(kind, arguments, result)`, pure functions of recorded
//! data, so the card a UI shows live is the card a replay shows. Card kinds: generic,
//! terminal, diff, search, read, web, todo, question, code-run; details in another shape
//! fall back to the generic card. Renderers: plain text, ANSI colour, HTML; and the session
//! page, one self-contained HTML file with the conversation, each batch's timeline and
//! every card.
//!
//! Depends on `session-log` only (it reads recorded data, never the runtime).

mod card;
mod page;
mod present;
mod registry;
mod render;
mod timeline;
mod walk;

pub use card::{
    Card, CardBody, CardKind, CardStatus, DiffFile, DiffLine, DiffLineKind, QuestionItem,
    SearchFile, SearchLine, SubCall, TodoItem,
};
pub use page::{duration, session_page};
pub use present::{effect_line, parse_arguments, present_call, present_result};
pub use registry::{Presenter, Presenters};
pub use render::{colour_wanted, render_ansi, render_html, render_plain};
pub use timeline::{BatchTimeline, Lane, Phase, Segment, Summary, batches};
pub use walk::{SessionItem, session_items};
