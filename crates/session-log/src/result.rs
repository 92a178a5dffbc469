//! The result record of a tool call: the one value the model, the UI and the log share.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::details::Details;
use crate::elided::ElidedBlock;

/// Where a tool came from. Recorded with every call, so its names are shared, not copied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolSource {
    /// Shipped with the program that built the registry; trusted.
    Builtin,
    /// Installed by the toolrail runtime itself (`run_code`, `tool_search`).
    Runtime,
    /// Added by a named extension.
    Extension(Arc<str>),
    /// Offered by a named MCP server.
    Mcp(Arc<str>),
}

impl ToolSource {
    /// Built-in and runtime tools are trusted: a conflict among them is a configuration
    /// error, while a conflict involving any other source skips that tool.
    pub fn is_trusted(&self) -> bool {
        match self {
            Self::Builtin | Self::Runtime => true,
            Self::Extension(_) | Self::Mcp(_) => false,
        }
    }
}

impl fmt::Display for ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin => f.write_str("builtin"),
            Self::Runtime => f.write_str("runtime"),
            Self::Extension(name) => write!(f, "extension({name})"),
            Self::Mcp(server) => write!(f, "mcp({server})"),
        }
    }
}

impl FromStr for ToolSource {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let inner = |prefix: &str| {
            text.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(')'))
                .map(str::to_owned)
        };
        match text {
            "builtin" => Ok(Self::Builtin),
            "runtime" => Ok(Self::Runtime),
            _ => {
                if let Some(name) = inner("extension(") {
                    Ok(Self::Extension(name.into()))
                } else if let Some(server) = inner("mcp(") {
                    Ok(Self::Mcp(server.into()))
                } else {
                    Err(format!(
                        "unknown tool source `{text}`: expected builtin, runtime, extension(NAME) or mcp(SERVER)"
                    ))
                }
            }
        }
    }
}

impl Serialize for ToolSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolSource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $text:literal,)*) => {
        /// A stable error code (DESIGN §4). Tools may add their own codes with
        /// [`ErrorCode::custom`]; the strings never change once released.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
            /// A code a tool defined for itself, e.g. `FS_STALE_VERSION`; made with
            /// [`ErrorCode::custom`], so it is always well formed and never a built-in code.
            Custom(CustomCode),
        }

        impl ErrorCode {
            /// Every code defined by toolrail itself, in declaration order.
            pub const BUILT_IN: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// Their texts, for checks made while compiling.
            const BUILT_IN_TEXT: &'static [&'static str] = &[$($text,)*];

            /// The stable text of the code.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Custom(code) => &code.0,
                }
            }

            fn from_known(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(Self::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// The arguments are not JSON.
    SyntaxError = "SYNTAX_ERROR",
    /// The arguments are JSON but violate the tool's input schema.
    InvalidArgs = "INVALID_ARGS",
    /// The tool is not in this request's tool set.
    UnknownTool = "UNKNOWN_TOOL",
    /// The assistant message was cut by the output-length limit.
    TruncatedCall = "TRUNCATED_CALL",
    /// A pre-execute hook denied the call.
    PolicyDenied = "POLICY_DENIED",
    /// A guard denied the call.
    GuardDenied = "GUARD_DENIED",
    /// The approver rejected the call.
    ApprovalRejected = "APPROVAL_REJECTED",
    /// The approval was cancelled (by the approver or by cancelling the batch).
    ApprovalCancelled = "APPROVAL_CANCELLED",
    /// No answer came in time.
    ApprovalExpired = "APPROVAL_EXPIRED",
    /// No approval service could be asked.
    ApprovalUnavailable = "APPROVAL_UNAVAILABLE",
    /// A hook or guard failed or panicked.
    HookFailed = "HOOK_FAILED",
    /// The state the call relied on changed.
    StaleState = "STALE_STATE",
    /// The call never started: the batch was cancelled or an earlier call stopped it.
    NotExecuted = "NOT_EXECUTED",
    /// The call was cancelled while running.
    Aborted = "ABORTED",
    /// The call ran past its deadline.
    ToolTimeout = "TOOL_TIMEOUT",
    /// The body returned an error or panicked.
    ToolFailed = "TOOL_FAILED",
    /// The body's value broke the output schema or a byte cap.
    InvalidToolOutput = "INVALID_TOOL_OUTPUT",
    /// A post-execute hook withheld the result from the model (the call did run).
    ResultBlocked = "RESULT_BLOCKED",
    /// Recovery: the call was recorded but never started.
    ToolNotStarted = "TOOL_NOT_STARTED",
    /// Recovery or abandonment: the call started and its outcome is not known.
    ToolOutcomeUnknown = "TOOL_OUTCOME_UNKNOWN",
}

/// The text of a tool-defined error code. Only [`ErrorCode::custom`], [`CustomCode::checked`]
/// (while compiling) and reading a log make one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CustomCode(Cow<'static, str>);

impl CustomCode {
    /// The code's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A code written in the program, checked while it compiles: used in a `const`, a text
    /// that is not `SCREAMING_SNAKE` or that is one of toolrail's own codes fails the build.
    /// (Tools name theirs through `toolrail_tools_core::tool_code!`, which always checks at
    /// compile time.)
    ///
    /// ```
    /// use toolrail_session_log::CustomCode;
    ///
    /// const STALE: CustomCode = CustomCode::checked("FS_STALE_VERSION");
    /// assert_eq!(STALE.as_str(), "FS_STALE_VERSION");
    /// ```
    ///
    /// ```compile_fail
    /// use toolrail_session_log::CustomCode;
    ///
    /// const TYPO: CustomCode = CustomCode::checked("fs_stale");
    /// ```
    pub const fn checked(text: &'static str) -> Self {
        assert!(
            well_formed(text.as_bytes()),
            "a custom error code is SCREAMING_SNAKE: A-Z, 0-9 and _, starting with a letter"
        );
        let mut known = 0;
        while known < ErrorCode::BUILT_IN_TEXT.len() {
            assert!(
                !same(ErrorCode::BUILT_IN_TEXT[known].as_bytes(), text.as_bytes()),
                "this is one of toolrail's own codes; use the ErrorCode variant"
            );
            known += 1;
        }
        Self(Cow::Borrowed(text))
    }
}

/// `SCREAMING_SNAKE`: `A-Z`, `0-9` and `_`, starting with a letter.
const fn well_formed(text: &[u8]) -> bool {
    if text.is_empty() || !text[0].is_ascii_uppercase() {
        return false;
    }
    let mut at = 0;
    while at < text.len() {
        let c = text[at];
        if !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_') {
            return false;
        }
        at += 1;
    }
    true
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut at = 0;
    while at < a.len() {
        if a[at] != b[at] {
            return false;
        }
        at += 1;
    }
    true
}

