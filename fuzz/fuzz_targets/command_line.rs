//! Any text as a `bash` command line: reading it never panics or overflows the stack (deep
//! nesting is an unknown command), and a line that anything may permit has every program
//! known and no file redirection.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolrail_tools_core::CommandLine;

fuzz_target!(|data: &[u8]| {
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
