//! The read-only view of a call that policy stages get.

use serde_json::Value;
use toolrail_session_log::ToolSource;

use crate::context::CallIdentity;
use crate::spec::{SubjectKind, ToolSpec};

/// A call as policy stages see it: no setters, so no stage can change it in place.
#[derive(Clone, Copy, Debug)]
pub struct CallView<'a> {
    /// The call's identity, fixed when it was recorded.
    pub identity: &'a CallIdentity,
    /// The spec of the tool the call resolved to, as the registry offers it.
    pub spec: &'a ToolSpec,
    /// Where that tool came from.
    pub source: &'a ToolSource,
    /// The arguments as they stand at this stage (after any rewrite).
    pub arguments: &'a Value,
}

impl<'a> CallView<'a> {
    /// The call's subject: the string its tool declares as the subject argument. `None`
    /// when the tool declares none, or the argument is missing or not a string.
    pub fn subject(&self) -> Option<Subject<'a>> {
        let declared = self.spec.subject()?;
        let text = self.arguments.get(&declared.field)?.as_str()?;
        Some(Subject {
            kind: declared.kind,
            text,
        })
    }
}

/// The subject of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subject<'a> {
    /// How patterns match the text: as a path or as plain text.
    pub kind: SubjectKind,
    /// The argument's string, as the model sent it or a rewrite left it.
    pub text: &'a str,
}

/// A failure of a hook. The call fails with `HOOK_FAILED` and never runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

impl HookError {
    /// A failure saying `message`, which the refusal the model reads quotes.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}
