//! The generated SDKs, snapshot-tested: one function per tool the program may call (never
//! `run_code`), ordered by name, types from the input schemas (`$ref`s followed, enums,
//! unions, optional fields), byte-identical for an unchanged tool set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use toolrail_tools_core::CallArgs;

use serde_json::json;
use toolrail_code_mode::{CodeMode, Limits, RUN_CODE, javascript, python};
use toolrail_tool_probe::Probe;
use toolrail_tools_core::{
    RegistryBuilder, Tool, ToolContext, ToolOutput, ToolResult, ToolSet, ToolSpec, Typed,
};

/// A tool with a hand-written schema that uses what the generators must handle.
struct Deploy(ToolSpec);

impl Tool for Deploy {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> toolrail_session_log::BoxFuture<'a, ToolResult> {
        Box::pin(async { Ok(ToolOutput::text("deployed")) })
    }
}

fn tools() -> ToolSet {
    let deploy = ToolSpec::builder(
        "deploy-app",
        "Deploys the app.\nTakes a while.",
        json!({
            "type": "object",
            "properties": {
                "target": {"enum": ["staging", "production"]},
                "replicas": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limits": {"$ref": "#/$defs/Limits"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            },
            "required": ["target"],
            "$defs": {"Limits": {"type": "object", "properties": {"cpu": {"type": "number"}}, "required": ["cpu"]}}
        }),
    );
    // Names that clash once made identifiers, a reserved word, and a description that
    // tries to end the doc comment and the docstring.
    let twin = ToolSpec::builder(
        "deploy_app",
        "Ends early? */ globalThis.pwned = 1; /* and \\ a backslash \"\"\" quotes \\",
        json!({"type": "object", "properties": {"from": {"enum": [true, null, 3]}}}),
    );
    let reserved = ToolSpec::builder("delete", "Deletes.", json!({"type": "object"}));
    let mode = CodeMode::new(Limits::default());
    let (registry, _) = RegistryBuilder::new()
        .builtin(Probe::new(None))
        .builtin(Arc::new(Deploy(deploy.build())))
        .builtin(Arc::new(Deploy(twin.build())))
        .builtin(Arc::new(Deploy(reserved.build())))
        .reserve(RUN_CODE)
        .runtime_tool(Arc::new(Typed::new(mode.tool())))
        .build()
        .unwrap();
    registry.snapshot().for_code_mode("run_code")
}

#[test]
fn the_javascript_sdk() {
    let sdk = javascript(&tools());
    assert!(!sdk.contains("function run_code"));
    assert!(
        sdk.contains("async function deploy_app(args)")
            && sdk.contains("async function deploy_app_2(args)")
    );
    assert!(sdk.contains("async function delete_(args)"));
    assert!(
        !sdk.contains("*/ globalThis"),
        "a description cannot end the comment"
    );
    assert_eq!(sdk, javascript(&tools()), "deterministic");
    insta::assert_snapshot!("javascript", sdk);
}

#[test]
fn the_python_sdk() {
    let sdk = python(&tools());
    assert!(!sdk.contains("def run_code"));
    assert!(
        sdk.contains("from_: Literal[True, None, 3] | None = None"),
        "{sdk}"
    );
    assert_eq!(sdk, python(&tools()), "deterministic");
    insta::assert_snapshot!("python", sdk);
}

#[test]
fn presentation_modes_offer_what_they_say() {
    use toolrail_code_mode::PresentationMode;
    let (registry, _) = {
        let mode = CodeMode::new(Limits::default());
        RegistryBuilder::new()
            .builtin(Probe::new(None))
            .reserve(RUN_CODE)
            .runtime_tool(Arc::new(Typed::new(mode.tool())))
            .build()
            .unwrap()
    };
    let all = registry.snapshot();
    assert_eq!(PresentationMode::Native.present(&all).names(), ["probe"]);
    assert_eq!(PresentationMode::Code.present(&all).names(), ["run_code"]);
    assert_eq!(
        PresentationMode::Both.present(&all).names(),
        ["probe", "run_code"]
    );
    assert_eq!(PresentationMode::Native.system_prompt(&all), None);
    let prompt = PresentationMode::Code.system_prompt(&all).unwrap();
    assert!(prompt.contains("async function probe(args)"), "{prompt}");
    assert!(!prompt.contains("function run_code"), "{prompt}");
}

#[test]
fn a_direct_call_of_a_program_s_tool_is_refused_with_how_to_call_it() {
    let presented = toolrail_code_mode::PresentationMode::Code.present(&tools());
    let refusal = presented.code_only_refusal("deploy_app").unwrap();
    assert_eq!(
        refusal,
        "`deploy_app` is not called directly in code mode: call it from a `run_code` program, e.g. `const result = await deploy_app({...});`"
    );
    assert_eq!(presented.code_only_refusal("run_code"), None);
}
