//! `run_code {code, description}`: runs a program whose tool calls re-enter the pipeline.
//! Only what it prints and returns goes back to the model; every binding call is a call of
//! its own in the log. A failed program is `CODE_RUN_FAILED (<kind>)` with its output and
//! the binding calls that had effects (nothing is rolled back, and nothing pretends to be).

use std::sync::{Arc, OnceLock};
use toolrail_tools_core::log::details;

use schemars::JsonSchema;
use serde::Deserialize;
use toolrail_agent_loop::ToolPresentation;
use toolrail_session_log::EventSink;
use toolrail_tools_core::{
    Pipeline, Registry, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool, context::ProgressSink, pipeline::BatchControl,
};

use crate::bindings::Bindings;
use crate::language::Language;
use crate::mode::PresentationMode;
use crate::python::{PythonRun, PythonRuntime};
use crate::run::Limits;
use crate::sdk::{self, RUN_CODE};

/// Arguments of `run_code`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// The program. JavaScript: the body of an async function; call tools with `await`,
    /// `console.log` what the user should see, and `return` the value to send back.
    /// Python: a module with top-level `await`; `print` what the user should see; the value
    /// of a last expression is sent back.
    pub code: String,
    /// What the program does, in a few words.
    pub description: String,
    /// The program's language (default `javascript`).
    #[serde(default)]
    pub language: Language,
}

/// What `run_code` needs once the session is built: the pipeline its bindings re-enter,
/// the registry whose tools they call, and the log their dispatches go to.
struct Attached {
    pipeline: Arc<Pipeline>,
    registry: Registry,
    log: Arc<dyn EventSink>,
}

/// Code mode for one session. Register [`CodeMode::tool`] (as the reserved `run_code`),
/// build the pipeline, then [`CodeMode::attach`] it.
#[derive(Clone)]
pub struct CodeMode {
    attached: Arc<OnceLock<Attached>>,
    limits: Limits,
    python: Option<PythonRuntime>,
}

impl CodeMode {
    /// Code mode with JavaScript only.
    pub fn new(limits: Limits) -> Self {
        Self {
            attached: Arc::new(OnceLock::new()),
            limits,
            python: None,
        }
    }

    /// Python programs too, run as `runtime` says.
    pub fn with_python(mut self, runtime: PythonRuntime) -> Self {
        self.python = Some(runtime);
        self
    }

    /// `mode` as the agent loop's presentation of each request's tools, with an SDK in the
    /// system prompt for each language this code mode runs.
    pub fn presentation(&self, mode: PresentationMode) -> ToolPresentation {
        mode.presentation_for(self.languages())
    }

    /// The languages programs may be written in: JavaScript when this build has it (the
    /// `javascript` feature), Python when a runtime was given.
    pub fn languages(&self) -> Vec<Language> {
        let mut languages = Vec::new();
        if JAVASCRIPT_BUILT {
            languages.push(Language::Javascript);
        }
        if self.python.is_some() {
            languages.push(Language::Python);
        }
        languages
    }

    /// The `run_code` tool.
    pub fn tool(&self) -> RunCodeTool {
        RunCodeTool { mode: self.clone() }
    }

    /// Connects the session's pipeline, registry and log; only the first call counts.
    pub fn attach(&self, pipeline: Arc<Pipeline>, registry: Registry, log: Arc<dyn EventSink>) {
        let _ = self.attached.set(Attached {
            pipeline,
            registry,
            log,
        });
    }
}

const PYTHON_UNAVAILABLE: &str =
    "Python is not available in this session; write the program in JavaScript";

/// Whether this build embeds the JavaScript engine.
const JAVASCRIPT_BUILT: bool = cfg!(feature = "javascript");

const JAVASCRIPT_UNAVAILABLE: &str = "JavaScript is not available in this build of toolrail (its `javascript` feature is off); write the program in Python with `\"language\": \"python\"`";

/// The `run_code` tool of one [`CodeMode`], made by [`CodeMode::tool`]; its calls fail
/// until the code mode is attached.
pub struct RunCodeTool {
    mode: CodeMode,
}

impl TypedTool for RunCodeTool {
    type Args = RunCodeArgs;

    fn spec(&self) -> ToolSpec {
        let description = if !JAVASCRIPT_BUILT {
            "Run a Python program (`\"language\": \"python\"`) that calls the tools of the SDK and combines their results. Only what it prints and returns comes back. A tool call that is refused or fails raises ToolError with `code` and `message`, which the program may catch."
        } else if self.mode.python.is_some() {
            "Run a JavaScript or Python program that calls the tools of the SDK and combines their results. Only what it prints and returns comes back. A tool call that is refused or fails throws an Error (Python: raises ToolError) with `code` and `message`, which the program may catch."
        } else {
            "Run a JavaScript program that calls the tools of the SDK and combines their results. Only what it prints and returns comes back. A tool call that is refused or fails throws an Error with `code` and `message`, which the program may catch. Only `javascript` is available here."
        };
        ToolSpec::for_args::<RunCodeArgs>(RUN_CODE, description)
            .kind(ToolKind::Execute)
            // A program cannot start another program.
            .model_only()
            .concurrency_note("exclusive: its tool calls follow the scheduler's rules inside")
            .build()
    }

