//! What the binary's tests share: `toolrail` run in a folder as a user runs it there (no
//! terminal, no colour, a state folder of the test's own), and its output read whole.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `toolrail ARGS` in `dir`, with `OPENAI_API_KEY` set and `XDG_STATE_HOME` in `dir/state`.
pub(crate) fn toolrail(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolrail"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("OPENAI_API_KEY", "test")
        .env("XDG_STATE_HOME", dir.join("state"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Stdout then stderr, as text.
pub(crate) fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