/// A custom error code that is not `SCREAMING_SNAKE` or that reuses a built-in code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid error code `{code}`: {why}")]
pub struct InvalidErrorCode {
    /// The rejected text.
    pub code: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl ErrorCode {
    /// A tool-defined code. It must be `SCREAMING_SNAKE` (`A-Z`, `0-9`, `_`, starting with a
    /// letter) and must not be one of toolrail's own codes.
    pub fn custom(code: impl Into<String>) -> Result<Self, InvalidErrorCode> {
        let code = code.into();
        if !well_formed(code.as_bytes()) {
            return Err(InvalidErrorCode {
                code,
                why: "use SCREAMING_SNAKE: A-Z, 0-9 and _, starting with a letter",
            });
        }
        if Self::from_known(&code).is_some() {
            return Err(InvalidErrorCode {
                code,
                why: "this is one of toolrail's own codes; use the ErrorCode variant",
            });
        }
        Ok(Self::Custom(CustomCode(Cow::Owned(code))))
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        // A log written by a newer version may carry codes this reader does not know; keep
        // them as custom codes rather than refusing the line.
        Ok(Self::from_known(&text).unwrap_or(Self::Custom(CustomCode(Cow::Owned(text)))))
    }
}

/// The error part of a result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolErrorInfo {
    /// The stable code.
    pub code: ErrorCode,
    /// What happened, for people and for the model.
    pub message: String,
    /// What refused or failed the call, when a policy stage did: the guard or the hook by
    /// its name (`GUARD_DENIED`, `POLICY_DENIED`, `HOOK_FAILED`). Absent otherwise, and in
    /// older logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A change to the world that a tool confirmed it made. Effects survive every later
/// failure of the call: a result may be an error while its effects say the world changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Effect {
    /// A file was written; digests of the content before (absent: it did not exist) and after.
    FileWritten {
        /// The file, as the tool resolved it (the fs tools: symlinks resolved).
        path: String,
        /// Digest of the old content; absent when the file did not exist.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<String>,
        /// Digest of the new content.
        after: String,
    },
    /// A file was deleted; digest of its content before.
    FileDeleted {
        /// The file, as the tool resolved it.
        path: String,
        /// Digest of the content it had.
        before: String,
    },
    /// A file was moved.
    FileMoved {
        /// The path it had.
        from: String,
        /// The path it has now.
        to: String,
    },
    /// A process was started (and may outlive the call).
    ProcessSpawned {
        /// The operating system's id of the process.
        pid: u32,
        /// The command it runs, as the tool shows it.
        command: String,
    },
    /// A tool-specific effect.
    Other {
        /// What kind of effect, in the tool's own terms (shown as `name: data`).
        name: String,
        /// What the tool says about it, any JSON (`null` for nothing).
        data: Value,
    },
}

