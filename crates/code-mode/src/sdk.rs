//! The SDK a program sees, generated from the tools it may call (minus `run_code`), ordered
//! by name, so an unchanged tool set gives byte-identical text: for JavaScript an async
//! function per tool with a JSDoc type from its input schema, for Python typed stubs.

mod types;

use serde_json::Value;
use toolrail_tools_core::{ToolSet, ToolSpec};

use types::{JAVASCRIPT, PYTHON, required_names};

/// Python's docstring quotes.
const TRIPLE_QUOTE: &str = "\"\"\"";

/// The entry point, never a binding of itself.
pub const RUN_CODE: &str = "run_code";

/// Words neither language lets a function or parameter be named, and the names the
/// JavaScript prelude and the program rely on.
const TAKEN: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "static",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
    "await",
    "async",
    "arguments",
    "eval",
    "and",
    "as",
    "assert",
    "def",
    "del",
    "elif",
    "except",
    "from",
    "global",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "None",
    "True",
    "False",
    "console",
    "JSON",
    "Promise",
    "Object",
    "Array",
    "Error",
    "Math",
    "globalThis",
    "Any",
    "Literal",
    "ToolError",
];

/// A name as an identifier in both languages (`mcp-x.y` → `mcp_x_y`); a reserved word or a
/// name the prelude uses gets a trailing `_`.
pub fn identifier(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    if id.starts_with("__") || TAKEN.contains(&id.as_str()) {
        id.push('_');
    }
    id
}

/// One identifier per tool, in name order: names that map to the same identifier are told
/// apart by a numbered suffix, so no tool hides another.
fn identifiers<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut given: Vec<String> = Vec::new();
    for name in names {
        let base = identifier(name);
        let mut id = base.clone();
        let mut n = 2;
        while given.contains(&id) {
            id = format!("{base}_{n}");
            n += 1;
        }
        given.push(id);
    }
    given
}

/// Text that cannot end the doc comment it stands in.
fn comment_safe(text: &str) -> String {
    text.replace("*/", "*\\/")
}

/// The tools a program may call, in name order, each with the identifier it is bound to.
fn bound(tools: &ToolSet) -> Vec<(&ToolSpec, String)> {
    let entries: Vec<_> = tools
        .for_programs()
        .into_iter()
        .filter(|entry| entry.name() != RUN_CODE)
        .collect();
    let ids = identifiers(entries.iter().map(|entry| entry.name()));
    entries
        .into_iter()
        .map(|entry| entry.spec())
        .zip(ids)
        .collect()
}

/// The JavaScript SDK: `async function read(args)`, each calling the host.
pub fn javascript(tools: &ToolSet) -> String {
    let mut out = String::from(
        "// Tools, as async functions. Each takes one object of arguments and returns the\n// tool's value; a refused or failed call throws an Error with `code` and `message`.\n",
    );
    for (spec, id) in bound(tools) {
        let schema = spec.input_schema();
        out.push_str("\n/**\n");
        for line in spec.description().lines() {
            out.push_str(&format!(" * {}\n", comment_safe(line)));
        }
        out.push_str(&format!(
            " * @param {{{}}} args\n * @returns {{Promise<any>}}\n */\n",
            comment_safe(&JAVASCRIPT.type_of(schema, schema, 0))
        ));
        let literal = serde_json::to_string(spec.name()).unwrap_or_default();
        out.push_str(&format!(
            "async function {id}(args) {{ return __call({literal}, args); }}\n"
        ));
    }
    out
}

/// The Python SDK as typed stubs: `async def read(*, path: str, offset: int | None = None)`.
pub fn python(tools: &ToolSet) -> String {
    python_sdk(tools, PythonBodies::Stubs)
}

/// The Python SDK a program runs with: the stubs' signatures, each calling the host.
pub(crate) fn python_runtime(tools: &ToolSet) -> String {
    python_sdk(tools, PythonBodies::Calls)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PythonBodies {
    /// `...`, for the model to read.
    Stubs,
    /// A call of the host with the arguments given (`None` meaning left out).
    Calls,
}

fn python_sdk(tools: &ToolSet, bodies: PythonBodies) -> String {
    let mut out = String::from(
        "# Tools, as async functions taking keyword arguments and returning the tool's value;\n# a refused or failed call raises ToolError (with .code and .message).\nfrom typing import Any, Literal\n",
    );
    for (spec, id) in bound(tools) {
        let schema = spec.input_schema();
        let required = required_names(schema);
        let mut params = Vec::new();
        let mut optional = Vec::new();
        let mut passed = Vec::new();
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let mut names: Vec<&String> = properties.keys().collect();
            names.sort();
            let params_ids = identifiers(names.iter().map(|name| name.as_str()));
            for (name, param) in names.into_iter().zip(params_ids) {
                let ty = PYTHON.type_of(&properties[name], schema, 0);
                let key = serde_json::to_string(name).unwrap_or_default();
                passed.push(format!("{key}: {param}"));
                if required.contains(&name.as_str()) {
                    params.push(format!("{param}: {ty}"));
                } else {
                    let ty = if ty.split(" | ").any(|part| part == "None" || part == "Any") {
                        ty
                    } else {
                        format!("{ty} | None")
                    };
                    optional.push(format!("{param}: {ty} = None"));
                }
            }
        }
        params.extend(optional);
        let signature = if params.is_empty() {
            String::new()
        } else {
            format!("*, {}", params.join(", "))
        };
        // Backslashes and quotes escaped, so the docstring cannot end early or escape its
        // closing quotes.
        let doc = spec
            .description()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .lines()
            .collect::<Vec<_>>()
            .join("\n    ");
        let body = match bodies {
            PythonBodies::Stubs => "...".to_owned(),
            PythonBodies::Calls => format!(
                "return await __toolrail_call({}, {{{}}})",
                serde_json::to_string(spec.name()).unwrap_or_default(),
                passed.join(", ")
            ),
        };
        out.push_str(&format!(
            "\n\nasync def {id}({signature}) -> Any:\n    {TRIPLE_QUOTE}{doc}{TRIPLE_QUOTE}\n    {body}\n"
        ));
    }
    out
}
