//! The agent loop with a scripted model: turns and steps in the log, the conversation each
//! request carries, truncation, the step limit, cancellation and resuming a recovered session.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use std::time::Duration;
use toolrail_session_store::SessionStore;
use toolrail_session_store::{Durability, JsonlStore};
use toolrail_tools_core::CallArgs;

use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::*;
use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_tools_core::{
    Pipeline, Registry, RegistryBuilder, Tool, ToolContext, ToolOutput, ToolResult, ToolSpec,
};

/// A model that never answers: it waits for the cancellation.
struct Hanging;

impl ModelClient for Hanging {
    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            cancel.cancelled().await;
            Err(ModelError::Cancelled)
        })
    }
}

/// The scripted model, shared with the loop under test.
fn scripted(script: Vec<AssistantMessage>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(script))
}

fn text(text: &str) -> AssistantMessage {
    AssistantMessage {
        blocks: vec![AssistantBlock::Text { text: text.into() }],
        stop_reason: StopReason::EndTurn,
    }
}

fn calls(calls: &[(&str, &str, &str)], stop_reason: StopReason) -> AssistantMessage {
    let blocks = calls
        .iter()
        .map(|(id, name, args)| AssistantBlock::ToolCall {
            call_id: CallId::from(*id),
            name: (*name).into(),
            arguments_raw: (*args).into(),
        })
        .collect();
    AssistantMessage {
        blocks,
        stop_reason,
    }
}

struct Echo(ToolSpec, Mutex<usize>);

impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            *self.1.lock() += 1;
            Ok(ToolOutput::text(format!(
                "echo {}",
                args["say"].as_str().unwrap_or_default()
            )))
        })
    }
}

fn registry() -> (Registry, Arc<Echo>) {
    let echo = Arc::new(Echo(
        ToolSpec::builder("echo", "Says it back.", json!({"type": "object"})).build(),
        Mutex::new(0),
    ));
    let zeta = Arc::new(Echo(
        ToolSpec::builder("zeta", "Last by name.", json!({"type": "object"})).build(),
        Mutex::new(0),
    ));
    let (registry, _) = RegistryBuilder::new()
        .builtin(zeta)
        .builtin(echo.clone())
        .build()
        .unwrap();
    (registry, echo)
}

fn agent(
    log: Arc<dyn SessionLog>,
    model: Arc<dyn ModelClient>,
    registry: Registry,
    max_steps: u32,
) -> AgentLoop {
    let pipeline = Arc::new(Pipeline::builder(log.clone()).build());
    let scheduler = Scheduler::new(pipeline, SchedulerConfig::default());
    AgentLoop::new(
        registry,
        scheduler,
        log,
        model,
        LoopConfig {
            system: Some("be brief".into()),
            max_steps,
            ..LoopConfig::default()
        },
    )
}

