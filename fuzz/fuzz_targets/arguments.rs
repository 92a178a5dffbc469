//! Any text as a model's raw tool-call arguments: parsing never panics (deep nesting is an
//! error, not a stack overflow), a syntax error's position and message are computable, and
//! a parsed value checked against a schema yields violations, never a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolrail_tools_core::{arguments::{check_schema, parse_arguments}};

static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1},
            "edits": {"type": "array", "items": {"type": "object",
                "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["old", "new"]}}
        },
        "required": ["path"],
        "additionalProperties": false
    });
    jsonschema::validator_for(&schema).expect("the schema compiles")
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_arguments(&text) {
        Ok(value) => {
            if let Err(error) = check_schema(&VALIDATOR, &value) {
                let _ = error.message("fuzzed");
            }
        }
        Err(error) => {
            let _ = error.message("fuzzed");
        }
    }
});
