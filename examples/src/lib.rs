//! Runnable examples of toolrail's crates used on their own (`examples/examples/`), and the
//! README's code, compiled and run as a doctest so the README stays true.

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