#[tokio::test]
async fn a_turn_runs_the_batch_and_feeds_the_results_back() {
    let log = Arc::new(MemorySink::new());
    let model = scripted(vec![
        calls(
            &[
                ("c1", "echo", r#"{"say":"hi"}"#),
                ("c2", "echo", r#"{"say":"there"}"#),
            ],
            StopReason::ToolCalls,
        ),
        text("all said"),
    ]);
    let (registry, echo) = registry();
    let mut agent = agent(log.clone(), model.clone(), registry, 10);
    let ended = agent
        .run_turn(
            vec![ContentBlock::text("say hi there")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::Completed);
    assert_eq!(*echo.1.lock(), 2);
    let kinds = log.kinds();
    let n = kinds.len();
    assert_eq!(
        kinds[..3],
        ["turn/start", "step/start", "assistant/message"]
    );
    assert_eq!(
        kinds[n - 5..],
        [
            "step/end",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end"
        ]
    );
    // The batch: calls recorded, bodies started and results committed; how starts of bodies
    // running as tasks interleave with commits is up to the runtime, the commit order is not.
    let mut batch: Vec<&str> = kinds[3..n - 5].iter().map(String::as_str).collect();
    batch.sort_unstable();
    assert_eq!(
        batch,
        [
            "tool/call",
            "tool/call",
            "tool/result",
            "tool/result",
            "tool/start",
            "tool/start"
        ]
    );
    let committed: Vec<String> = log
        .events()
        .iter()
        .filter(|e| e.data.kind() == "tool/result")
        .map(|e| e.call_id.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(committed, ["c1", "c2"]);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0]
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["echo", "zeta"],
        "stable order"
    );
    assert_eq!(requests[0].system.as_deref(), Some("be brief"));
    let second: Vec<String> = requests[1]
        .messages
        .iter()
        .map(|item| match item {
            ConversationItem::User(_) => "user".to_owned(),
            ConversationItem::Assistant(_) => "assistant".to_owned(),
            ConversationItem::ToolResult { call_id, record } => {
                format!("{call_id}: {}", record.content[0].as_text().unwrap())
            }
            ConversationItem::Context { .. } => "context".to_owned(),
        })
        .collect();
    assert_eq!(
        second,
        ["user", "assistant", "c1: echo hi", "c2: echo there"]
    );
    // The conversation the loop keeps is the one replay derives from the log.
    assert_eq!(agent.conversation(), conversation(&log.events()).as_slice());
    let turn_events: Vec<Option<u32>> = log.events().iter().map(|e| e.turn.map(|t| t.0)).collect();
    assert!(turn_events.iter().all(|turn| *turn == Some(1)));
}

#[tokio::test]
async fn a_cut_off_message_executes_nothing_and_ends_the_turn_truncated() {
    let log = Arc::new(MemorySink::new());
    let model = scripted(vec![calls(
        &[("c1", "echo", r#"{"say":"h"#)],
        StopReason::Length,
    )]);
    let (registry, echo) = registry();
    let mut agent = agent(log.clone(), model, registry, 10);
    let ended = agent
        .run_turn(
            vec![ContentBlock::text("go")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::Truncated);
    assert_eq!(*echo.1.lock(), 0);
    let results: Vec<Option<ErrorCode>> = log
        .events()
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolResult(record) => Some(record.error_code().cloned()),
            _ => None,
        })
        .collect();
    assert_eq!(results, [Some(ErrorCode::TruncatedCall)]);
}

#[tokio::test]
async fn the_step_limit_ends_a_turn_that_keeps_calling_tools() {
    let log = Arc::new(MemorySink::new());
    let model = scripted(
        (0..10)
            .map(|n| calls(&[(&format!("c{n}"), "echo", "{}")], StopReason::ToolCalls))
            .collect(),
    );
    let (registry, echo) = registry();
    let mut agent = agent(log.clone(), model.clone(), registry, 3);
    let ended = agent
        .run_turn(
            vec![ContentBlock::text("loop")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::MaxSteps);
    assert_eq!(*echo.1.lock(), 3);
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test]
async fn cancelling_while_the_model_answers_aborts_the_turn() {
    let log = Arc::new(MemorySink::new());
    let model = Arc::new(Hanging);
    let (registry, _) = registry();
    let mut agent = agent(log.clone(), model, registry, 3);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        canceller.cancel();
    });
    let ended = agent
        .run_turn(vec![ContentBlock::text("go")], cancel, None)
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::Aborted);
    assert_eq!(log.kinds().last().map(String::as_str), Some("turn/end"));
}

#[tokio::test]
async fn a_resumed_session_carries_the_synthetic_results_of_its_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log = store
        .create(SessionStart {
            format_version: FORMAT_VERSION,
            session_id: SessionId::new("resume"),
            tools: vec![],
            meta: None,
        })
        .unwrap();
    let add = |call: Option<&str>, data: EventData| EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    };
    for (call, data) in [
        (
            None,
            EventData::TurnStart(TurnStart {
                user: vec![ContentBlock::text("write it")],
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        (
            None,
            EventData::AssistantMessage(calls(&[("c1", "echo", "{}")], StopReason::ToolCalls)),
        ),
        (Some("c1"), EventData::ToolStart(ToolStart::default())),
    ] {
        log.append(add(call, data), AppendUrgency::Durable)
            .await
            .unwrap();
    }
    drop(log); // the crash

    let opened = store.open(&SessionId::new("resume")).unwrap();
    recover(&opened.events, opened.torn_bytes_dropped, &[], &opened.log)
        .await
        .unwrap();
    drop(opened);
    let opened = store.open(&SessionId::new("resume")).unwrap();
    let model = scripted(vec![text("I see the write may have happened")]);
    let (registry, _) = registry();
    let log: Arc<dyn SessionLog> = Arc::new(opened.log);
    let mut agent = agent(log, model.clone(), registry, 3).resume(&opened.events);
    let ended = agent
        .run_turn(
            vec![ContentBlock::text("did it work?")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::Completed);
    let request = &model.requests()[0];
    let unknown = request.messages.iter().find_map(|item| match item {
        ConversationItem::ToolResult { call_id, record } if call_id.as_str() == "c1" => {
            record.error_code().cloned()
        }
        _ => None,
    });
    assert_eq!(
        unknown,
        Some(ErrorCode::ToolOutcomeUnknown),
        "the next request answers c1 honestly"
    );
    drop(agent);
    let reopened = store.open(&SessionId::new("resume")).unwrap();
    let turns: Vec<u32> = reopened
        .events
        .iter()
        .filter(|e| e.data.kind() == "turn/start")
        .filter_map(|e| e.turn.map(|t| t.0))
        .collect();
    assert_eq!(
        turns,
        [1, 2],
        "the resumed turn is numbered after the recovered one"
    );
}

/// Blocks until released, so the test can steer while the batch runs.
struct Waiter(ToolSpec, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>);

impl Tool for Waiter {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            self.1.notify_one();
            self.2.notified().await;
            Ok(ToolOutput::text("waited"))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_sent_during_a_batch_arrives_after_its_results() {
    let log = Arc::new(MemorySink::new());
    let (started, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let waiter = Arc::new(Waiter(
        ToolSpec::builder("wait", "w", json!({"type": "object"})).build(),
        started.clone(),
        release.clone(),
    ));
    let (registry, _) = RegistryBuilder::new().builtin(waiter).build().unwrap();
    let model = scripted(vec![
        calls(&[("c1", "wait", "{}")], StopReason::ToolCalls),
        text("ok, switching"),
    ]);
    let mut agent = agent(log.clone(), model.clone(), registry, 5);
    let steering = agent.steering();
    let turn = tokio::spawn(async move {
        let ended = agent
            .run_turn(
                vec![ContentBlock::text("go")],
                CancellationToken::new(),
                None,
            )
            .await;
        (ended, agent)
    });
    started.notified().await;
    assert!(steering.send(vec![ContentBlock::text("actually, do it the other way")]));
    release.notify_one();
    let (ended, agent) = turn.await.unwrap();
    assert_eq!(ended.unwrap(), TurnEndKind::Completed);
    let second = &model.requests()[1];
    let tail: Vec<String> = second.messages[2..]
        .iter()
        .map(|item| match item {
            ConversationItem::ToolResult { call_id, .. } => format!("result {call_id}"),
            ConversationItem::Context { source, content } => {
                format!("{source}: {}", content[0].as_text().unwrap())
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(tail, ["result c1", "user: actually, do it the other way"]);
    assert_eq!(
        agent.conversation(),
        conversation(&log.events()).as_slice(),
        "the log says the same"
    );
}

#[tokio::test]
async fn tool_search_makes_a_deferred_tool_callable_from_the_next_request() {
    use toolrail_tools_core::{Exposure, Typed};
    let deploy = Arc::new(Echo(
        ToolSpec::builder(
            "deploy",
            "Ships the service to production.",
            json!({"type": "object"}),
        )
        .exposure(Exposure::Deferred)
        .build(),
        Mutex::new(0),
    ));
    let (registry, _) = RegistryBuilder::new()
        .reserve(TOOL_SEARCH)
        .builtin(deploy.clone())
        .build()
        .unwrap();
    registry
        .install_runtime_tool(Arc::new(Typed::new(ToolSearch::new(registry.clone()))))
        .unwrap();
    let log = Arc::new(MemorySink::new());
    let model = scripted(vec![
        // The search and a call in the same message: deploy is not in this request's tool set.
        calls(
            &[
                ("c1", "tool_search", r#"{"query":"ship production"}"#),
                ("c2", "deploy", "{}"),
            ],
            StopReason::ToolCalls,
        ),
        calls(
            &[("c3", "deploy", r#"{"say":"v2"}"#)],
            StopReason::ToolCalls,
        ),
        text("shipped"),
    ]);
    let mut agent = agent(log.clone(), model.clone(), registry.clone(), 5);
    agent
        .run_turn(
            vec![ContentBlock::text("ship it")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    let codes: Vec<(String, Option<ErrorCode>)> = log
        .events()
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolResult(record) => Some((
                e.call_id.as_ref().unwrap().to_string(),
                record.error_code().cloned(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        codes,
        [
            ("c1".to_owned(), None),
            ("c2".to_owned(), Some(ErrorCode::UnknownTool)),
            ("c3".to_owned(), None)
        ]
    );
    assert_eq!(*deploy.1.lock(), 1);
    let loaded: Vec<Vec<String>> = log
        .events()
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolsLoaded(loaded) => Some(loaded.names.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(loaded, [vec!["deploy".to_owned()]]);
    let requests = model.requests();
    let names = |at: usize| {
        requests[at]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(0), ["tool_search"]);
    assert_eq!(names(1), ["deploy", "tool_search"]);

    // A resumed session (a fresh registry) sees the tools its log says were loaded.
    let deploy2 = Arc::new(Echo(
        ToolSpec::builder(
            "deploy",
            "Ships the service to production.",
            json!({"type": "object"}),
        )
        .exposure(Exposure::Deferred)
        .build(),
        Mutex::new(0),
    ));
    let (fresh, _) = RegistryBuilder::new().builtin(deploy2).build().unwrap();
    let resumed = agent_with(Arc::new(MemorySink::new()), scripted(vec![]), fresh.clone())
        .resume(&log.events());
    drop(resumed);
    assert!(fresh.snapshot().names().contains(&"deploy"));
}

fn agent_with(log: Arc<MemorySink>, model: Arc<ScriptedModel>, registry: Registry) -> AgentLoop {
    agent(log, model, registry, 5)
}

/// Ends the turn with its answer.
struct Finish(ToolSpec);

impl Tool for Finish {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async { Ok(ToolOutput::text("final answer given").concluding()) })
    }
}

#[tokio::test]
async fn a_tool_may_conclude_the_turn() {
    let finish = Arc::new(Finish(
        ToolSpec::builder(
            "finish",
            "Gives the final answer.",
            json!({"type": "object"}),
        )
        .build(),
    ));
    let (registry, echo) = registry();
    registry
        .register_external(ToolSource::Extension("answers".into()), finish)
        .unwrap();
    let log = Arc::new(MemorySink::new());
    let model = scripted(vec![
        calls(
            &[("c1", "echo", "{}"), ("c2", "finish", "{}")],
            StopReason::ToolCalls,
        ),
        text("this must never be asked for"),
    ]);
    let mut agent = agent(log.clone(), model.clone(), registry, 5);
    let ended = agent
        .run_turn(
            vec![ContentBlock::text("answer")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::Completed);
    assert_eq!(
        model.requests().len(),
        1,
        "no request after the concluding result"
    );
    assert_eq!(*echo.1.lock(), 1, "the rest of the batch still ran");
    let concluded = log
        .events()
        .iter()
        .any(|e| matches!(&e.data, EventData::ToolResult(r) if r.concludes_turn));
    assert!(concluded, "the log says which result ended the turn");
}

/// Some models number their calls from the start in every answer: `c1` again in the next
/// step is a new call with its own result, and the log, replay and the next request agree.
#[tokio::test]
async fn a_call_id_reused_in_a_later_answer_is_a_new_call() {
    let log = Arc::new(MemorySink::new());
    let model = scripted(vec![
        calls(&[("c1", "echo", r#"{"say":"one"}"#)], StopReason::ToolCalls),
        calls(&[("c1", "echo", r#"{"say":"two"}"#)], StopReason::ToolCalls),
        text("said twice"),
    ]);
    let (registry, echo) = registry();
    let mut agent = agent(log.clone(), model.clone(), registry, 10);
    let ended = agent
        .run_turn(
            vec![ContentBlock::text("say it twice")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ended, TurnEndKind::Completed);
    assert_eq!(*echo.1.lock(), 2, "both calls ran");
    let answered: Vec<String> = model.requests()[2]
        .messages
        .iter()
        .filter_map(|item| match item {
            ConversationItem::ToolResult { call_id, record } => Some(format!(
                "{call_id}: {}",
                record.content[0].as_text().unwrap()
            )),
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["c1: echo one", "c1: echo two"]);
    assert_eq!(agent.conversation(), conversation(&log.events()).as_slice());
    let records = call_records(&log.events());
    let seen: Vec<(String, String)> = records
        .iter()
        .map(|record| {
            let result = record.result.as_ref().unwrap();
            (
                record.arguments_raw.clone(),
                result.content[0].as_text().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (r#"{"say":"one"}"#.to_owned(), "echo one".to_owned()),
            (r#"{"say":"two"}"#.to_owned(), "echo two".to_owned()),
        ]
    );
}

/// The turn's live view: the model's answer as deltas first, then each call prepared with
/// its arguments and committed with the very record the log holds.
#[tokio::test]
async fn the_live_view_sees_the_answer_then_every_call_with_its_arguments_and_record() {
    let log = Arc::new(MemorySink::new());
    let mut message = calls(&[("c1", "echo", r#"{"say":"hi"}"#)], StopReason::ToolCalls);
    message.blocks.insert(
        0,
        AssistantBlock::Text {
            text: "Saying hi.".into(),
        },
    );
    let model = scripted(vec![message, text("said")]);
    let (registry, _) = registry();
    let mut agent = agent(log.clone(), model, registry, 10);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    agent
        .run_turn(
            vec![ContentBlock::text("say hi")],
            CancellationToken::new(),
            Some(Arc::new(tx)),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        seen.push(event);
    }
    let outline: Vec<String> = seen
        .iter()
        .map(|event| match event {
            LiveEvent::Model(ModelDelta::Text(text)) => format!("text {text}"),
            LiveEvent::Model(ModelDelta::ToolCallStarted { call_id, name, .. }) => {
                format!("call {call_id} {name}")
            }
            LiveEvent::Model(ModelDelta::ToolCallArguments { fragment, .. }) => {
                format!("arguments {fragment}")
            }
            LiveEvent::Model(other) => format!("{other:?}"),
            LiveEvent::Prepared {
                call_id, arguments, ..
            } => format!("prepared {call_id} {arguments}"),
            LiveEvent::Started { call_id } => format!("started {call_id}"),
            LiveEvent::Progress { call_id, .. } => format!("progress {call_id}"),
            LiveEvent::Finished { call_id } => format!("finished {call_id}"),
            LiveEvent::Committed { call_id, .. } => format!("committed {call_id}"),
        })
        .collect();
    assert_eq!(
        outline,
        [
            "text Saying hi.",
            "call c1 echo",
            r#"arguments {"say":"hi"}"#,
            r#"prepared c1 {"say":"hi"}"#,
            "started c1",
            "finished c1",
            "committed c1",
            "text said",
        ]
    );
    let live_record = seen
        .iter()
        .find_map(|event| match event {
            LiveEvent::Committed { record, .. } => Some(record.clone()),
            _ => None,
        })
        .unwrap();
    let logged = log
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::ToolResult(record) => Some(record),
            _ => None,
        })
        .unwrap();
    assert_eq!(*live_record, *logged);
}

/// A request shares the tool definitions of its snapshot with the steps before it, and a
/// changed registry is offered from the next request; a model client that keeps a request
/// keeps the conversation as that request carried it.
#[tokio::test]
async fn requests_share_what_has_not_changed_and_see_what_has() {
    let log = Arc::new(MemorySink::new());
    let model = scripted(vec![
        calls(&[("c1", "echo", r#"{"say":"hi"}"#)], StopReason::ToolCalls),
        text("said"),
        text("again"),
    ]);
    let (registry, _echo) = registry();
    let mut agent = agent(log.clone(), model.clone(), registry.clone(), 10);
    agent
        .run_turn(
            vec![ContentBlock::text("go")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    registry
        .register_external(
            ToolSource::Mcp("late".into()),
            Arc::new(Echo(
                ToolSpec::builder("mcp__late__echo", "echo, later", json!({"type": "object"}))
                    .build(),
                Mutex::new(0),
            )),
        )
        .unwrap();
    agent
        .run_turn(
            vec![ContentBlock::text("more")],
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        Arc::ptr_eq(&requests[0].tools, &requests[1].tools),
        "the same snapshot, the same definitions"
    );
    let names = |request: &ModelRequest| -> Vec<String> {
        request.tools.iter().map(|tool| tool.name.clone()).collect()
    };
    assert!(!names(&requests[1]).contains(&"mcp__late__echo".to_owned()));
    assert!(names(&requests[2]).contains(&"mcp__late__echo".to_owned()));
    // Each kept request holds the conversation as it was sent: the first only the user's
    // message, the second also the call and its result.
    assert_eq!(requests[0].messages.len(), 1);
    assert_eq!(requests[1].messages.len(), 3);
    assert_eq!(requests[2].messages.len(), 5);
}
