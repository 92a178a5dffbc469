//! What the client is shown: a running turn's [`AgentEvent`]s, and a loaded session's log,
//! as ACP `session/update`s. Both go through the same mapping of a call (kind, title,
//! locations) and of a committed result (status, content), so a session shown live and the
//! same session loaded later read alike.
//! A file change is sent as ACP `diff` content, a hunk at a time (`diff.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use toolrail_runtime::AgentEvent;
use toolrail_session_log::details::Details;
use toolrail_session_log::event::{AssistantBlock, AssistantMessage, TurnEndKind};
use toolrail_session_log::{CallId, ContentBlock, Event, EventData, ToolResultRecord};
use toolrail_tools_core::registry::CallOrigin;
use toolrail_tools_core::{Registry, ToolKind};

/// ACP's kind of a tool: the kind its spec declares (toolrail's kinds are ACP's), so an MCP
/// server's or an embedder's tool is shown as what it is; `other` for a name the session
/// has no tool for (a model's mistake, a tool gone since).
pub(crate) fn tool_kind(tools: &Registry, name: &str) -> &'static str {
    let kind = tools
        .snapshot()
        .resolve(name, CallOrigin::Host)
        .map(|entry| entry.spec().kind())
        .or_else(|| {
            // A deferred tool not loaded yet is not in the snapshot.
            tools
                .deferred_catalog()
                .iter()
                .find(|entry| entry.name() == name)
                .map(|entry| entry.spec().kind())
        });
    kind.map_or("other", ToolKind::as_str)
}

/// A readable title: the tool and what it works on (`bash: cargo test`, `read: src/lib.rs`).
pub(crate) fn title(name: &str, arguments: &Value) -> String {
    let subject = ["command", "path", "file_path", "pattern", "query", "url"]
        .iter()
        .find_map(|key| arguments.get(key).and_then(Value::as_str))
        .map(|subject| subject.lines().next().unwrap_or_default().to_owned());
    match subject {
        Some(subject) if !subject.is_empty() => format!("{name}: {subject}"),
        _ => name.to_owned(),
    }
}

/// The files a call names, absolute (relative paths are the workspace's).
pub(crate) fn locations(arguments: &Value, root: &Path) -> Vec<Value> {
    ["path", "file_path"]
        .iter()
        .filter_map(|key| arguments.get(key).and_then(Value::as_str))
        .map(|path| {
            let line = arguments
                .get("offset")
                .or_else(|| arguments.get("line"))
                .and_then(Value::as_u64);
            let mut location = json!({"path": root.join(path).display().to_string()});
            if let (Some(line), Some(object)) = (line, location.as_object_mut()) {
                object.insert("line".to_owned(), json!(line.max(1)));
            }
            location
        })
        .collect()
}

/// A call the client is told of first: pending, with what it will act on; `kind` is
/// [`tool_kind`]'s (or an approval request's, which carries its spec's).
pub(crate) fn call(
    call_id: &CallId,
    name: &str,
    kind: &str,
    arguments: &Value,
    root: &Path,
) -> Value {
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call_id.as_str(),
        "title": title(name, arguments),
        "kind": kind,
        "status": "pending",
        "locations": locations(arguments, root),
        "rawInput": arguments,
    })
}

/// A call's status changing (`in_progress`).
fn status(call_id: &CallId, status: &str) -> Value {
    json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id.as_str(), "status": status})
}

/// A call's committed result: `completed` or `failed`, its content, and its error code as
/// raw output.
pub(crate) fn committed(call_id: &CallId, record: &ToolResultRecord, root: &Path) -> Value {
    let mut update = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id.as_str(),
        "status": if record.is_error() { "failed" } else { "completed" },
        "content": result_content(record, root),
    });
    if let (Some(error), Some(object)) = (&record.error, update.as_object_mut()) {
        object.insert(
            "rawOutput".to_owned(),
            json!({"error": {"code": error.code.as_str(), "message": error.message}}),
        );
    }
    update
}

