//! The SDK a program sees, generated from the tools it may call (minus `run_code`), ordered
//! by name, so an unchanged tool set gives byte-identical text: for JavaScript an async
//! function per tool with a JSDoc type from its input schema, for Python typed stubs.

use serde_json::Value;
use toolrail_tools_core::{ToolEntry, ToolSet};

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

fn bound(tools: &ToolSet) -> Vec<&std::sync::Arc<ToolEntry>> {
    tools
        .for_programs()
        .into_iter()
        .filter(|entry| entry.name() != RUN_CODE)
        .collect()
}

/// The JavaScript SDK: `async function read(args)`, each calling the host.
pub fn javascript(tools: &ToolSet) -> String {
    let mut out = String::from(
        "// Tools, as async functions. Each takes one object of arguments and returns the\n// tool's value; a refused or failed call throws an Error with `code` and `message`.\n",
    );
    let entries = bound(tools);
    let ids = identifiers(entries.iter().map(|entry| entry.name()));
    for (entry, id) in entries.iter().zip(ids) {
        let spec = entry.spec();
        let schema = spec.input_schema();
        out.push_str("\n/**\n");
        for line in spec.description().lines() {
            out.push_str(&format!(" * {}\n", comment_safe(line)));
        }
        out.push_str(&format!(
            " * @param {{{}}} args\n * @returns {{Promise<any>}}\n */\n",
            comment_safe(&js_type(schema, schema, 0))
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
    let entries = bound(tools);
    let ids = identifiers(entries.iter().map(|entry| entry.name()));
    for (entry, id) in entries.iter().zip(ids) {
        let spec = entry.spec();
        let schema = spec.input_schema();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut params = Vec::new();
        let mut optional = Vec::new();
        let mut passed = Vec::new();
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let mut names: Vec<&String> = properties.keys().collect();
            names.sort();
            let params_ids = identifiers(names.iter().map(|name| name.as_str()));
            for (name, param) in names.into_iter().zip(params_ids) {
                let ty = py_type(&properties[name], schema, 0);
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

/// Follows `#/$defs/Name` (and `#/definitions/Name`) within the tool's own schema.
fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => reference
            .strip_prefix("#/")
            .and_then(|path| path.split('/').try_fold(root, |at, part| at.get(part)))
            .unwrap_or(schema),
        None => schema,
    }
}

fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// A JSDoc type for a schema; nesting beyond a few levels is `any`.
fn js_type(schema: &Value, root: &Value, depth: usize) -> String {
    let schema = resolve(schema, root);
    if depth > 4 {
        return "any".to_owned();
    }
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        return choices
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("|");
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(union).and_then(Value::as_array) {
            return options
                .iter()
                .map(|option| js_type(option, root, depth + 1))
                .collect::<Vec<_>>()
                .join("|");
        }
    }
    let kinds: Vec<String> = types_of(schema)
        .into_iter()
        .map(|kind| match kind {
            "string" => "string".to_owned(),
            "integer" | "number" => "number".to_owned(),
            "boolean" => "boolean".to_owned(),
            "null" => "null".to_owned(),
            "array" => {
                let items = schema
                    .get("items")
                    .map_or_else(|| "any".to_owned(), |items| js_type(items, root, depth + 1));
                format!("Array<{items}>")
            }
            "object" => js_object(schema, root, depth),
            _ => "any".to_owned(),
        })
        .collect();
    if kinds.is_empty() {
        "any".to_owned()
    } else {
        kinds.join("|")
    }
}

fn js_object(schema: &Value, root: &Value, depth: usize) -> String {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return "Object".to_owned();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort();
    let fields: Vec<String> = names
        .into_iter()
        .map(|name| {
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            format!(
                "{name}{optional}: {}",
                js_type(&properties[name], root, depth + 1)
            )
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// A Python type for a schema.
fn py_type(schema: &Value, root: &Value, depth: usize) -> String {
    let schema = resolve(schema, root);
    if depth > 4 {
        return "Any".to_owned();
    }
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        let literals: Vec<String> = choices
            .iter()
            .map(|choice| match choice {
                Value::Bool(true) => "True".to_owned(),
                Value::Bool(false) => "False".to_owned(),
                Value::Null => "None".to_owned(),
                Value::Number(_) | Value::String(_) | Value::Array(_) | Value::Object(_) => {
                    choice.to_string()
                }
            })
            .collect();
        return format!("Literal[{}]", literals.join(", "));
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(union).and_then(Value::as_array) {
            return options
                .iter()
                .map(|option| py_type(option, root, depth + 1))
                .collect::<Vec<_>>()
                .join(" | ");
        }
    }
    let kinds: Vec<String> = types_of(schema)
        .into_iter()
        .map(|kind| match kind {
            "string" => "str".to_owned(),
            "integer" => "int".to_owned(),
            "number" => "float".to_owned(),
            "boolean" => "bool".to_owned(),
            "null" => "None".to_owned(),
            "array" => {
                let items = schema
                    .get("items")
                    .map_or_else(|| "Any".to_owned(), |items| py_type(items, root, depth + 1));
                format!("list[{items}]")
            }
            _ => "dict[str, Any]".to_owned(),
        })
        .collect();
    if kinds.is_empty() {
        "Any".to_owned()
    } else {
        kinds.join(" | ")
    }
}
