//! The `Tool` trait, the output and failure of a body, and typed tools whose arguments
//! arrive as a Rust value.

use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize as _, Serialize};
use serde_json::Value;
use toolrail_session_log::details::Details;
use toolrail_session_log::{
    BoxFuture, ContentBlock, CustomCode, ErrorCode, InvalidErrorCode, ToolErrorInfo,
};

use crate::arguments::CallArgs;
use crate::context::ToolContext;
use crate::spec::{Concurrency, ToolSpec};

/// What a body returns on success.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// What the model reads.
    pub content: Vec<ContentBlock>,
    /// Structured JSON for programs; checked against the output schema.
    pub value: Option<Value>,
    /// UI-only data in a card's shape, never sent to the model.
    pub details: Option<Details>,
    /// This result ends the turn: the loop asks the model nothing more (a successful result
    /// only).
    pub concludes_turn: bool,
}

impl ToolOutput {
    /// Text for the model, no value.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            value: None,
            details: None,
            concludes_turn: false,
        }
    }

    /// A value for programs, shown to the model as compact JSON text.
    pub fn value(value: Value) -> Self {
        Self {
            content: vec![ContentBlock::text(value.to_string())],
            value: Some(value),
            details: None,
            concludes_turn: false,
        }
    }

    /// Like [`ToolOutput::value`] from any serializable type.
    pub fn serialize<T: Serialize>(value: &T) -> Result<Self, ToolFailure> {
        serde_json::to_value(value)
            .map(Self::value)
            .map_err(|error| {
                ToolFailure::new(format!("the tool's value could not be serialized: {error}"))
            })
    }

    /// Marks the result as ending the turn.
    pub fn concluding(mut self) -> Self {
        self.concludes_turn = true;
        self
    }

    /// Adds UI-only details: one of the card shapes, or
    /// [`Custom`](toolrail_session_log::details::Custom) details of the tool's own.
    pub fn with_details(mut self, details: impl Into<Details>) -> Self {
        self.details = Some(details.into());
        self
    }
}

/// The code a tool may fail with: `TOOL_FAILED`, `STALE_STATE`, `TOOL_TIMEOUT`,
/// `TOOL_OUTCOME_UNKNOWN`, or a code of the tool's own. The codes that say what the pipeline
/// did (`POLICY_DENIED`, `NOT_EXECUTED`, `ABORTED`, …) have no `ToolCode`, so a tool cannot
/// claim one.
///
/// A tool that talks to something else (an MCP server, a remote API) follows one rule
/// (DESIGN §3, *honest outcomes at the seams*): `TOOL_FAILED` only when the counterpart said
/// the call failed; `TOOL_TIMEOUT` when the counterpart's deadline passed without an answer;
/// `TOOL_OUTCOME_UNKNOWN` when the request may have reached something that acts and its
/// answer was lost (a connection that broke, an answer that could not be read). A tool's own code is named once, as a
/// constant checked while the program compiles ([`tool_code!`](crate::tool_code)); a code only known at run
/// time (from a remote server) goes through [`ToolCode::parse`].
///
/// ```
/// use toolrail_tools_core::{ToolCode, ToolFailure, tool_code};
///
/// const QUOTA: ToolCode = tool_code!("WEB_QUOTA_EXCEEDED");
/// let failure = ToolFailure::with_code(QUOTA, "the daily quota is used up");
/// assert_eq!(failure.code().as_str(), "WEB_QUOTA_EXCEEDED");
/// assert!(ToolCode::parse("POLICY_DENIED").is_err()); // the pipeline's, not a tool's
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolCode(ErrorCode);

impl ToolCode {
    /// `TOOL_FAILED`: the body failed.
    pub const FAILED: Self = Self(ErrorCode::ToolFailed);
    /// `STALE_STATE`: the state the call relied on changed.
    pub const STALE_STATE: Self = Self(ErrorCode::StaleState);
    /// `TOOL_TIMEOUT`: the tool's counterpart did not answer before its deadline (a remote
    /// call's own timeout; the pipeline's deadline gives this code by itself).
    pub const TIMEOUT: Self = Self(ErrorCode::ToolTimeout);
    /// `TOOL_OUTCOME_UNKNOWN`: the request may have reached something that acts, and its
    /// answer was lost; whether it acted is not known.
    pub const OUTCOME_UNKNOWN: Self = Self(ErrorCode::ToolOutcomeUnknown);