/// A result's content blocks as ACP content, then its file changes as `diff` content.
fn result_content(record: &ToolResultRecord, root: &Path) -> Vec<Value> {
    let mut content: Vec<Value> = record
        .content
        .iter()
        .map(|block| json!({"type": "content", "content": content_block(block)}))
        .collect();
    if let Some(Details::Diff(diff)) = &record.details {
        content.extend(super::diff::diff_contents(diff, root));
    }
    content
}

/// One of toolrail's content blocks as an ACP content block.
pub(crate) fn content_block(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::Image { media_type, data } => {
            json!({"type": "image", "mimeType": media_type, "data": data})
        }
        ContentBlock::Json { value } => json!({"type": "text", "text": value.to_string()}),
    }
}

fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
}

/// One block of the user's message.
fn user_chunk(block: &ContentBlock) -> Value {
    json!({"sessionUpdate": "user_message_chunk", "content": content_block(block)})
}

/// A call's argument text as JSON; text that is not JSON shows as no arguments.
fn arguments_of(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// How a turn's end is said to the client.
pub(crate) fn stop_reason(end: &TurnEndKind) -> &'static str {
    match end {
        TurnEndKind::Completed | TurnEndKind::Error | TurnEndKind::Interrupted => "end_turn",
        TurnEndKind::Aborted => "cancelled",
        TurnEndKind::MaxSteps => "max_turn_requests",
        TurnEndKind::Truncated => "max_tokens",
    }
}

/// The calls of the running turn the client was told of: shared by the turn's updates and
/// the approval service, which announces a call before asking about it (a call asks before
/// it is prepared).
pub(crate) type Announced = Arc<Mutex<HashSet<CallId>>>;

/// A running turn's updates: each call is announced once (when asked about, prepared, or
/// committed if it never was), then updated.
pub(crate) struct Turn<'a> {
    root: &'a Path,
    /// The session's tools, for each call's kind.
    tools: &'a Registry,
    announced: Announced,
    /// The calls the model's messages made, for a call committed without being prepared
    /// (a batch cancelled before it was reached).
    asked: HashMap<CallId, (String, Value)>,
}

impl<'a> Turn<'a> {
    /// A turn's updates; `announced` is cleared (a model may use its call ids again in
    /// another turn).
    pub(crate) fn new(root: &'a Path, tools: &'a Registry, announced: Announced) -> Self {
        announced.lock().clear();
        Self {
            root,
            tools,
            announced,
            asked: HashMap::new(),
        }
    }

    /// The updates `event` shows (none for the events a client has no place for).
    pub(crate) fn updates(&mut self, event: &AgentEvent) -> Vec<Value> {
        match event {
            AgentEvent::TextDelta(text) => vec![chunk("agent_message_chunk", text)],
            AgentEvent::ReasoningDelta(text) => vec![chunk("agent_thought_chunk", text)],
            AgentEvent::CallPrepared {
                call_id,
                name,
                arguments,
            } => {
                if self.announced.lock().insert(call_id.clone()) {
                    vec![self.call(call_id, name, arguments)]
                } else {
                    Vec::new()
                }
            }
            AgentEvent::CallStarted { call_id } => vec![status(call_id, "in_progress")],
            AgentEvent::CallCommitted {
                call_id,
                name,
                arguments,
                record,
            } => {
                let mut updates = Vec::new();
                let first = self.announced.lock().insert(call_id.clone());
                if first {
                    // Committed unprepared, the event names no tool: the message did.
                    updates.push(match self.asked.get(call_id) {
                        Some((asked_name, asked_arguments)) if name.is_empty() => {
                            self.call(call_id, asked_name, asked_arguments)
                        }
                        _ => self.call(call_id, name, arguments),
                    });
                }
                updates.push(committed(call_id, record, self.root));
                updates
            }
            AgentEvent::Message(message) => {
                self.asked.extend(calls_of(message));
                Vec::new()
            }
            AgentEvent::Context { source, content } if source == "user" => {
                content.iter().map(user_chunk).collect()
            }
            // What the client is told of otherwise: the approval through its own request,
            // the answer's text through its deltas (a restarted answer cannot be taken
            // back in ACP), the end through the prompt's response.
            AgentEvent::StepStarted { .. }
            | AgentEvent::ToolCallStreaming { .. }
            | AgentEvent::ToolCallDelta { .. }
            | AgentEvent::AnswerRestarted { .. }
            | AgentEvent::ApprovalAsked { .. }
            | AgentEvent::ApprovalDecided { .. }
            | AgentEvent::CallProgress { .. }
            | AgentEvent::CallFinished { .. }
            | AgentEvent::Context { .. }
            | AgentEvent::TurnEnded(_) => Vec::new(),
        }
    }

