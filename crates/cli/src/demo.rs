//! The embedded demo: six calls that show the pipeline's powers on real tools — a note
//! writer confined to a temporary folder, and a sleeper that ignores cancellation.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use toolrail_session_log::{BoxFuture, ContentBlock, Effect, EventData, MemorySink};
use toolrail_tools_core::{
    BatchControl, CallRequest, CallView, Concurrency, Guard, GuardVerdict, HookError, Pipeline,
    PipelineConfig, PreExecuteDecision, PreExecuteHook, PreNext, RegistryBuilder, ResourceClaim,
    ResourceKey, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec, Typed,
    TypedTool,
};

/// Arguments of `write_note`.
#[derive(Deserialize, JsonSchema)]
struct NoteArgs {
    /// File name inside the notes folder.
    name: String,
    /// The note's text.
    text: String,
}

/// Writes a note into a folder and reports the write as an effect.
struct WriteNote {
    folder: PathBuf,
}

impl TypedTool for WriteNote {
    type Args = NoteArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<NoteArgs>("write_note", "Writes a short note to the notes folder.")
            .kind(ToolKind::Edit)
    }

    fn concurrency(&self, args: &NoteArgs) -> Concurrency {
        Concurrency::Shared(vec![ResourceClaim::write(ResourceKey::Path(
            self.folder.join(&args.name),
        ))])
    }

    async fn run(&self, ctx: &ToolContext, args: NoteArgs) -> ToolResult {
        let path = self.folder.join(&args.name);
        std::fs::write(&path, &args.text).map_err(|error| {
            ToolFailure::new(format!("could not write {}: {error}", path.display()))
        })?;
        ctx.report_effect(Effect::FileWritten {
            path: path.display().to_string(),
            before: None,
            after: format!("len:{}", args.text.len()),
        });
        Ok(ToolOutput::text(format!(
            "wrote {} bytes to {}",
            args.text.len(),
            args.name
        )))
    }
}

/// Arguments of `nap`.
#[derive(Deserialize, JsonSchema)]
struct NapArgs {
    /// How long to sleep, in milliseconds.
    ms: u64,
}

/// Sleeps without watching cancellation: the pipeline must end it anyway.
struct Nap;

impl TypedTool for Nap {
    type Args = NapArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<NapArgs>("nap", "Sleeps, ignoring cancellation.")
            .read_only()
            .timeout(Duration::from_millis(200))
    }

    async fn run(&self, _ctx: &ToolContext, args: NapArgs) -> ToolResult {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok(ToolOutput::text("rested"))
    }
}

/// Denies notes whose name tries to leave the folder; asks before overwriting `todo.txt`.
struct NotePolicy;

impl PreExecuteHook for NotePolicy {
    fn name(&self) -> &str {
        "note-policy"
    }

    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            let name = call
                .arguments
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if name == "todo.txt" {
                return Ok(PreExecuteDecision::Ask {
                    reason: "overwrites the todo list".into(),
                    session_key: None,
                });
            }
            next.run().await
        })
    }
}

/// Refuses any path component that climbs out of the folder.
struct NoClimbing;

impl Guard for NoClimbing {
    fn name(&self) -> &str {
        "no-climbing"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        match call.arguments.get("name").and_then(Value::as_str) {
            Some(name) if name.contains("..") || name.contains('/') => GuardVerdict::Deny {
                reason: format!("`{name}` leaves the notes folder"),
            },
            _ => GuardVerdict::Abstain,
        }
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let jsonl = match args {
        [] => false,
        [flag] if flag == "--jsonl" => true,
        other => {
            bail!("unexpected arguments {other:?}; try `toolrail demo` or `toolrail demo --jsonl`")
        }
    };
    let folder = std::env::temp_dir().join(format!("toolrail-demo-{}", std::process::id()));
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(run_calls(folder.clone(), jsonl));
    let cleanup = std::fs::remove_dir_all(&folder);
    outcome?;
    cleanup.with_context(|| format!("removing {}", folder.display()))
}

async fn run_calls(folder: PathBuf, jsonl: bool) -> Result<()> {
    let (registry, _warnings) = RegistryBuilder::new()
        .builtin(Typed::new(WriteNote {
            folder: folder.clone(),
        }))
        .builtin(Typed::new(Nap))
        .build()?;
    let log = Arc::new(MemorySink::new());
    // No approval service is configured: an `Ask` must end in APPROVAL_UNAVAILABLE.
    let pipeline = Pipeline::builder(log.clone())
        .pre_hook(Arc::new(NotePolicy))
        .guard(Arc::new(NoClimbing))
        .config(PipelineConfig {
            cancel_grace: Duration::from_millis(100),
            ..PipelineConfig::default()
        })
        .build();
    let tools = registry.snapshot();
    let calls = [
        (
            "write_note",
            r#"{"name":"hello.txt","text":"a tool call is not a function call"}"#,
        ),
        ("write_note", r#"{"name":"hello.txt","text":"#),
        ("write_note", r#"{"name":"../escape.txt","text":"x"}"#),
        ("write_note", r#"{"name":"todo.txt","text":"x"}"#),
        ("nap", r#"{"ms":60000}"#),
        ("deploy", "{}"),
    ];
    let control = BatchControl::default();
    for (index, (name, raw)) in calls.into_iter().enumerate() {
        let request = CallRequest::new(format!("c{}", index + 1), u32::try_from(index)?, name, raw);
        let committed = pipeline.execute_one(&tools, request, &control).await?;
        if !jsonl {
            let record = &committed.record;
            let status = record
                .error
                .as_ref()
                .map_or_else(|| "ok".to_owned(), |error| error.code.to_string());
            let text: Vec<&str> = record
                .content
                .iter()
                .filter_map(ContentBlock::as_text)
                .collect();
            println!(
                "{:<3} {name:<10} {status:<22} {}",
                committed.identity.call_id,
                text.join(" ")
            );
            for effect in &record.effects {
                println!("    effect: {}", serde_json::to_string(effect)?);
            }
        }
    }
    if jsonl {
        for event in log.events() {
            println!("{}", serde_json::to_string(&event)?);
        }
    } else {
        let starts = log
            .events()
            .iter()
            .filter(|event| matches!(event.data, EventData::ToolStart(_)))
            .count();
        println!(
            "\n{} events in the session log; {starts} calls reached their body. `toolrail demo --jsonl` prints the log.",
            log.len()
        );
    }
    Ok(())
}