    /// A tool's own code, checked while compiling; use it through [`tool_code!`](crate::tool_code).
    #[doc(hidden)]
    pub const fn checked(text: &'static str) -> Self {
        Self(ErrorCode::Custom(CustomCode::checked(text)))
    }

    /// A tool's own code known only at run time: `SCREAMING_SNAKE`, not one of toolrail's.
    pub fn parse(text: &str) -> Result<Self, InvalidErrorCode> {
        ErrorCode::custom(text).map(Self)
    }

    /// The code's stable text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl From<ToolCode> for ErrorCode {
    fn from(code: ToolCode) -> Self {
        code.0
    }
}

impl std::fmt::Display for ToolCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool's own error code as a [`ToolCode`], checked when the program compiles: a text that
/// is not `SCREAMING_SNAKE`, or that is one of toolrail's own codes, fails the build.
///
/// ```compile_fail
/// const TYPO: toolrail_tools_core::ToolCode = toolrail_tools_core::tool_code!("web-quota");
/// ```
///
/// ```compile_fail
/// const CLAIM: toolrail_tools_core::ToolCode = toolrail_tools_core::tool_code!("POLICY_DENIED");
/// ```
#[macro_export]
macro_rules! tool_code {
    ($text:literal) => {
        const { $crate::ToolCode::checked($text) }
    };
}

/// What a body returns on failure.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolFailure {
    code: ToolCode,
    message: String,
}

impl ToolFailure {
    /// A `TOOL_FAILED` failure.
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_code(ToolCode::FAILED, message)
    }

    /// A `TOOL_TIMEOUT` failure: the counterpart did not answer in time. The message says
    /// how long was waited and whether the request was cancelled.
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self::with_code(ToolCode::TIMEOUT, message)
    }

    /// A `TOOL_OUTCOME_UNKNOWN` failure: the request may have acted and its answer was lost.
    /// The message says what was lost and what to check before trying again.
    ///
    /// ```
    /// use toolrail_tools_core::ToolFailure;
    ///
    /// let lost = ToolFailure::outcome_unknown("the server ended before it answered");
    /// assert_eq!(lost.code().as_str(), "TOOL_OUTCOME_UNKNOWN");
    /// ```
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        Self::with_code(ToolCode::OUTCOME_UNKNOWN, message)
    }

    /// A failure with a code the tool may use (its own, or one of [`ToolCode`]'s constants).
    pub fn with_code(code: ToolCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The failure's code.
    pub fn code(&self) -> &ToolCode {
        &self.code
    }

    /// What happened, for people and for the model.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn into_info(self) -> ToolErrorInfo {
        ToolErrorInfo {
            code: self.code.into(),
            message: self.message,
            by: None,
        }
    }
}

/// The result of running a body.
pub type ToolResult = Result<ToolOutput, ToolFailure>;

