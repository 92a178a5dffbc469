//! The interaction tools through the real pipeline: ask_user logs each question's states and
//! never makes up an answer; todo_write validates, logs and rebuilds; resumed questions are
//! withdrawn or asked again. (Plan mode with its guard is tested in testkit, which may use
//! both crates.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;

use serde_json::json;
use toolrail_interaction::{
    AskUser, QuestionOutcome, ScriptedQuestions, TodoBoard, TodoWriteTool, resume_questions,
    unanswered_questions,
};
use toolrail_tools_core::log::{
    ErrorCode, EventData, MemorySink,
    event::{QuestionState, TodoItem, TodoStatus},
};
use toolrail_tools_core::{
    CallRequest, CancellationToken, CommittedResult, Pipeline, PipelineBuilder, PipelineConfig,
    RegistryBuilder, Tool, ToolSet, Typed, pipeline::BatchControl,
};

struct Setup {
    sink: Arc<MemorySink>,
    tools: ToolSet,
    workspace: tempfile::TempDir,
}

fn setup(tools: Vec<Arc<dyn Tool>>) -> Setup {
    let mut builder = RegistryBuilder::new();
    for tool in tools {
        builder = builder.external(toolrail_tools_core::log::ToolSource::Builtin, tool);
    }
    let (registry, _) = builder.build().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "v1\n").unwrap();
    Setup {
        sink: Arc::new(MemorySink::new()),
        tools: registry.snapshot(),
        workspace,
    }
}

impl Setup {
    fn pipeline(&self) -> PipelineBuilder {
        Pipeline::builder(self.sink.clone()).config(PipelineConfig {
            workspace: Some(Arc::from(self.workspace.path())),
            ..PipelineConfig::default()
        })
    }