/// Where the time of a call went, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// From prepared to started: waiting for a slot, a barrier or a claim.
    pub queued_us: u64,
    /// Parse, hooks, approval and guards.
    pub policy_us: u64,
    /// The part of `policy_us` spent waiting for an approval answer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub approval_us: u64,
    /// Execute layers and the body.
    pub run_us: u64,
    /// From record to commit.
    pub total_us: u64,
}

/// The length of a value's compact JSON text (a `Value`, or anything serializable), without
/// building the text.
pub fn json_len(value: &impl Serialize) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a Value to a counter cannot fail; treat the impossible as "larger than any cap".
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

/// Reads an optional JSON field so that a present `null` stays `Some(Null)`: only an absent
/// field is `None`. Without it a tool's `null` value would not survive the log.
pub(crate) fn present_value<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Like [`present_value`], for details: a present `null` is kept (as custom details).
pub(crate) fn present_details<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Details>, D::Error> {
    Details::deserialize(deserializer).map(Some)
}

pub(crate) fn is_zero(value: &u64) -> bool {
    *value == 0
}

pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

/// The committed result of one tool call.
///
/// Whether it is a failure is not a field of its own: a result is an error exactly when it
/// carries [`ToolResultRecord::error`] ([`ToolResultRecord::is_error`]), so the two can never
/// disagree. The stored form still writes `is_error` for readers of the format.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResultRecord {
    /// What the model reads.
    pub content: Vec<ContentBlock>,
    /// Structured JSON for programs (code mode). A present `null` stays `Some(Null)`.
    pub value: Option<Value>,
    /// UI-only structured data in a card's shape ([`Details`]); persisted, never sent to the
    /// model.
    pub details: Option<Details>,
    /// Confirmed changes to the world.
    pub effects: Vec<Effect>,
    /// The code and message of a failure; `None` for a success.
    pub error: Option<ToolErrorInfo>,
    /// Where the time went.
    pub timing: Timing,
    /// Written by the runtime for a call that did not produce a result of its own.
    pub synthetic: bool,
    /// The tool ended the turn with this result (a final answer, leaving plan mode): the loop
    /// asks the model nothing more in this turn.
    pub concludes_turn: bool,
    /// The blocks of `content` that were cut to keep the model's text under its cap, each
    /// with the whole block it was cut from (never sent to the model; kept beside the log).
    pub elided: Vec<ElidedBlock>,
}

/// The stored shape of a record, field for field as it has always been written.
#[derive(Serialize)]
struct WireRef<'a> {
    content: &'a [ContentBlock],
    #[serde(skip_serializing_if = "absent")]
    value: &'a Option<Value>,
    #[serde(skip_serializing_if = "absent")]
    details: &'a Option<Details>,
    #[serde(skip_serializing_if = "empty")]
    effects: &'a [Effect],
    is_error: bool,
    #[serde(skip_serializing_if = "absent")]
    error: &'a Option<ToolErrorInfo>,
    timing: &'a Timing,
    #[serde(skip_serializing_if = "is_false")]
    synthetic: bool,
    #[serde(skip_serializing_if = "is_false")]
    concludes_turn: bool,
    #[serde(skip_serializing_if = "empty")]
    elided: &'a [ElidedBlock],
}

fn absent<T>(field: &&Option<T>) -> bool {
    field.is_none()
}

fn empty<T>(field: &&[T]) -> bool {
    field.is_empty()
}

#[derive(Deserialize)]
struct Wire {
    content: Vec<ContentBlock>,
    #[serde(default, deserialize_with = "crate::result::present_value")]
    value: Option<Value>,
    #[serde(default, deserialize_with = "crate::result::present_details")]
    details: Option<Details>,
    #[serde(default)]
    effects: Vec<Effect>,
    #[serde(default)]
    is_error: bool,
    #[serde(default)]
    error: Option<ToolErrorInfo>,
    #[serde(default)]
    timing: Timing,
    #[serde(default)]
    synthetic: bool,
    #[serde(default)]
    concludes_turn: bool,
    #[serde(default)]
    elided: Vec<ElidedBlock>,
}

impl Serialize for ToolResultRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireRef {
            content: &self.content,
            value: &self.value,
            details: &self.details,
            effects: &self.effects,
            is_error: self.is_error(),
            error: &self.error,
            timing: &self.timing,
            synthetic: self.synthetic,
            concludes_turn: self.concludes_turn,
            elided: &self.elided,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolResultRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let mut record = Self {
            content: wire.content,
            value: wire.value,
            details: wire.details,
            effects: wire.effects,
            error: wire.error,
            timing: wire.timing,
            synthetic: wire.synthetic,
            concludes_turn: wire.concludes_turn,
            elided: wire.elided,
        };
        // A writer that marked a failure without saying which: the one place that names it,
        // so no reader has to guess a code of its own.
        if wire.is_error && record.error.is_none() {
            record.error = Some(ToolErrorInfo {
                code: ErrorCode::ToolFailed,
                message: record.text(),
                by: None,
            });
        }
        Ok(record)
    }
}