/// A tool the pipeline can run.
///
/// Implementors guarantee: `spec` returns the same definition for the tool's lifetime;
/// `concurrency` is a cheap, pure function of the arguments; `execute` reports every change
/// it makes to the world through [`ToolContext::report_effect`] as soon as the change is
/// confirmed, and watches [`ToolContext::cancellation`]. A panic anywhere is caught and
/// becomes a result (`TOOL_FAILED`, or `Exclusive` for `concurrency`), never a crash.
///
/// Every method gets the call's [`CallArgs`]: the JSON value (it derefs to it), and a place
/// to keep the arguments decoded into a Rust type so the stages after the check do not decode
/// them again ([`Typed`] does this for a [`TypedTool`]).
pub trait Tool: Send + Sync + 'static {
    /// The definition.
    fn spec(&self) -> &ToolSpec;

    /// What may overlap with this call. The default is what the spec declares
    /// ([`ToolSpecBuilder::parallel_safe`](crate::spec::ToolSpecBuilder::parallel_safe), [`ToolSpecBuilder::parallel_with`](crate::spec::ToolSpecBuilder::parallel_with)), and without a
    /// declaration the safe answer: `Exclusive`.
    fn concurrency(&self, _args: &CallArgs) -> Concurrency {
        self.spec()
            .declared_concurrency()
            .cloned()
            .unwrap_or(Concurrency::Exclusive)
    }

    /// Extra argument checks beyond the input schema, run at parse time (before anything is
    /// started). `Err` holds the violations; the call is refused with `INVALID_ARGS`.
    fn check_arguments(&self, _args: &CallArgs) -> Result<(), Vec<String>> {
        Ok(())
    }

    /// Why this call must be approved by the approval service whatever the policy says
    /// (a command asking for more than its sandbox allows), or `None`. Such a call asks
    /// even where a rule allows it, no session approval covers it, and the body can see
    /// the grant through [`ToolContext::approval_granted`]. A deny still wins.
    fn must_ask(&self, _args: &CallArgs) -> Option<String> {
        None
    }

    /// What this call would change, for the person asked to approve it (a unified diff for
    /// a file edit), computed from the arguments and the world as it is now, without
    /// changing anything. Asked only for calls that ask; `None` (the default) when the tool
    /// cannot say.
    fn preview<'a>(&'a self, _args: &'a CallArgs) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(None))
    }

    /// Runs the body.
    fn execute<'a>(&'a self, ctx: &'a ToolContext, args: &'a CallArgs)
    -> BoxFuture<'a, ToolResult>;

    /// Adjusts the model-facing content once, on every outcome of a call of this tool
    /// (success, refusal, failure). A panic leaves the content as it then stands.
    fn finalize_content(&self, _content: &mut Vec<ContentBlock>, _outcome: &FinalizeView<'_>) {}
}

/// What `finalize_content` may look at.
#[derive(Debug)]
pub struct FinalizeView<'a> {
    /// The call's effective arguments; `null` when the call was refused before they were
    /// validated.
    pub arguments: &'a Value,
    /// The failure, if the call ends as one.
    pub error: Option<&'a ToolErrorInfo>,
}

impl FinalizeView<'_> {
    /// The call ends as a failure.
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }
}

/// A tool whose arguments are a Rust type: the input schema is derived from it and the body
/// receives it deserialized. Wrap it in [`Typed`] to register it.
///
/// **Concurrency.** By default every call is `Exclusive`: it runs alone, after every earlier
/// call of its batch committed — the safe answer for a tool that may change the world. A tool
/// whose calls never conflict says so with one builder call on its spec,
/// [`ToolSpecBuilder::parallel_safe`](crate::spec::ToolSpecBuilder::parallel_safe) (or [`ToolSpecBuilder::parallel_with`](crate::spec::ToolSpecBuilder::parallel_with) for calls that claim a
/// resource); one whose answer depends on the arguments overrides
/// [`TypedTool::concurrency`]. `read_only` (what the user permits to run without asking) is
/// a separate fact, set with [`ToolSpecBuilder::read_only`](crate::spec::ToolSpecBuilder::read_only).
///
/// ```
/// use toolrail_tools_core::{ToolContext, ToolOutput, ToolResult, ToolSpec, Typed, TypedTool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct AddArgs {
///     /// The numbers to add.
///     numbers: Vec<f64>,
/// }
///
/// struct Add;
///
/// impl TypedTool for Add {
///     type Args = AddArgs;
///
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::for_args::<AddArgs>("add", "Add numbers.")
///             .read_only()
///             .parallel_safe()
///             .build()
///     }
///
///     async fn run(&self, _ctx: &ToolContext, args: AddArgs) -> ToolResult {
///         Ok(ToolOutput::text(args.numbers.iter().sum::<f64>().to_string()))
///     }
/// }
///
/// let tool = Typed::new(Add);
/// # use toolrail_tools_core::{Concurrency, Tool};
/// # use toolrail_tools_core::CallArgs;
/// let args = CallArgs::from(serde_json::json!({"numbers": [1]}));
/// assert_eq!(tool.concurrency(&args), Concurrency::shared());
/// ```
pub trait TypedTool: Send + Sync + 'static {
    /// The argument type; its `JsonSchema` is the tool's input schema.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;

    /// The definition; build it with [`ToolSpec::for_args::<Self::Args>`].
    fn spec(&self) -> ToolSpec;

    /// What may overlap with this call, when it depends on the arguments. Not consulted
    /// when the spec declares the tool's concurrency; by default `Exclusive`.
    fn concurrency(&self, _args: &Self::Args) -> Concurrency {
        Concurrency::Exclusive
    }

    /// Checks a schema cannot express, at parse time: `Err` lists every violation (as
    /// `/json/pointer: what is wrong`) and the call is refused with `INVALID_ARGS`.
    fn check(&self, _args: &Self::Args) -> Result<(), Vec<String>> {
        Ok(())
    }

    /// Why this call must be approved whatever the policy says; see [`Tool::must_ask`].
    fn must_ask(&self, _args: &Self::Args) -> Option<String> {
        None
    }

    /// What this call would change, for its approval; see [`Tool::preview`].
    fn preview(&self, _args: Self::Args) -> impl Future<Output = Option<String>> + Send {
        std::future::ready(None)
    }

    /// Runs the body with the deserialized arguments.
    fn run(&self, ctx: &ToolContext, args: Self::Args) -> impl Future<Output = ToolResult> + Send;
}

