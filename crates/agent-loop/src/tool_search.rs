//! `tool_search`: finds deferred tools by name and description and makes the matches
//! callable from the next model request (DESIGN §7). Loading is a logged fact
//! (`tools/loaded`), so a resumed session sees the same tools.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_session_log::{AppendUrgency, ToolEvent, event::ToolsLoaded};
use toolrail_tools_core::{
    Concurrency, Registry, ResourceClaim, ResourceKey, ToolContext, ToolFailure, ToolKind,
    ToolOutput, ToolResult, ToolSpec, TypedTool,
};

/// Arguments of `tool_search`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSearchArgs {
    /// Words describing the tool you need.
    pub query: String,
    /// How many tools to load at most (default 5).
    pub limit: Option<u32>,
}

/// The `tool_search` tool over a registry's deferred tools.
pub struct ToolSearch {
    registry: Registry,
}

impl ToolSearch {
    /// Searches `registry`'s deferred tools and loads the matches into it: a clone of the
    /// registry the loop asks from (clones share their tools).
    pub fn new(registry: Registry) -> Self {
        Self { registry }
    }
}

/// Ranks by how many query words the name (3 points) and the description (1 point) contain;
/// an exact name scores 10 more. Ties go by name, so the same query loads the same tools.
fn rank<'a>(
    query: &str,
    candidates: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<(u32, &'a str)> {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let mut scored: Vec<(u32, &str)> = candidates
        .filter_map(|(name, description)| {
            let (name_lower, description_lower) = (name.to_lowercase(), description.to_lowercase());
            let mut score: u32 = words
                .iter()
                .map(|word| {
                    3 * u32::from(name_lower.contains(word.as_str()))
                        + u32::from(description_lower.contains(word.as_str()))
                })
                .sum();
            if words.contains(&name_lower) {
                score += 10;
            }
            (score > 0).then_some((score, name))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    scored
}

/// The name of the tool that finds deferred tools; a runtime reserves it.
pub const TOOL_SEARCH: &str = "tool_search";

impl TypedTool for ToolSearch {
    type Args = ToolSearchArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<ToolSearchArgs>(
            TOOL_SEARCH,
            "Finds more tools by what they do. The tools found can be called from your next message on.",
        )
        .kind(ToolKind::Search).build()
    }

    fn concurrency(&self, _args: &ToolSearchArgs) -> Concurrency {
        // Loading changes what later requests see: one search at a time.
        Concurrency::Shared(vec![ResourceClaim::write(ResourceKey::Custom(
            "toolrail:tool-set".to_owned(),
        ))])
    }

    async fn run(&self, ctx: &ToolContext, args: ToolSearchArgs) -> ToolResult {
        let catalog = self.registry.deferred_catalog();
        let ranked = rank(
            &args.query,
            catalog
                .iter()
                .map(|entry| (entry.name(), entry.spec().description())),
        );
        let limit = usize::try_from(args.limit.unwrap_or(5)).unwrap_or(usize::MAX);
        let names: Vec<&str> = ranked.iter().take(limit).map(|(_, name)| *name).collect();
        if names.is_empty() {
            return Ok(ToolOutput::text(format!(
                "No tool matches `{}`.",
                args.query
            )));
        }
        let loaded = self.registry.load_deferred(&names);
        if !loaded.is_empty() {
            ctx.record(
                ToolEvent::ToolsLoaded(ToolsLoaded {
                    names: loaded.clone(),
                }),
                AppendUrgency::Durable,
            )
            .await
            .map_err(|error| {
                ToolFailure::new(format!("the loaded tools could not be recorded: {error}"))
            })?;
        }
        let found: Vec<serde_json::Value> = catalog
            .iter()
            .filter(|entry| names.contains(&entry.name()))
            .map(|entry| json!({"name": entry.name(), "description": entry.spec().description()}))
            .collect();
        let lines: Vec<String> = found
            .iter()
            .map(|tool| {
                format!(
                    "- {}: {}",
                    tool["name"].as_str().unwrap_or_default(),
                    tool["description"].as_str().unwrap_or_default()
                )
            })
            .collect();
        Ok(ToolOutput {
            content: vec![toolrail_session_log::ContentBlock::text(format!(
                "Loaded {} tool(s); call them from your next message on:\n{}",
                found.len(),
                lines.join("\n")
            ))],
            value: Some(json!({ "loaded": found })),
            details: None,
            concludes_turn: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_prefers_names_then_descriptions_then_alphabetical_order() {
        let tools = [
            ("deploy", "ships the service"),
            ("rollback", "undoes a deploy"),
            ("lint", "checks style"),
        ];
        let ranked = rank("deploy", tools.iter().copied());
        assert_eq!(ranked, [(13, "deploy"), (1, "rollback")]);
        assert!(rank("nothing here", tools.iter().copied()).is_empty());
        let tie = rank("x", [("bx", ""), ("ax", "")].iter().copied());
        assert_eq!(tie, [(3, "ax"), (3, "bx")]);
    }
}