    fn check(&self, args: &RunCodeArgs) -> Result<(), Vec<String>> {
        if args.language == Language::Python && self.mode.python.is_none() {
            return Err(vec![format!("/language: {PYTHON_UNAVAILABLE}")]);
        }
        if args.language == Language::Javascript && !JAVASCRIPT_BUILT {
            return Err(vec![format!("/language: {JAVASCRIPT_UNAVAILABLE}")]);
        }
        Ok(())
    }

    async fn run(&self, ctx: &ToolContext, args: RunCodeArgs) -> ToolResult {
        let attached = self.mode.attached.get().ok_or_else(|| {
            ToolFailure::new("code mode is not attached to a pipeline; the program did not run")
        })?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ToolFailure::new("run_code needs a tokio runtime to run its tool calls")
        })?;
        let tools = attached.registry.snapshot().for_code_mode(RUN_CODE);
        let cancel = ctx.cancellation().child_token();
        let bindings = Arc::new(Bindings::new(
            Arc::clone(&attached.pipeline),
            tools.clone(),
            Arc::clone(&attached.log),
            ctx.identity().clone(),
            BatchControl {
                cancel: cancel.clone(),
                progress: ProgressSink::default(),
            },
            &self.mode.limits,
            runtime,
        ));
        let outcome = match (args.language, &self.mode.python) {
            #[cfg(feature = "javascript")]
            (Language::Javascript, _) => {
                crate::js::run(
                    args.code.clone(),
                    sdk::javascript(&tools),
                    Arc::clone(&bindings),
                    self.mode.limits.clone(),
                    cancel.clone(),
                )
                .await
            }
            // Refused by `check` before the call started.
            #[cfg(not(feature = "javascript"))]
            (Language::Javascript, _) => {
                return Err(ToolFailure::new(JAVASCRIPT_UNAVAILABLE));
            }
            (Language::Python, Some(runtime)) => {
                let run_id = ctx.identity().call_id.as_str().replace(['/', ':'], "_");
                PythonRun {
                    program: &args.code,
                    sdk: sdk::python_runtime(&tools),
                    bindings: &bindings,
                    limits: &self.mode.limits,
                    cancel: &cancel,
                    runtime,
                }
                .run(&run_id)
                .await
            }
            // Refused by `check` before the call started.
            (Language::Python, None) => {
                return Err(ToolFailure::new(PYTHON_UNAVAILABLE));
            }
        };
        // Calls the program left running are stopped if it failed; either way each
        // commits its real outcome before this call returns.
        bindings.settle_all(outcome.failure.is_some()).await;
        let calls = bindings.calls();
        let sub_calls: Vec<details::SubCall> = calls
            .iter()
            .map(|call| details::SubCall {
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                error: call.error.clone(),
            })
            .collect();
        if let Some((kind, message)) = outcome.failure {
            let with_effects: Vec<String> = calls
                .iter()
                .filter(|call| call.had_effects)
                .map(|call| format!("{} ({})", call.call_id, call.tool))
                .collect();
            let mut text = format!("CODE_RUN_FAILED ({}): {message}", kind.as_str());
            if !outcome.output.is_empty() {
                text.push_str(&format!("\n[output]\n{}", outcome.output.trim_end()));
            }
            text.push_str(&match with_effects.as_slice() {
                [] => "\n[no binding call had effects]".to_owned(),
                some => format!(
                    "\n[binding calls that had effects, not rolled back: {}]",
                    some.join(", ")
                ),
            });
            return Err(ToolFailure::with_code(
                toolrail_tools_core::tool_code!("CODE_RUN_FAILED"),
                text,
            ));
        }
        let value = outcome.value.unwrap_or(serde_json::Value::Null);
        let mut text = outcome.output.clone();
        if !value.is_null() {
            text.push_str(&format!("[returned] {value}"));
        }
        if text.is_empty() {
            text.push_str("(the program printed and returned nothing)");
        }
        let details = details::CodeRun {
            language: args.language.as_str().to_owned(),
            program: args.code.clone(),
            sub_calls,
            logs: (!outcome.output.is_empty()).then_some(outcome.output),
            result: value.clone(),
        };
        Ok(ToolOutput {
            value: Some(value),
            ..ToolOutput::text(text.trim_end().to_owned())
        }
        .with_details(details))
    }
}
