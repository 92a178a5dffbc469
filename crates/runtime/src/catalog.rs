//! The tool catalog: the one place that maps a shipped tool's name to how it is made.
//! Configurations, the CLI, scenarios and the docs take tool names from here.
//!
//! ```
//! use toolrail_runtime::catalog;
//! assert!(catalog::names().any(|name| name == "bash"));
//! assert!(catalog::entry("web_fetch").is_none());
//! ```

use std::sync::Arc;

use toolrail_fs_tools::FileTools;
use toolrail_interaction::{AskUser, PlanMode, QuestionService, TodoBoard, TodoWriteTool};
use toolrail_shell_tool::{BashTool, ShellConfig, Shells};
use toolrail_tools_core::{Tool, Typed, TypedTool};

/// The session's shared pieces a shipped tool is made from.
pub struct CatalogContext {
    /// The file tools' shared state (roots, protected paths, observed versions).
    pub files: FileTools,
    /// What `bash` is made with: its sandbox, environment, deadline and output cap.
    pub shell: ShellConfig,
    /// The session's background shells, which `bash` starts and the shell tools read.
    pub shells: Shells,
    /// Whether `bash` may start background shells: only when `shell_output` is on to read
    /// them.
    pub background: bool,
    /// The session's todo list, which `todo_write` replaces.
    pub todo: TodoBoard,
    /// Who answers `ask_user`; the runtime gives one that answers nothing (every question
    /// expires) when the embedder gives none.
    pub questions: Arc<dyn QuestionService>,
    /// The session's plan mode, which `exit_plan_mode` asks to leave.
    pub plan: PlanMode,
}

impl std::fmt::Debug for CatalogContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogContext").finish_non_exhaustive()
    }
}

/// How a shipped tool is made: from the session's pieces and its own name.
type Make = fn(&CatalogContext, &'static str) -> Option<Arc<dyn Tool>>;

/// One shipped tool.
#[derive(Clone, Copy, Debug)]
pub struct CatalogEntry {
    /// The name configurations use, which is also the tool's name.
    pub name: &'static str,
    /// One line for listings and docs.
    pub summary: &'static str,
    /// On only when named: it needs a person to answer (`ask_user`) or a mode to mean
    /// anything (`exit_plan_mode`).
    pub on_request: bool,
    make: Make,
}

impl CatalogEntry {
    /// The tool, made from the session's pieces.
    pub fn make(&self, context: &CatalogContext) -> Option<Arc<dyn Tool>> {
        (self.make)(context, self.name)
    }

    const fn on(name: &'static str, summary: &'static str, make: Make) -> Self {
        Self {
            name,
            summary,
            on_request: false,
            make,
        }
    }

    const fn when_named(self) -> Self {
        Self {
            on_request: true,
            ..self
        }
    }
}

fn file_tool(context: &CatalogContext, name: &'static str) -> Option<Arc<dyn Tool>> {
    context
        .files
        .tools()
        .into_iter()
        .find(|tool| tool.spec().name() == name)
}

fn shell_tool(context: &CatalogContext, name: &'static str) -> Option<Arc<dyn Tool>> {
    context
        .shells
        .tools()
        .into_iter()
        .find(|tool| tool.spec().name() == name)
}

fn bash(context: &CatalogContext, _: &'static str) -> Option<Arc<dyn Tool>> {
    let config = context.shell.clone();
    typed(if context.background {
        BashTool::with_shells(config, context.shells.clone())
    } else {
        BashTool::new(config)
    })
}

fn typed<T: TypedTool>(tool: T) -> Option<Arc<dyn Tool>> {
    Some(Arc::new(Typed::new(tool)))
}

/// The name of the tool that leaves plan mode (it joins every session in plan mode).
pub const EXIT_PLAN_MODE: &str = "exit_plan_mode";

/// Every shipped tool, in the order listings show them.
pub const CATALOG: &[CatalogEntry] = &[
    CatalogEntry::on(
        "read",
        "read a file: a numbered window, read-before-edit observed",
        file_tool,
    ),
    CatalogEntry::on(
        "write",
        "write a whole file, only over the version the session read",
        file_tool,
    ),
    CatalogEntry::on(
        "edit",
        "replace exact strings in a file, all or nothing",
        file_tool,
    ),
    CatalogEntry::on(
        "glob",
        "list files by glob, .gitignore honoured, newest first",
        file_tool,
    ),
    CatalogEntry::on(
        "grep",
        "search file contents with ripgrep's engine",
        file_tool,
    ),
    CatalogEntry::on(
        "bash",
        "run a command in the sandbox: bash -c, capped output, enforced timeout; or in the background",
        bash,
    ),
    CatalogEntry::on(
        "shell_output",
        "read a background shell's new output: since a cursor, filtered, waiting for more",
        shell_tool,
    ),
    CatalogEntry::on(
        "shell_write",
        "write input or keys (ctrl-c, ctrl-d) to a background shell",
        shell_tool,
    ),
    CatalogEntry::on(
        "shell_kill",
        "end a background shell and everything it started",
        shell_tool,
    ),
    CatalogEntry::on(
        "shell_list",
        "list the session's background shells",
        shell_tool,
    ),
    CatalogEntry::on(
        "todo_write",
        "replace the session's todo list",
        |context, _| typed(TodoWriteTool::new(context.todo.clone())),
    ),
    CatalogEntry::on(
        "ask_user",
        "ask the person a question (needs a question service)",
        |context, _| typed(AskUser::new(Arc::clone(&context.questions))),
    )
    .when_named(),
    CatalogEntry::on(
        EXIT_PLAN_MODE,
        "propose the plan and ask to leave plan mode (with plan mode on)",
        |context, _| Some(Arc::new(context.plan.exit_tool())),
    )
    .when_named(),
];

/// The entry named `name`.
pub fn entry(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|entry| entry.name == name)
}

/// Every shipped tool's name.
pub fn names() -> impl Iterator<Item = &'static str> {
    CATALOG.iter().map(|entry| entry.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guide's table of shipped tools is the catalog, name for name.
    #[test]
    fn the_guide_lists_exactly_the_catalog() {
        let guide = include_str!("../../../docs/embedding.md");
        let table = guide
            .split("| name | what it does |")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_default();
        let listed: Vec<&str> = table
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|line| line.split('`').next())
            .collect();
        assert_eq!(listed, names().collect::<Vec<_>>());
    }

    #[test]
    fn names_are_unique_and_match_the_tools_they_make() {
        let mut seen = std::collections::BTreeSet::new();
        for name in names() {
            assert!(seen.insert(name), "{name} twice");
        }
        let dir = std::env::temp_dir();
        let roots = toolrail_tools_core::WorkspaceRoots::new([&dir])
            .unwrap_or_else(|_| unreachable!("the temp folder exists"));
        let context = CatalogContext {
            files: FileTools::new(roots.clone()),
            shell: ShellConfig::new(roots, dir.join("outputs")),
            shells: Shells::new(toolrail_shell_tool::BackgroundConfig::default()),
            background: true,
            todo: TodoBoard::new(),
            questions: Arc::new(toolrail_interaction::ScriptedQuestions::new([])),
            plan: PlanMode::new(toolrail_tools_core::PlanModeSwitch::new()),
        };
        for entry in CATALOG {
            let tool = entry.make(&context);
            assert_eq!(
                tool.as_ref()
                    .map(|tool| tool.spec().name().to_owned())
                    .as_deref(),
                Some(entry.name)
            );
        }
    }
}
