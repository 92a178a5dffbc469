//! The shortest real agent: a tool of its own beside the shipped `read`, `grep`, `edit` and
//! `bash`, a deny rule, sessions kept as JSONL files, an OpenAI-compatible model whose words
//! are printed as they arrive, and a session resumed after a crash.
//!
//! ```sh
//! TOOLRAIL_BASE_URL=http://127.0.0.1:8000/v1 TOOLRAIL_MODEL=qwen3 \
//!     cargo run -p toolrail-examples --example agent -- WORKSPACE "What does this project do?"
//! # killed mid-turn? continue where it stopped:
//! TOOLRAIL_RESUME=<the session id it printed> cargo run -p toolrail-examples --example agent -- WORKSPACE "Go on."
//! ```

use std::io::Write as _;

use toolrail::prelude::*;

/// Counts the words of a text: read-only (it needs no approval) and parallel-safe (it may
/// run beside any other call).
struct WordCount;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WordCountArgs {
    /// The text whose words to count.
    text: String,
}

impl TypedTool for WordCount {
    type Args = WordCountArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<WordCountArgs>("word_count", "Count the words of a text.")
            .read_only()
            .parallel_safe()
            .build()
    }

    async fn run(&self, _ctx: &ToolContext, args: WordCountArgs) -> ToolResult {
        Ok(ToolOutput::text(
            args.text.split_whitespace().count().to_string(),
        ))
    }
}

#[tokio::main]
#[allow(clippy::wildcard_enum_match_arm)] // a program shows the events it cares about
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let workspace = args.next().unwrap_or_else(|| ".".to_owned());
    let prompt = args
        .next()
        .unwrap_or_else(|| "What does this project do?".to_owned());
    let base_url = std::env::var("TOOLRAIL_BASE_URL")?;
    let model = std::env::var("TOOLRAIL_MODEL").unwrap_or_else(|_| "qwen3".to_owned());
    let store = Store::jsonl(format!("{workspace}/.toolrail/sessions"))?;
    let builder = Agent::builder()
        .workspace([&workspace])
        .tools(["read", "grep", "edit", "bash"])
        .tool(Typed::new(WordCount))
        .preset(PresetName::Workspace)
        .deny("bash(curl *)")
        .model(ModelConfig::new(ProviderName::Openai, model).at(base_url))
        .store(store.clone());
    let agent = match std::env::var("TOOLRAIL_RESUME") {
        Ok(id) => {
            let resumed = builder.resume(&store, &id.as_str().into()).await?;
            println!("recovered: {}", resumed.recovery);
            resumed.agent
        }
        Err(_) => builder.build().await?,
    };
    println!("session {}", agent.session_id());
    let mut events = agent.stream(prompt);
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::TextDelta(text) => print!("{text}"),
            AgentEvent::CallCommitted { name, record, .. } => {
                println!("\n[{name}: {}]", record.text().lines().next().unwrap_or(""));
            }
            AgentEvent::TurnEnded(answer) => println!("\n(turn {:?})", answer.end),
            _ => continue,
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}