    async fn run(
        &self,
        pipeline: &Pipeline,
        id: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> CommittedResult {
        pipeline
            .execute_one(
                &self.tools,
                CallRequest::new(id, 0, tool, args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    }
}

fn text(result: &CommittedResult) -> String {
    result.record().text()
}

#[tokio::test]
async fn ask_user_logs_every_state_and_never_makes_up_an_answer() {
    let questions = Arc::new(ScriptedQuestions::new([
        QuestionOutcome::Answered("Postgres".to_owned()),
        QuestionOutcome::Expired,
        QuestionOutcome::Cancelled,
    ]));
    let s = setup(vec![Arc::new(Typed::new(AskUser::new(questions.clone())))]);
    let pipeline = s.pipeline().build();
    let result = s
        .run(
            &pipeline,
            "c1",
            "ask_user",
            json!({"questions": [
                {"id": "db", "question": "Which database?", "options": ["Postgres", "SQLite"]},
                {"id": "name", "question": "What should the service be called?"},
                {"id": "deploy", "question": "Deploy where?", "options": ["eu", "us"], "multi_select": true}
            ]}),
        )
        .await;
    assert!(!result.record().is_error(), "{:?}", result.record());
    let shown = text(&result);
    assert!(shown.contains("db: Postgres"), "{shown}");
    assert!(
        shown.contains("name: no answer (nobody answered in time)"),
        "{shown}"
    );
    assert!(
        shown.contains("deploy: no answer (the question was cancelled)"),
        "{shown}"
    );
    assert_eq!(
        result.record().value,
        Some(json!({
            "db": {"state": "answered", "answer": "Postgres"},
            "name": {"state": "expired", "answer": null},
            "deploy": {"state": "cancelled", "answer": null},
        }))
    );
    let states: Vec<(String, QuestionState, Option<String>)> = s
        .sink
        .events()
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::QuestionAnswered(answered) => {
                Some((answered.question_id, answered.state, answered.answer))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        states,
        [
            (
                "db".to_owned(),
                QuestionState::Answered,
                Some("Postgres".to_owned())
            ),
            ("name".to_owned(), QuestionState::Expired, None),
            ("deploy".to_owned(), QuestionState::Cancelled, None),
        ]
    );
    let asked = s
        .sink
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::QuestionAsked(asked) => Some(asked),
            _ => None,
        });
    let asked = asked.unwrap();
    assert_eq!(asked.options, ["Postgres", "SQLite"]);
    assert!(asked.workspace_digest.unwrap().starts_with("sha256:"));
    assert_eq!(questions.asked().len(), 3);
}

#[tokio::test]
async fn ask_user_refuses_bad_questions_before_asking() {
    let questions = Arc::new(ScriptedQuestions::new([]));
    let s = setup(vec![Arc::new(Typed::new(AskUser::new(questions.clone())))]);
    let pipeline = s.pipeline().build();
    let result = s
        .run(
            &pipeline,
            "c1",
            "ask_user",
            json!({"questions": [
                {"id": "a", "question": "?"},
                {"id": "a", "question": " "},
                {"id": "b", "question": "Pick", "multi_select": true}
            ]}),
        )
        .await;
    assert_eq!(result.record().error_code(), Some(&ErrorCode::InvalidArgs));
    let shown = text(&result);
    for problem in [
        "/questions/1/id",
        "/questions/1/question",
        "/questions/2/multi_select",
    ] {
        assert!(shown.contains(problem), "{shown}");
    }
    assert!(questions.asked().is_empty());
}

#[tokio::test]
async fn resumed_questions_are_withdrawn_when_the_workspace_changed() {
    // A question asked, never answered (the process died while it waited).
    let questions = Arc::new(ScriptedQuestions::new([]));
    let s = setup(vec![Arc::new(Typed::new(AskUser::new(questions)))]);
    let pipeline = s.pipeline().build();
    s.run(
        &pipeline,
        "c1",
        "ask_user",
        json!({"questions": [{"id": "q", "question": "Keep going?"}]}),
    )
    .await;
    // The scripted service let it expire; make the log look as if it was still waiting.
    let waiting: Vec<_> = s
        .sink
        .events()
        .into_iter()
        .filter(|event| !matches!(event.data, EventData::QuestionAnswered(_)))
        .collect();
    assert_eq!(unanswered_questions(&waiting).len(), 1);

    // Unchanged workspace: asked again, and the new answer is logged for the same call.
    let log = MemorySink::new();
    let again = ScriptedQuestions::new([QuestionOutcome::Answered("yes".to_owned())]);
    let cancel = CancellationToken::new();
    let resumed = resume_questions(&waiting, s.workspace.path(), &log, &again, &cancel)
        .await
        .unwrap();
    assert!(resumed.withdrawn.is_empty());
    assert_eq!(resumed.asked_again.len(), 1);
    assert_eq!(
        resumed.asked_again[0].1,
        QuestionOutcome::Answered("yes".to_owned())
    );
    assert_eq!(again.asked()[0].question, "Keep going?");
    let logged = log.events();
    assert_eq!(logged.len(), 1);
    match &logged[0].data {
        EventData::QuestionAnswered(answered) => {
            assert_eq!(answered.state, QuestionState::Answered);
            assert_eq!(answered.answer.as_deref(), Some("yes"));
        }
        other => panic!("{other:?}"),
    }

    // Changed workspace: withdrawn, logged as cancelled for the same call.
    std::fs::write(s.workspace.path().join("notes.txt"), "v2\n").unwrap();
    let log = MemorySink::new();
    let never = ScriptedQuestions::new([]);
    let resumed = resume_questions(&waiting, s.workspace.path(), &log, &never, &cancel)
        .await
        .unwrap();
    assert!(resumed.asked_again.is_empty());
    assert_eq!(resumed.withdrawn.len(), 1);
    assert!(
        never.asked().is_empty(),
        "a withdrawn question is not asked"
    );
    let logged = log.events();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].call_id.as_ref().map(|id| id.as_str()), Some("c1"));
    match &logged[0].data {
        EventData::QuestionAnswered(answered) => {
            assert_eq!(answered.state, QuestionState::Cancelled);
            assert_eq!(answered.answer, None);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn todo_write_validates_logs_and_rebuilds_from_the_log() {
    let board = TodoBoard::new();
    let s = setup(vec![Arc::new(Typed::new(TodoWriteTool::new(
        board.clone(),
    )))]);
    let pipeline = s.pipeline().build();
    let bad = s
        .run(
            &pipeline,
            "c1",
            "todo_write",
            json!({"todos": [
                {"content": "write tests", "status": "in_progress"},
                {"content": "write tests", "status": "pending"},
                {"content": "  ", "status": "pending"},
                {"content": "ship", "status": "in_progress"}
            ]}),
        )
        .await;
    assert_eq!(bad.record().error_code(), Some(&ErrorCode::InvalidArgs));
    let shown = text(&bad);
    for problem in [
        "listed twice",
        "/todos/2/content",
        "2 items are in_progress",
    ] {
        assert!(shown.contains(problem), "{shown}");
    }
    assert!(board.items().is_empty());

    let good = s
        .run(
            &pipeline,
            "c2",
            "todo_write",
            json!({"todos": [
                {"content": "read the code", "status": "completed"},
                {"content": "write tests", "status": "in_progress"},
                {"content": "ship", "status": "pending"}
            ]}),
        )
        .await;
    assert_eq!(
        text(&good),
        "Todo list updated: 3 items (1 completed, 1 in progress, 1 pending)."
    );
    let expected = vec![
        TodoItem {
            content: "read the code".to_owned(),
            status: TodoStatus::Completed,
        },
        TodoItem {
            content: "write tests".to_owned(),
            status: TodoStatus::InProgress,
        },
        TodoItem {
            content: "ship".to_owned(),
            status: TodoStatus::Pending,
        },
    ];
    assert_eq!(board.items(), expected);
    assert_eq!(TodoBoard::from_events(&s.sink.events()).items(), expected);
    // An empty list clears the board.
    s.run(&pipeline, "c3", "todo_write", json!({"todos": []}))
        .await;
    assert!(TodoBoard::from_events(&s.sink.events()).items().is_empty());
}
