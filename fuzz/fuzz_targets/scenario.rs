//! Any text as a scenario file: reading it never panics; an error names what is wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolrail_runtime::scenario::Scenario;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(error) = Scenario::from_json(&text) {
        assert!(!error.to_string().is_empty());
    }
});
