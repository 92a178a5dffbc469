//! The `probe` tool: one tool whose behaviour each call chooses through its arguments, so a
//! conformance test can build any batch (slow, failing, panicking, exclusive, claiming,
//! reporting progress or effects, ignoring cancellation) and prove what ran (marker files).

use std::path::PathBuf;
use std::time::Duration;
use toolrail_tools_core::CallArgs;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use toolrail_session_log::{BoxFuture, Effect};
use toolrail_tools_core::{
    ClaimMode, Concurrency, ResourceClaim, ResourceKey, Tool, ToolContext, ToolFailure, ToolOutput,
    ToolResult, ToolSpec,
};

/// One resource a probe call claims.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeClaim {
    /// The resource's name (a custom key).
    pub key: String,
    /// `read` or `write`.
    pub mode: String,
}

/// What one probe call does.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeArgs {
    /// Sleep this long (watching cancellation unless `ignore_cancel`).
    pub sleep_ms: Option<u64>,
    /// Fail with this message.
    pub fail: Option<String>,
    /// Panic.
    pub panic: Option<bool>,
    /// `parallel` (default) or `exclusive`.
    pub concurrency: Option<String>,
    /// Resources the call claims, in `parallel` mode.
    pub claims: Option<Vec<ProbeClaim>>,
    /// Write `<marker_dir>/<call_id>` when the body starts.
    pub marker: Option<bool>,
    /// Report this many progress updates.
    pub progress: Option<u32>,
    /// Keep sleeping after cancellation.
    pub ignore_cancel: Option<bool>,
    /// Return this many bytes of text.
    pub output_bytes: Option<usize>,
    /// Return this value.
    pub value: Option<Value>,
    /// Report these effects (as `other` effects named by the strings).
    pub effects: Option<Vec<String>>,
}

/// The probe tool (`probe`), or its idempotent variant (`probe_idem`).
pub struct Probe {
    spec: ToolSpec,
    marker_dir: Option<PathBuf>,
}

impl Probe {
    /// `probe`, writing markers into `marker_dir` when asked.
    pub fn new(marker_dir: Option<PathBuf>) -> Self {
        Self {
            spec: ToolSpec::for_args::<ProbeArgs>("probe", "A conformance probe.")
                .concurrency_note("as its arguments say")
                .build(),
            marker_dir,
        }
    }

    /// `probe_idem`: the same, declared idempotent.
    pub fn idempotent(marker_dir: Option<PathBuf>) -> Self {
        Self {
            spec: ToolSpec::for_args::<ProbeArgs>("probe_idem", "An idempotent conformance probe.")
                .idempotent()
                .concurrency_note("as its arguments say")
                .build(),
            marker_dir,
        }
    }

    fn args(args: &Value) -> ProbeArgs {
        ProbeArgs::deserialize(args).unwrap_or_default()
    }
}

impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn concurrency(&self, args: &CallArgs) -> Concurrency {
        let args = Self::args(args);
        if args.concurrency.as_deref() == Some("exclusive") {
            return Concurrency::Exclusive;
        }
        let claims = args
            .claims
            .unwrap_or_default()
            .into_iter()
            .map(|claim| ResourceClaim {
                key: ResourceKey::Custom(claim.key),
                mode: if claim.mode == "write" {
                    ClaimMode::Write
                } else {
                    ClaimMode::Read
                },
            })
            .collect();
        Concurrency::Shared(claims)
    }

    fn check_arguments(&self, args: &CallArgs) -> Result<(), Vec<String>> {
        args.decoded(|_: &ProbeArgs| ())
            .map(drop)
            .map_err(|error| vec![format!("/: {error}")])
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let args = Self::args(args);
            if let (Some(true), Some(dir)) = (args.marker, &self.marker_dir) {
                let path = dir.join(ctx.identity().call_id.as_str());
                std::fs::write(&path, b"started").map_err(|error| {
                    ToolFailure::new(format!("marker {}: {error}", path.display()))
                })?;
            }
            for step in 0..args.progress.unwrap_or(0) {
                ctx.progress(serde_json::json!({ "step": step }));
            }
            for name in args.effects.unwrap_or_default() {
                ctx.report_effect(Effect::Other {
                    name,
                    data: Value::Null,
                });
            }
            if let Some(ms) = args.sleep_ms {
                let sleep = tokio::time::sleep(Duration::from_millis(ms));
                if args.ignore_cancel == Some(true) {
                    sleep.await;
                } else {
                    tokio::select! {
                        () = sleep => {}
                        () = ctx.cancellation().cancelled() => return Err(ToolFailure::new("cancelled while sleeping")),
                    }
                }
            }
            if args.panic == Some(true) {
                // Deliberate: the probe tests that a panicking body becomes TOOL_FAILED.
                #[allow(clippy::panic)]
                {
                    panic!("probe panicked as asked");
                }
            }
            if let Some(message) = args.fail {
                return Err(ToolFailure::new(message));
            }
            let mut output = match args.value {
                Some(value) => ToolOutput::value(value),
                None => ToolOutput::text("probe ok"),
            };
            if let Some(bytes) = args.output_bytes {
                output = ToolOutput {
                    content: vec![toolrail_session_log::ContentBlock::text("x".repeat(bytes))],
                    ..output
                };
            }
            Ok(output)
        })
    }
}
