//! Identifiers of a session and of the things in it.
//!
//! Call ids are cloned at every stage of the pipeline, so they share their text (`Arc<str>`).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The id of one session; also the file stem of its log.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(Arc<str>);

/// The id of one tool call, as the model named it (`c1`), or derived for a code-mode
/// sub-call (`c1:code:3`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CallId(Arc<str>);

macro_rules! text_id {
    ($ty:ident) => {
        impl $ty {
            /// Wraps the given text as an id.
            pub fn new(text: impl AsRef<str>) -> Self {
                Self(Arc::from(text.as_ref()))
            }

            /// The id's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // Straight into the shared text: one allocation, not a String and then an Arc.
                struct IdVisitor;
                impl serde::de::Visitor<'_> for IdVisitor {
                    type Value = $ty;
                    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                        formatter.write_str("an id string")
                    }
                    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<$ty, E> {
                        Ok($ty::new(text))
                    }
                }
                deserializer.deserialize_str(IdVisitor)
            }
        }

        impl From<&str> for $ty {
            fn from(text: &str) -> Self {
                Self::new(text)
            }
        }

        impl From<String> for $ty {
            fn from(text: String) -> Self {
                Self(Arc::from(text))
            }
        }
    };
}

text_id!(SessionId);
text_id!(CallId);

impl CallId {
    /// The id of the `n`th tool call a code-mode program made inside call `self`.
    pub fn code_sub_call(&self, n: u32) -> CallId {
        CallId::from(format!("{}:code:{n}", self.0))
    }

    /// Whether this id names a tool call a code-mode program made (`<parent>:code:<n>`).
    pub fn is_code_sub_call(&self) -> bool {
        self.0.contains(":code:")
    }

    /// Whether this id names a tool call the program of call `parent` made.
    ///
    /// ```
    /// use toolrail_session_log::CallId;
    /// let parent = CallId::from("c1");
    /// assert!(parent.code_sub_call(3).is_code_sub_call_of(&parent));
    /// assert!(!CallId::from("c10:code:1").is_code_sub_call_of(&parent));
    /// ```
    pub fn is_code_sub_call_of(&self, parent: &CallId) -> bool {
        self.0
            .strip_prefix(parent.as_str())
            .is_some_and(|rest| rest.starts_with(":code:"))
    }
}

/// The number of a user turn in a session, starting at 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TurnId(pub u32);

/// The number of a model request (a step) inside a turn, starting at 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepId(pub u32);

impl fmt::Display for TurnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
