//! Renderers: plain text, ANSI colour, HTML.

pub(crate) mod html;
mod text;

pub use html::render_html;
pub use text::{colour_wanted, render_ansi, render_plain};
