//! Renderers: plain text, ANSI colour, HTML.

pub(crate) mod html;
mod text;

pub use html::render_html;
pub use text::{Newlines, colour_wanted, escape_controls, render_ansi, render_plain};
