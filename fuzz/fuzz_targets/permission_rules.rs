//! Any text as a permission rule file, in both formats: reading it never panics, and an
//! error names the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolrail_permissions::RuleFile;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for parsed in [
        RuleFile::from_toml(&text, "fuzzed.toml"),
        RuleFile::from_json(&text, "fuzzed.json"),
    ] {
        if let Err(error) = parsed {
            assert!(error.to_string().contains("fuzzed"), "{error}");
        }
    }
});
