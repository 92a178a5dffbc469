//! How the SDKs spell a tool's input schema as a type: one walk over the schema, with a
//! table of each language's spellings (`string|null` and `Array<T>` for JSDoc, `str | None`
//! and `list[T]` for Python hints).

use serde_json::Value;

/// The names `schema` lists as `required`.
pub(super) fn required_names(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
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

/// How a language spells the types a schema describes: one walk over the schema
/// ([`TypeSyntax::type_of`]) serves both SDKs.
pub(super) struct TypeSyntax {
    /// Past the nesting cap, with no type given, and for an array's unnamed items.
    any: &'static str,
    string: &'static str,
    integer: &'static str,
    number: &'static str,
    boolean: &'static str,
    /// The type `null`, and the literal `null` in an enum.
    null: &'static str,
    /// The literals `true` and `false` in an enum.
    literal_true: &'static str,
    literal_false: &'static str,
    /// What stands before an enum's literals, between them, and after them.
    enumeration: [&'static str; 3],
    /// Between the members of a union.
    union: &'static str,
    /// What stands before and after an array's item type.
    array: [&'static str; 2],
    /// How an object is spelled.
    object: ObjectSyntax,
    /// A `type` the walk does not know.
    unknown: &'static str,
}

/// How a language spells an object.
enum ObjectSyntax {
    /// `{name: type, other?: type}` from its properties (`?` where not required); `bare`
    /// when it declares none.
    Fields { bare: &'static str },
    /// One type for every object, whatever its properties.
    Opaque(&'static str),
}

/// JSDoc types: `string|null`, `Array<number>`, `{path: string, offset?: number}`.
pub(super) const JAVASCRIPT: TypeSyntax = TypeSyntax {
    any: "any",
    string: "string",
    integer: "number",
    number: "number",
    boolean: "boolean",
    null: "null",
    literal_true: "true",
    literal_false: "false",
    enumeration: ["", "|", ""],
    union: "|",
    array: ["Array<", ">"],
    object: ObjectSyntax::Fields { bare: "Object" },
    unknown: "any",
};

/// Python type hints: `str | None`, `list[int]`, `Literal["a", "b"]`; objects stay
/// `dict[str, Any]`.
pub(super) const PYTHON: TypeSyntax = TypeSyntax {
    any: "Any",
    string: "str",
    integer: "int",
    number: "float",
    boolean: "bool",
    null: "None",
    literal_true: "True",
    literal_false: "False",
    enumeration: ["Literal[", ", ", "]"],
    union: " | ",
    array: ["list[", "]"],
    object: ObjectSyntax::Opaque("dict[str, Any]"),
    unknown: "dict[str, Any]",
};

impl TypeSyntax {
    /// The type of `schema` (its `$ref`s followed within `root`); nesting beyond a few
    /// levels is `any`.
    pub(super) fn type_of(&self, schema: &Value, root: &Value, depth: usize) -> String {
        let schema = resolve(schema, root);
        if depth > 4 {
            return self.any.to_owned();
        }
        if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
            let [open, between, close] = self.enumeration;
            let literals: Vec<String> = choices.iter().map(|choice| self.literal(choice)).collect();
            return format!("{open}{}{close}", literals.join(between));
        }
        for union in ["anyOf", "oneOf"] {
            if let Some(options) = schema.get(union).and_then(Value::as_array) {
                return options
                    .iter()
                    .map(|option| self.type_of(option, root, depth + 1))
                    .collect::<Vec<_>>()
                    .join(self.union);
            }
        }
        let kinds: Vec<String> = types_of(schema)
            .into_iter()
            .map(|kind| self.kind(kind, schema, root, depth))
            .collect();
        if kinds.is_empty() {
            self.any.to_owned()
        } else {
            kinds.join(self.union)
        }
    }

    /// The type for one of the names a schema's `type` gives.
    fn kind(&self, kind: &str, schema: &Value, root: &Value, depth: usize) -> String {
        match kind {
            "string" => self.string.to_owned(),
            "integer" => self.integer.to_owned(),
            "number" => self.number.to_owned(),
            "boolean" => self.boolean.to_owned(),
            "null" => self.null.to_owned(),
            "array" => {
                let items = schema.get("items").map_or_else(
                    || self.any.to_owned(),
                    |items| self.type_of(items, root, depth + 1),
                );
                let [open, close] = self.array;
                format!("{open}{items}{close}")
            }
            "object" => self.object(schema, root, depth),
            _ => self.unknown.to_owned(),
        }
    }

    /// An enum's value as a literal of the language.
    fn literal(&self, choice: &Value) -> String {
        match choice {
            Value::Bool(true) => self.literal_true.to_owned(),
            Value::Bool(false) => self.literal_false.to_owned(),
            Value::Null => self.null.to_owned(),
            Value::Number(_) | Value::String(_) | Value::Array(_) | Value::Object(_) => {
                choice.to_string()
            }
        }
    }

    fn object(&self, schema: &Value, root: &Value, depth: usize) -> String {
        let bare = match self.object {
            ObjectSyntax::Fields { bare } => bare,
            ObjectSyntax::Opaque(spelling) => return spelling.to_owned(),
        };
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return bare.to_owned();
        };
        let required = required_names(schema);
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
                let ty = self.type_of(&properties[name], root, depth + 1);
                format!("{name}{optional}: {ty}")
            })
            .collect();
        format!("{{{}}}", fields.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{JAVASCRIPT, PYTHON};

    /// A schema's type in each language, as the SDKs spell it; the schema is its own root.
    fn spelled(schema: &Value) -> (String, String) {
        (
            JAVASCRIPT.type_of(schema, schema, 0),
            PYTHON.type_of(schema, schema, 0),
        )
    }

    #[test]
    fn both_languages_spell_every_shape_of_schema() {
        let nested_arrays = (0..7).fold(
            json!({"type": "string"}),
            |items, _| json!({"type": "array", "items": items}),
        );
        let schemas = [
            json!({"enum": ["a", 1, true, false, null, 2.5]}),
            json!({"enum": [[1], {"k": "v"}]}),
            json!({"oneOf": [{"type": "integer"}, {"type": "number"}, {"type": "boolean"}]}),
            json!({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}),
            json!({"type": ["string", "null"]}),
            json!({"type": ["object", "array"], "items": {"type": "boolean"}}),
            json!({"type": "array"}),
            json!({"type": "array", "items": {"anyOf": [{"type": "string"}, {"enum": [1, 2]}]}}),
            json!({}),
            json!({"type": "frob"}),
            json!({"type": "object"}),
            json!({
                "type": "object",
                "properties": {
                    "b": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"x": {"type": "integer"}, "y": {"oneOf": [{"type": "string"}, {"type": "null"}]}},
                            "required": ["x"]
                        }
                    },
                    "a": {"enum": ["p"]}
                },
                "required": ["b"]
            }),
            json!({"$ref": "#/definitions/Name", "definitions": {"Name": {"type": "string"}}}),
            json!({"$ref": "#/nowhere", "type": "integer"}),
            nested_arrays,
        ];
        let spellings: Vec<(String, String)> = schemas.iter().map(spelled).collect();
        let expected = [
            (
                r#""a"|1|true|false|null|2.5"#,
                r#"Literal["a", 1, True, False, None, 2.5]"#,
            ),
            (r#"[1]|{"k":"v"}"#, r#"Literal[[1], {"k":"v"}]"#),
            ("number|number|boolean", "int | float | bool"),
            ("Array<string>|null", "list[str] | None"),
            ("string|null", "str | None"),
            ("Object|Array<boolean>", "dict[str, Any] | list[bool]"),
            ("Array<any>", "list[Any]"),
            ("Array<string|1|2>", "list[str | Literal[1, 2]]"),
            ("any", "Any"),
            ("any", "dict[str, Any]"),
            ("Object", "dict[str, Any]"),
            (
                r#"{a?: "p", b: Array<{x: number, y?: string|null}>}"#,
                "dict[str, Any]",
            ),
            ("string", "str"),
            ("number", "int"),
            (
                "Array<Array<Array<Array<Array<any>>>>>",
                "list[list[list[list[list[Any]]]]]",
            ),
        ]
        .map(|(js, py)| (js.to_owned(), py.to_owned()));
        assert_eq!(spellings, expected);
    }
}
