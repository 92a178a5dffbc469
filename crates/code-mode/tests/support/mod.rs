//! What the run_code tests share: a session with the probe tool and `run_code`, its
//! pipeline and in-memory log, and ways to run a program and read the log back.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;

use serde_json::json;
use toolrail_code_mode::{CodeMode, RUN_CODE};
use toolrail_session_log::MemorySink;
use toolrail_tool_probe::Probe;
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, PreExecuteHook, Registry, RegistryBuilder, Typed,
    pipeline::BatchControl,
};

pub(crate) struct Harness {
    pub log: Arc<MemorySink>,
    pub registry: Registry,
    pub pipeline: Arc<Pipeline>,
    /// What `run` asks for in `language`.
    language: &'static str,
}

/// A session whose `run_code` is `mode`'s, with `hook` (if any) before every call.
pub(crate) fn session(
    mode: &CodeMode,
    hook: Option<Arc<dyn PreExecuteHook>>,
    language: &'static str,
) -> Harness {
    let (registry, _) = RegistryBuilder::new()
        .builtin(Probe::new(None))
        .reserve(RUN_CODE)
        .runtime_tool(Arc::new(Typed::new(mode.tool())))
        .build()
        .unwrap();
    let log = Arc::new(MemorySink::new());
    let mut builder = Pipeline::builder(log.clone());
    if let Some(hook) = hook {
        builder = builder.pre_hook(hook);
    }
    let pipeline = Arc::new(builder.build());
    mode.attach(Arc::clone(&pipeline), registry.clone(), log.clone());
    Harness {
        log,
        registry,
        pipeline,
        language,
    }
}

impl Harness {
    pub(crate) async fn run(&self, code: &str) -> CommittedResult {
        self.run_with(code, &BatchControl::default()).await
    }

    /// Runs `code` as call `c1` of a code-mode tool set.
    pub(crate) async fn run_with(&self, code: &str, control: &BatchControl) -> CommittedResult {
        let args =
            json!({"code": code, "description": "test", "language": self.language}).to_string();
        self.pipeline
            .execute_one(
                &self.registry.snapshot().for_code_mode("run_code"),
                CallRequest::new("c1", 0, "run_code", args),
                control,
            )
            .await
            .unwrap()
    }

    /// Runs `program` and checks it failed as `CODE_RUN_FAILED` with `expected` in its text.
    pub(crate) async fn run_fails_with(&self, program: &str, expected: &str) {
        let result = self.run(program).await;
        assert_eq!(
            code(&result).as_deref(),
            Some("CODE_RUN_FAILED"),
            "{program}"
        );
        assert!(
            result.record().text().contains(expected),
            "{program}: {}",
            result.record().text()
        );
    }

    /// `(kind, call_id)` of every event, in order.
    pub(crate) fn trail(&self) -> Vec<(String, String)> {
        toolrail_tool_probe::trail(&self.log.events())
    }

    /// How many results call `call_id` committed.
    pub(crate) fn results_of(&self, call_id: &str) -> usize {
        self.trail()
            .iter()
            .filter(|(kind, id)| kind == "tool/result" && id == call_id)
            .count()
    }
}

/// The result's error code, if it failed.
pub(crate) fn code(result: &CommittedResult) -> Option<String> {
    result.record().error_code().map(ToString::to_string)
}
