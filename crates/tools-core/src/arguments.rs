//! The argument contract (DESIGN §3, stage 2): empty means `{}`, text that is not JSON is a
//! `SYNTAX_ERROR` with its position, JSON that breaks the input schema is `INVALID_ARGS`
//! listing every violation with its JSON pointer.

use std::any::Any;
use std::sync::Arc;

use jsonschema::Validator;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A call's arguments as its tool receives them: the JSON value (which `CallArgs` derefs
/// to, so `args["path"]` and `args.get("path")` read it) and, for a tool whose arguments are
/// a Rust type, that type decoded from it once per call. The pipeline makes one per call and
/// a new one when a hook rewrites the arguments, so what was decoded is always of the value
/// the tool is shown.
///
/// ```
/// use serde::Deserialize;
/// use toolrail_tools_core::CallArgs;
///
/// #[derive(Deserialize)]
/// struct Look {
///     path: String,
/// }
///
/// let args = CallArgs::from(serde_json::json!({"path": "src/lib.rs"}));
/// assert_eq!(args["path"], "src/lib.rs");
/// // Decoded at the first use and kept: the second read decodes nothing.
/// assert_eq!(args.decoded(|look: &Look| look.path.len())?, 10);
/// let look: Look = args.take_decoded()?;
/// assert_eq!(look.path, "src/lib.rs");
/// # Ok::<(), serde_json::Error>(())
/// ```
pub struct CallArgs {
    value: Arc<Value>,
    decoded: Mutex<Option<Box<dyn Any + Send>>>,
}

impl CallArgs {
    /// The arguments `value`, nothing decoded yet.
    pub fn new(value: impl Into<Arc<Value>>) -> Self {
        Self {
            value: value.into(),
            decoded: Mutex::new(None),
        }
    }

    /// The JSON value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The JSON value, shared (for events and views that outlive the call).
    pub fn shared(&self) -> &Arc<Value> {
        &self.value
    }

    /// Reads the arguments decoded as `T`: decoded at the first use (or when what was kept is
    /// another type) and kept for the next.
    pub fn decoded<T, R>(&self, read: impl FnOnce(&T) -> R) -> Result<R, serde_json::Error>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let mut kept = self.decoded.lock();
        if let Some(decoded) = kept.as_ref().and_then(|kept| kept.downcast_ref::<T>()) {
            return Ok(read(decoded));
        }
        let decoded: T = serde::Deserialize::deserialize(self.value.as_ref())?;
        let answer = read(&decoded);
        *kept = Some(Box::new(decoded));
        Ok(answer)
    }

    /// The arguments decoded as `T`, taken: what was kept if it is a `T`, else decoded now.
    /// A later read decodes again.
    pub fn take_decoded<T>(&self) -> Result<T, serde_json::Error>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let kept = self.decoded.lock().take();
        match kept.map(|kept| kept.downcast::<T>()) {
            Some(Ok(decoded)) => Ok(*decoded),
            _ => serde::Deserialize::deserialize(self.value.as_ref()),
        }
    }

    /// Another handle on the same value, with what was decoded moved to it (for a body that
    /// runs on its own task).
    pub(crate) fn hand_over(&self) -> Self {
        Self {
            value: Arc::clone(&self.value),
            decoded: Mutex::new(self.decoded.lock().take()),
        }
    }
}

impl std::ops::Deref for CallArgs {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

impl From<Value> for CallArgs {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

impl From<Arc<Value>> for CallArgs {
    fn from(value: Arc<Value>) -> Self {
        Self::new(value)
    }
}

impl std::fmt::Debug for CallArgs {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_tuple("CallArgs")
            .field(self.value.as_ref())
            .finish()
    }
}

/// Why raw arguments were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgumentError {
    /// Not JSON.
    Syntax {
        /// 1-based line of the error in the raw text.
        line: usize,
        /// 1-based column of the error in that line.
        column: usize,
        /// 0-based byte offset of the error in the raw text.
        byte: usize,
        /// serde_json's description of the error, without its position.
        message: String,
    },
    /// JSON that breaks the schema (or the tool's extra checks); each entry is
    /// `<pointer>: <what is wrong>`.
    Invalid {
        /// Every violation found, not only the first, so the model can fix them all at once.
        violations: Vec<String>,
    },
}

impl ArgumentError {
    /// The message the model reads (after `Error: `).
    pub fn message(&self, tool: &str) -> String {
        match self {
            Self::Syntax {
                line,
                column,
                byte,
                message,
            } => format!(
                "the arguments for `{tool}` are not valid JSON (line {line}, column {column}, byte {byte}): {message}. Send a JSON object."
            ),
            Self::Invalid { violations } => format!(
                "the arguments for `{tool}` do not match its input schema:\n{}",
                violations.join("\n")
            ),
        }
    }
}

/// Parses the raw argument text the model sent.
pub fn parse_arguments(raw: &str) -> Result<Value, ArgumentError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(raw).map_err(|error| {
        let (line, column) = (error.line(), error.column());
        ArgumentError::Syntax {
            line,
            column,
            byte: byte_offset(raw, line, column),
            message: strip_position(&error.to_string()),
        }
    })
}

/// Checks a value against a compiled schema, collecting every violation.
pub fn check_schema(validator: &Validator, value: &Value) -> Result<(), ArgumentError> {
    if validator.is_valid(value) {
        return Ok(());
    }
    let violations = validator
        .iter_errors(value)
        .map(|error| {
            let pointer = error.instance_path().as_str();
            let pointer = if pointer.is_empty() { "/" } else { pointer };
            format!("{pointer}: {error}")
        })
        .collect();
    Err(ArgumentError::Invalid { violations })
}

/// The 0-based byte offset of serde_json's 1-based (line, column) position.
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (line_start + column.saturating_sub(1)).min(text.len())
}

/// serde_json appends " at line L column C"; the message carries the position already.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// `Ok` when no problem was found, else every problem: the shape of
/// [`TypedTool::check`](crate::TypedTool::check).
pub fn violations(problems: Vec<String>) -> Result<(), Vec<String>> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn empty_text_is_an_empty_object() {
        assert_eq!(parse_arguments("").unwrap(), json!({}));
        assert_eq!(parse_arguments("  \n").unwrap(), json!({}));
    }

    #[test]
    fn syntax_errors_name_their_position() {
        let error = parse_arguments("{\"a\": 1,\n \"b\": }").unwrap_err();
        let ArgumentError::Syntax {
            line, column, byte, ..
        } = &error
        else {
            panic!("expected a syntax error, got {error:?}");
        };
        assert_eq!((*line, *column), (2, 7));
        assert_eq!(*byte, 15);
        let text = error.message("demo");
        assert!(text.contains("line 2, column 7, byte 15"), "{text}");
    }

    #[test]
    fn every_violation_is_listed_with_its_pointer() {
        let schema = json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["path"],
            "additionalProperties": false
        });
        let validator = jsonschema::validator_for(&schema).unwrap();
        let error = check_schema(&validator, &json!({"path": 3, "limit": 0})).unwrap_err();
        let ArgumentError::Invalid { violations } = error else {
            panic!("expected violations");
        };
        let mut violations = violations;
        violations.sort();
        assert_eq!(
            violations,
            vec![
                "/limit: 0 is less than the minimum of 1".to_owned(),
                "/path: 3 is not of type \"string\"".to_owned(),
            ]
        );
        let missing = check_schema(&validator, &json!({})).unwrap_err();
        assert_eq!(
            missing,
            ArgumentError::Invalid {
                violations: vec!["/: \"path\" is a required property".to_owned()]
            }
        );
    }
}