/// A large JSON value kept beside the log, named by the SHA-256 of its compact text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Length of the compact JSON text, in bytes.
    pub bytes: u64,
}

impl ToolResultRecord {
    /// A successful result with the given content.
    pub fn success(content: Vec<ContentBlock>) -> Self {
        Self {
            content,
            value: None,
            details: None,
            effects: Vec::new(),
            error: None,
            timing: Timing::default(),
            synthetic: false,
            concludes_turn: false,
            elided: Vec::new(),
        }
    }

    /// A failed result: the model reads `Error: <message>`.
    pub fn failure(code: ErrorCode, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            content: vec![ContentBlock::text(format!("Error: {message}"))],
            value: None,
            details: None,
            effects: Vec::new(),
            error: Some(ToolErrorInfo {
                code,
                message,
                by: None,
            }),
            timing: Timing::default(),
            synthetic: false,
            concludes_turn: false,
            elided: Vec::new(),
        }
    }

    /// What the model reads as text: the text blocks, in order, joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentBlock::as_text)
            .collect()
    }

    /// The text before any cut for the model's cap: like [`ToolResultRecord::text`], with
    /// each block that was cut read from its whole (`elided`). For programs (code mode),
    /// which may take in more than the model is shown.
    pub fn whole_text(&self) -> String {
        self.content
            .iter()
            .enumerate()
            .filter_map(|(index, block)| {
                let whole = self
                    .elided
                    .iter()
                    .find(|elided| elided.index == index)
                    .and_then(|elided| elided.whole.as_ref());
                match whole {
                    Some(whole) => whole.as_text(),
                    None => block.as_text(),
                }
            })
            .collect()
    }

    /// Whether the model should read this as a failure: exactly when it carries an error.
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The error code, if this result is a failure.
    pub fn error_code(&self) -> Option<&ErrorCode> {
        self.error.as_ref().map(|error| &error.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_keep_their_stable_text() {
        let texts: Vec<&str> = ErrorCode::BUILT_IN.iter().map(ErrorCode::as_str).collect();
        assert_eq!(
            texts,
            [
                "SYNTAX_ERROR",
                "INVALID_ARGS",
                "UNKNOWN_TOOL",
                "TRUNCATED_CALL",
                "POLICY_DENIED",
                "GUARD_DENIED",
                "APPROVAL_REJECTED",
                "APPROVAL_CANCELLED",
                "APPROVAL_EXPIRED",
                "APPROVAL_UNAVAILABLE",
                "HOOK_FAILED",
                "STALE_STATE",
                "NOT_EXECUTED",
                "ABORTED",
                "TOOL_TIMEOUT",
                "TOOL_FAILED",
                "INVALID_TOOL_OUTPUT",
                "RESULT_BLOCKED",
                "TOOL_NOT_STARTED",
                "TOOL_OUTCOME_UNKNOWN",
            ]
        );
        for code in ErrorCode::BUILT_IN {
            let json = serde_json::to_string(code).unwrap();
            let back: ErrorCode = serde_json::from_str(&json).unwrap();
            assert_eq!(&back, code);
        }
    }

    #[test]
    fn custom_codes_must_be_screaming_snake_and_new() {
        assert_eq!(
            ErrorCode::custom("FS_STALE_VERSION").unwrap().as_str(),
            "FS_STALE_VERSION"
        );
        assert!(ErrorCode::custom("fs_stale").is_err());
        assert!(ErrorCode::custom("_X").is_err());
        assert!(ErrorCode::custom("").is_err());
        let reused = ErrorCode::custom("TOOL_FAILED").unwrap_err();
        assert!(
            reused.to_string().contains("toolrail's own codes"),
            "{reused}"
        );
    }

    #[test]
    fn tool_sources_round_trip_as_text() {
        for source in [
            ToolSource::Builtin,
            ToolSource::Runtime,
            ToolSource::Extension("lint".into()),
            ToolSource::Mcp("github".into()),
        ] {
            let json = serde_json::to_value(&source).unwrap();
            assert_eq!(json, Value::String(source.to_string()));
            assert_eq!(serde_json::from_value::<ToolSource>(json).unwrap(), source);
        }
        assert!("mcp(x".parse::<ToolSource>().is_err());
    }

    #[test]
    fn failure_text_is_error_colon_message() {
        let record = ToolResultRecord::failure(ErrorCode::ToolFailed, "disk full");
        assert_eq!(record.content, vec![ContentBlock::text("Error: disk full")]);
        assert!(record.is_error());
    }
}