    fn call(&self, call_id: &CallId, name: &str, arguments: &Value) -> Value {
        call(
            call_id,
            name,
            tool_kind(self.tools, name),
            arguments,
            self.root,
        )
    }
}

/// The calls a message makes: each one's name and arguments (`{}` when they do not parse).
fn calls_of(message: &AssistantMessage) -> Vec<(CallId, (String, Value))> {
    message
        .tool_calls()
        .into_iter()
        .map(|asked| {
            let arguments = arguments_of(asked.arguments_raw);
            (asked.call_id, (asked.name.to_owned(), arguments))
        })
        .collect()
}

/// A session's log as the updates a client that watched it would have been sent: each
/// turn's user message, the assistant's text (and reasoning), and each call with its
/// final status. A call in `announced` was shown already (asked about again while the
/// session was loaded): only its result is sent, so a call is announced once.
pub(crate) fn replay(
    events: &[Event],
    root: &Path,
    tools: &Registry,
    announced: &Announced,
) -> Vec<Value> {
    let mut updates = Vec::new();
    let mut announced = announced.lock();
    let mut asked = HashMap::new();
    for event in events {
        let call_id = event.call_id.as_ref().filter(|id| !id.is_code_sub_call());
        if let EventData::TurnStart(start) = &event.data {
            updates.extend(start.user.iter().map(user_chunk));
        } else if let EventData::AssistantMessage(message) = &event.data {
            asked.extend(calls_of(message));
            for block in &message.blocks {
                match block {
                    AssistantBlock::Text { text } if !text.is_empty() => {
                        updates.push(chunk("agent_message_chunk", text));
                    }
                    AssistantBlock::Thinking { text } if !text.is_empty() => {
                        updates.push(chunk("agent_thought_chunk", text));
                    }
                    AssistantBlock::Text { .. }
                    | AssistantBlock::Thinking { .. }
                    | AssistantBlock::ToolCall { .. } => {}
                }
            }
        } else if let (EventData::ToolCall(called), Some(call_id)) = (&event.data, call_id) {
            let arguments = arguments_of(&called.arguments_raw);
            if announced.insert(call_id.clone()) {
                let kind = tool_kind(tools, &called.name);
                updates.push(call(call_id, &called.name, kind, &arguments, root));
            }
        } else if let (EventData::ToolResult(record), Some(call_id)) = (&event.data, call_id) {
            if announced.insert(call_id.clone()) {
                let (name, arguments) = asked
                    .get(call_id)
                    .cloned()
                    .unwrap_or_else(|| (String::new(), Value::Null));
                let kind = tool_kind(tools, &name);
                updates.push(call(call_id, &name, kind, &arguments, root));
            }
            updates.push(committed(call_id, record, root));
        } else if let EventData::ContextMessage(message) = &event.data
            && message.source == "user"
        {
            updates.extend(message.content.iter().map(user_chunk));
        }
    }
    updates
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;
    use toolrail_tools_core::log::BoxFuture;
    use toolrail_tools_core::{
        CallArgs, Concurrency, RegistryBuilder, Tool, ToolContext, ToolOutput, ToolResult, ToolSpec,
    };

    use super::*;

    /// A tool of `kind` that an MCP server or an embedder could add under any name.
    struct Kinded(ToolSpec);

    impl Tool for Kinded {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }

        fn concurrency(&self, _args: &CallArgs) -> Concurrency {
            Concurrency::shared()
        }

        fn execute<'a>(
            &'a self,
            _ctx: &'a ToolContext,
            _args: &'a CallArgs,
        ) -> BoxFuture<'a, ToolResult> {
            Box::pin(async { Ok(ToolOutput::text("ok")) })
        }
    }

    fn tools() -> Registry {
        let kinded = |name: &str, kind: ToolKind| {
            let spec = ToolSpec::builder(name, "a tool", json!({"type": "object"}))
                .kind(kind)
                .build();
            Kinded(spec)
        };
        let (registry, _) = RegistryBuilder::new()
            .builtin(kinded("bash", ToolKind::Execute))
            .builtin(kinded("read", ToolKind::Read))
            .builtin(kinded("mcp__time__now", ToolKind::Fetch))
            .builtin(kinded("mcp__fs__delete", ToolKind::Delete))
            .builtin(kinded("deploy", ToolKind::Execute))
            .build()
            .unwrap_or_else(|error| panic!("registry: {error}"));
        registry
    }

    #[test]
    fn calls_are_kinded_by_their_spec_titled_and_located_for_the_client() {
        let root = Path::new("/w");
        let tools = tools();
        let bash = json!({"command": "cargo test\n--all", "description": "test"});
        let read = json!({"path": "src/lib.rs", "offset": 10});
        let shown =
            |name: &str, arguments: &Value| (tool_kind(&tools, name), title(name, arguments));
        assert_eq!(
            [
                shown("bash", &bash),
                shown("read", &read),
                shown("mcp__time__now", &json!({})),
                shown("mcp__fs__delete", &json!({"path": "a"})),
                shown("deploy", &json!({})),
                shown("no_such_tool", &json!({})),
            ],
            [
                ("execute", "bash: cargo test".to_owned()),
                ("read", "read: src/lib.rs".to_owned()),
                ("fetch", "mcp__time__now".to_owned()),
                ("delete", "mcp__fs__delete: a".to_owned()),
                ("execute", "deploy".to_owned()),
                ("other", "no_such_tool".to_owned()),
            ]
        );
        assert_eq!(
            locations(&read, root),
            [json!({"path": "/w/src/lib.rs", "line": 10})]
        );
        assert_eq!(locations(&bash, root), Vec::<Value>::new());
    }

    /// A call asked about again while its session loaded was announced then: the replay
    /// after it sends only its result, so the client is told of each call once.
    #[test]
    fn a_load_announces_a_call_asked_again_once() {
        use toolrail_session_log::event::ToolCall;
        use toolrail_session_log::{ErrorCode, Timestamp};

        let event = |seq: u64, call: &str, data: EventData| Event {
            seq,
            ts: Timestamp::now(),
            turn: None,
            step: None,
            call_id: Some(CallId::new(call)),
            data,
        };
        let called = |name: &str| {
            EventData::ToolCall(ToolCall {
                index: 0,
                name: name.to_owned(),
                arguments_raw: "{}".to_owned(),
                source: None,
                version: None,
                trace: None,
            })
        };
        let rejected = ToolResultRecord::failure(ErrorCode::ApprovalRejected, "rejected");
        let events = [
            event(1, "c1", called("read")),
            event(2, "c2", called("bash")),
            event(3, "c2", EventData::ToolResult(Arc::new(rejected))),
        ];
        let announced = Announced::default();
        announced.lock().insert(CallId::new("c2"));
        let updates = replay(&events, Path::new("/w"), &tools(), &announced);
        let shown: Vec<(&str, &str)> = updates
            .iter()
            .map(|update| {
                (
                    update["sessionUpdate"].as_str().unwrap_or_default(),
                    update["toolCallId"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [("tool_call", "c1"), ("tool_call_update", "c2")],
            "{updates:#?}"
        );
    }
}
