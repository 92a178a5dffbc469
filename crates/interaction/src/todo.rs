//! The todo board and `todo_write`: the model replaces the whole list each time; the list is
//! logged (`todo/write`) and rebuilt from the log on resume.

use std::collections::HashSet;
use std::sync::Arc;
use toolrail_tools_core::log::details;

use parking_lot::RwLock;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::log::{
    AppendUrgency, Event, EventData, ToolEvent,
    event::{TodoItem, TodoStatus, TodoWrite as TodoWriteEvent},
};
use toolrail_tools_core::{
    ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec, TypedTool,
    arguments::violations,
};

/// The current list. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct TodoBoard {
    items: Arc<RwLock<Vec<TodoItem>>>,
}

impl TodoBoard {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The list the log ends with: the last `todo/write`.
    pub fn from_events(events: &[Event]) -> Self {
        let board = Self::new();
        if let Some(items) = events.iter().rev().find_map(|event| {
            if let EventData::TodoWrite(write) = &event.data {
                Some(write.items.clone())
            } else {
                None
            }
        }) {
            *board.items.write() = items;
        }
        board
    }

    /// The list as it stands, in order.
    pub fn items(&self) -> Vec<TodoItem> {
        self.items.read().clone()
    }
}

/// The arguments of `todo_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteArgs {
    /// The whole new list, in order; it replaces the old one.
    pub todos: Vec<TodoArg>,
}

/// One item of the todo list.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoArg {
    /// What is to be done, in a few words.
    pub content: String,
    /// Where the item stands; at most one item may be in_progress.
    pub status: StatusArg,
}

/// Where an item stands.
// Variant docs would turn the schema the model reads from a plain `enum` of the three
// strings into a `oneOf` list; the names say what they are.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusArg {
    Pending,
    InProgress,
    Completed,
}

impl From<StatusArg> for TodoStatus {
    fn from(status: StatusArg) -> Self {
        match status {
            StatusArg::Pending => Self::Pending,
            StatusArg::InProgress => Self::InProgress,
            StatusArg::Completed => Self::Completed,
        }
    }
}

/// `todo_write {todos: [{content, status}]}`.
pub struct TodoWriteTool {
    board: TodoBoard,
}

impl TodoWriteTool {
    /// The name the model calls it by.
    pub const NAME: &'static str = "todo_write";

    /// The tool, writing to `board` (share it with whatever shows the list).
    pub fn new(board: TodoBoard) -> Self {
        Self { board }
    }
}

impl TypedTool for TodoWriteTool {
    type Args = TodoWriteArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<TodoWriteArgs>(
            Self::NAME,
            "Replace the todo list with the given items (the whole list, in order). Each item has content and a status: pending, in_progress or completed. Keep at most one item in_progress; items must be non-empty and distinct. Use it to plan multi-step work and show progress.",
        )
        .kind(ToolKind::Think)
        // It changes nothing in the workspace, so plan mode lets it through.
        .read_only()
        .build()
    }

    fn check(&self, args: &TodoWriteArgs) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let mut seen = HashSet::new();
        let mut in_progress = Vec::new();
        for (at, todo) in args.todos.iter().enumerate() {
            let content = todo.content.trim();
            if content.is_empty() {
                problems.push(format!("/todos/{at}/content: must not be empty"));
            } else if !seen.insert(content) {
                problems.push(format!(
                    "/todos/{at}/content: `{content}` is listed twice; items must be distinct"
                ));
            }
            if matches!(todo.status, StatusArg::InProgress) {
                in_progress.push(at);
            }
        }
        if in_progress.len() > 1 {
            problems.push(format!(
                "/todos: {} items are in_progress (at {:?}); keep at most one",
                in_progress.len(),
                in_progress
            ));
        }
        violations(problems)
    }

    async fn run(&self, ctx: &ToolContext, args: TodoWriteArgs) -> ToolResult {
        let items: Vec<TodoItem> = args
            .todos
            .into_iter()
            .map(|todo| TodoItem {
                content: todo.content.trim().to_owned(),
                status: todo.status.into(),
            })
            .collect();
        ctx.record(
            ToolEvent::TodoWrite(TodoWriteEvent {
                items: items.clone(),
            }),
            AppendUrgency::Buffered,
        )
        .await
        .map_err(|error| ToolFailure::new(format!("could not log the todo list: {error}")))?;
        let count = |status: TodoStatus| items.iter().filter(|item| item.status == status).count();
        let (completed, in_progress, pending) = (
            count(TodoStatus::Completed),
            count(TodoStatus::InProgress),
            count(TodoStatus::Pending),
        );
        let summary = format!(
            "Todo list updated: {} ({completed} completed, {in_progress} in progress, {pending} pending).",
            match items.len() {
                1 => "1 item".to_owned(),
                count => format!("{count} items"),
            }
        );
        *self.board.items.write() = items.clone();
        Ok(ToolOutput {
            value: Some(json!({
                "completed": completed, "in_progress": in_progress, "pending": pending,
            })),
            ..ToolOutput::text(summary)
        }
        .with_details(details::Todo { items }))
    }
}