/// Adapts a [`TypedTool`] to [`Tool`].
pub struct Typed<T: TypedTool> {
    inner: T,
    spec: ToolSpec,
}

impl<T: TypedTool> Typed<T> {
    /// Wraps a typed tool, computing its definition once.
    pub fn new(inner: T) -> Self {
        let spec = inner.spec();
        Self { inner, spec }
    }
}

/// The arguments are decoded into `T::Args` once per call, at the argument check, and every
/// later stage reads that decoding (the body takes it).
impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, args: &CallArgs) -> Concurrency {
        if let Some(declared) = self.spec.declared_concurrency() {
            return declared.clone();
        }
        args.decoded(|decoded: &T::Args| self.inner.concurrency(decoded))
            .unwrap_or(Concurrency::Exclusive)
    }

    fn check_arguments(&self, args: &CallArgs) -> Result<(), Vec<String>> {
        // The schema passed; this catches what a schema cannot say (and derive mismatches),
        // so that `execute` can never meet arguments it cannot decode.
        args.decoded(|decoded: &T::Args| self.inner.check(decoded))
            .map_err(|error| vec![format!("/: {error}")])?
    }

    fn must_ask(&self, args: &CallArgs) -> Option<String> {
        // Arguments reach this stage only after `check_arguments` decoded them.
        args.decoded(|decoded: &T::Args| self.inner.must_ask(decoded))
            .ok()
            .flatten()
    }

    fn preview<'a>(&'a self, args: &'a CallArgs) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            // The preview owns its arguments and the body still needs them: decoded afresh
            // (only calls that ask are previewed).
            let decoded = T::Args::deserialize(args.value()).ok()?;
            self.inner.preview(decoded).await
        })
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            // Arguments reach the body only after the pipeline checked them against the
            // schema, so this is the body's type disagreeing with its own schema.
            let decoded = args.take_decoded::<T::Args>().map_err(|error| {
                ToolFailure::new(format!("arguments could not be decoded: {error}"))
            })?;
            self.inner.run(ctx, decoded).await
        })
    }
}

/// A shared tool is a tool, so callers can keep a handle to what they register.
impl<T: Tool + ?Sized> Tool for std::sync::Arc<T> {
    fn spec(&self) -> &ToolSpec {
        (**self).spec()
    }

    fn concurrency(&self, args: &CallArgs) -> Concurrency {
        (**self).concurrency(args)
    }

    fn check_arguments(&self, args: &CallArgs) -> Result<(), Vec<String>> {
        (**self).check_arguments(args)
    }

    fn must_ask(&self, args: &CallArgs) -> Option<String> {
        (**self).must_ask(args)
    }

    fn preview<'a>(&'a self, args: &'a CallArgs) -> BoxFuture<'a, Option<String>> {
        (**self).preview(args)
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        (**self).execute(ctx, args)
    }

    fn finalize_content(&self, content: &mut Vec<ContentBlock>, outcome: &FinalizeView<'_>) {
        (**self).finalize_content(content, outcome);
    }
}
