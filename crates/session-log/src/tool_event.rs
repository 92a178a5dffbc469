//! What a running tool may record in the log: its own facts (what it observed, what it is
//! about to write, a task list, a question), never what the pipeline did. A tool records a
//! [`ToolEvent`]; the kinds that state what the pipeline did (`tool/start`, `tool/result`,
//! `approval/*`, …) have no [`ToolEvent`] form, so a tool cannot write one.

use crate::event::{
    CodeDispatch, CodeDispatchStart, EventData, FsObserved, FsWriteIntent, McpRequest, PlanMode,
    QuestionAnswered, QuestionAsked, ShellExited, ShellStarted, TodoWrite, ToolsLoaded,
    UnknownEvent,
};
use crate::replay::Narrative;

/// An event a tool may record about its own call.
///
/// ```
/// use toolrail_session_log::{EventData, ToolEvent, event::TodoWrite};
///
/// let event = ToolEvent::from(TodoWrite { items: vec![] });
/// let data = EventData::from(event);
/// assert_eq!(data.kind(), "todo/write");
/// assert!(data.is_tool_owned());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum ToolEvent {
    /// A file's version as the tool read it (`fs/observed`).
    FsObserved(FsObserved),
    /// A write about to happen (`fs/write-intent`).
    FsWriteIntent(FsWriteIntent),
    /// The whole task list (`todo/write`).
    TodoWrite(TodoWrite),
    /// A question put to the user (`question/asked`).
    QuestionAsked(QuestionAsked),
    /// What became of it (`question/answered`).
    QuestionAnswered(QuestionAnswered),
    /// Plan mode switched (`plan/mode`).
    PlanMode(PlanMode),
    /// Deferred tools loaded (`tools/loaded`).
    ToolsLoaded(ToolsLoaded),
    /// A background shell began (`shell/started`).
    ShellStarted(ShellStarted),
    /// A background shell ended (`shell/exited`).
    ShellExited(ShellExited),
    /// An MCP tool call's request was sent (`mcp/request`).
    McpRequest(McpRequest),
    /// A program's tool call began (`tool/code-dispatch-start`).
    CodeDispatchStart(CodeDispatchStart),
    /// A program's tool call and its result (`tool/code-dispatch`).
    CodeDispatch(Box<CodeDispatch>),
    /// A kind of the tool's own, unknown to toolrail: kept verbatim.
    Own(UnknownEvent),
}

impl From<ToolEvent> for EventData {
    fn from(event: ToolEvent) -> Self {
        match event {
            ToolEvent::FsObserved(data) => Self::FsObserved(data),
            ToolEvent::FsWriteIntent(data) => Self::FsWriteIntent(data),
            ToolEvent::TodoWrite(data) => Self::TodoWrite(data),
            ToolEvent::QuestionAsked(data) => Self::QuestionAsked(data),
            ToolEvent::QuestionAnswered(data) => Self::QuestionAnswered(data),
            ToolEvent::PlanMode(data) => Self::PlanMode(data),
            ToolEvent::ToolsLoaded(data) => Self::ToolsLoaded(data),
            ToolEvent::ShellStarted(data) => Self::ShellStarted(data),
            ToolEvent::ShellExited(data) => Self::ShellExited(data),
            ToolEvent::McpRequest(data) => Self::McpRequest(data),
            ToolEvent::CodeDispatchStart(data) => Self::CodeDispatchStart(data),
            ToolEvent::CodeDispatch(data) => Self::CodeDispatch(data),
            ToolEvent::Own(data) => Self::Unknown(data),
        }
    }
}

macro_rules! tool_event_from {
    ($($kind:ident),*) => {$(
        impl From<$kind> for ToolEvent {
            fn from(data: $kind) -> Self {
                Self::$kind(data)
            }
        }
    )*};
}

tool_event_from!(
    FsObserved,
    FsWriteIntent,
    TodoWrite,
    QuestionAsked,
    QuestionAnswered,
    PlanMode,
    ToolsLoaded,
    ShellStarted,
    ShellExited,
    McpRequest,
    CodeDispatchStart
);

impl From<CodeDispatch> for ToolEvent {
    fn from(data: CodeDispatch) -> Self {
        Self::CodeDispatch(Box::new(data))
    }
}

/// Who writes an event kind, and whether it tells the session's story: every kind is
/// placed here, once, for the pipeline, recovery and every reader.
pub(crate) enum Class<'a> {
    /// The user, the model and the runtime speaking: see [`Narrative`].
    Story(Narrative<'a>),
    /// What a tool may write about its own call (an unknown kind is kept as one).
    Tool,
    /// The pipeline's and the loop's own bookkeeping.
    Pipeline,
}

impl EventData {
    pub(crate) fn class(&self) -> Class<'_> {
        match self {
            Self::TurnStart(turn) => Class::Story(Narrative::User(turn)),
            Self::AssistantMessage(message) => Class::Story(Narrative::Assistant(message)),
            Self::ToolResult(record) => Class::Story(Narrative::Result(record)),
            Self::ContextMessage(message) => Class::Story(Narrative::Context(message)),
            Self::TurnEnd(end) => Class::Story(Narrative::TurnEnd(end)),
            Self::RecoveryRepaired(repaired) => Class::Story(Narrative::Recovery(repaired)),
            Self::FsObserved(_)
            | Self::FsWriteIntent(_)
            | Self::TodoWrite(_)
            | Self::QuestionAsked(_)
            | Self::QuestionAnswered(_)
            | Self::PlanMode(_)
            | Self::ToolsLoaded(_)
            | Self::ShellStarted(_)
            | Self::ShellExited(_)
            | Self::McpRequest(_)
            | Self::CodeDispatchStart(_)
            | Self::CodeDispatch(_)
            | Self::Unknown(_) => Class::Tool,
            Self::SessionStart(_)
            | Self::StepStart(_)
            | Self::ToolCall(_)
            | Self::ArgsRewritten(_)
            | Self::ApprovalAsked(_)
            | Self::ApprovalDecided(_)
            | Self::ToolStart(_)
            | Self::StepEnd(_) => Class::Pipeline,
        }
    }

    /// Whether a tool may have written this event about its own call — the one answer the
    /// pipeline (what a tool may record) and recovery (what a call left behind) share.
    pub fn is_tool_owned(&self) -> bool {
        matches!(self.class(), Class::Tool)
    }

    /// The event as part of the session's story, or `None` for bookkeeping (and for kinds
    /// this version does not know).
    pub fn narrative(&self) -> Option<Narrative<'_>> {
        match self.class() {
            Class::Story(narrative) => Some(narrative),
            Class::Tool | Class::Pipeline => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{PlanMode, TodoWrite};

    #[test]
    fn every_tool_event_is_tool_owned_and_no_pipeline_kind_is() {
        let events = [
            ToolEvent::from(TodoWrite { items: vec![] }),
            ToolEvent::from(PlanMode { active: true }),
        ];
        for event in events {
            assert!(EventData::from(event).is_tool_owned());
        }
        let pipeline = EventData::StepStart(crate::event::StepStart::default());
        assert!(!pipeline.is_tool_owned());
    }
}
