//! Any text as a `bash` command line: reading it never panics or overflows the stack (deep
//! nesting is an unknown command), and a line that anything may permit has every program
//! known and no file redirection.
//!
//! brush-parser 0.4 panics on some malformed input (an unwrap in its tokenizer, found here);
//! `CommandLine` catches those panics by design and reads such a line as an unknown
//! command. libFuzzer's panic hook aborts on every panic, caught or not, so this target
//! replaces it with a silent one: a panic that escapes `CommandLine::parse` still unwinds
//! into libFuzzer and fails the run.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolrail_tools_core::command_line::CommandLine;

static QUIET_CAUGHT_PANICS: std::sync::Once = std::sync::Once::new();

fuzz_target!(|data: &[u8]| {
    QUIET_CAUGHT_PANICS.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let text = String::from_utf8_lossy(data);
    let line = CommandLine::parse(&text);
    if line.is_permitted_by(|_| true) {
        assert!(!line.has_unknown_program(), "{text:?}");
        assert!(line.file_redirections().is_empty(), "{text:?}");
    }
    for command in line.commands() {
        let canonical = command.canonical();
        assert!(canonical.as_str().starts_with(canonical.known_prefix()));
        if command.program().is_none() {
            assert!(command.permit_text().is_none(), "{text:?}");
            assert!(!canonical.is_fully_known(), "{text:?}");
        }
    }
});
