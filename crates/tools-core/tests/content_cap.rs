//! The cap on what a result shows the model, through the public API and a real JSONL log:
//! 3 MiB of text becomes a head, a marker and a tail under the cap in the one committed
//! record; the log line stays small; the whole text comes back from the store.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use toolrail_tools_core::CallArgs;

use serde_json::{Value, json};
use toolrail_session_log::{
    BoxFuture, ContentBlock, Effect, ErrorCode, EventData, EventSink, SessionId, SessionLog,
    ToolErrorInfo, ToolResultRecord, ToolSource,
    digest::digest_of,
    elided::ElidedBlock,
    event::{FORMAT_VERSION, SessionStart},
};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, PipelineConfig, RegistryBuilder, Tool, ToolContext,
    ToolFailure, ToolOutput, ToolResult, ToolSpec,
    pipeline::{BatchControl, DEFAULT_CONTENT_TEXT_CAP},
};

/// What `loud` answers with.
#[derive(Clone)]
enum Answer {
    Text(String),
    Failure(String),
    Json(Value),
}

/// A tool that reports an effect, then answers as told.
struct Loud {
    spec: ToolSpec,
    answer: Answer,
}

impl Tool for Loud {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a ToolContext,
        _args: &'a CallArgs,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            ctx.report_effect(written());
            match &self.answer {
                Answer::Text(text) => Ok(ToolOutput {
                    value: Some(json!({"lines": 3})),
                    ..ToolOutput::text(text.clone())
                }),
                Answer::Failure(message) => Err(ToolFailure::new(message.clone())),
                Answer::Json(value) => Ok(ToolOutput {
                    content: vec![
                        ContentBlock::text("summary"),
                        ContentBlock::Json {
                            value: value.clone(),
                        },
                    ],
                    value: None,
                    details: None,
                    concludes_turn: false,
                }),
            }
        })
    }
}

fn written() -> Effect {
    Effect::FileWritten {
        path: "/w/out.txt".into(),
        before: None,
        after: "sha256:after".into(),
    }
}

/// 3 MiB of numbered lines, with multi-byte characters so a cut could split one.
fn three_mib() -> String {
    let mut text = String::with_capacity(3 << 20);
    let mut n = 0;
    while text.len() < 3 << 20 {
        text.push_str(&format!("line {n:07} ✓ żółć\n"));
        n += 1;
    }
    text
}

struct Session {
    _dir: tempfile::TempDir,
    store: JsonlStore,
    log: Arc<dyn SessionLog>,
}

fn session() -> Session {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::Strict).unwrap();
    let log: Arc<dyn SessionLog> = Arc::new(
        store
            .create(SessionStart {
                format_version: FORMAT_VERSION,
                session_id: SessionId::new("cap"),
                tools: Vec::new(),
                meta: None,
            })
            .unwrap(),
    );
    Session {
        _dir: dir,
        store,
        log,
    }
}

async fn run(session: &Session, spec: ToolSpec, answer: Answer) -> CommittedResult {
    let name = spec.name().to_owned();
    let tool: Arc<dyn Tool> = Arc::new(Loud { spec, answer });
    let (registry, _) = RegistryBuilder::new()
        .external(ToolSource::Mcp("server".into()), tool)
        .build()
        .unwrap();
    let sink: Arc<dyn EventSink> = session.log.clone();
    let pipeline = Pipeline::builder(sink)
        .config(PipelineConfig::default())
        .build();
    let committed = pipeline
        .execute_one(
            &registry.snapshot(),
            CallRequest::new("c1", 0, name, "{}"),
            &BatchControl::default(),
        )
        .await
        .unwrap();
    session.log.barrier().await.unwrap();
    committed
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec::builder(name, "talks a lot", json!({"type": "object"})).build()
}

/// The `tool/result` line of the session file, as stored.
fn result_line(session: &Session) -> String {
    let path = session.store.path_of(&SessionId::new("cap")).unwrap();
    let file = std::fs::read_to_string(path).unwrap();
    file.lines()
        .find(|line| line.contains(r#""kind":"tool/result""#))
        .unwrap()
        .to_owned()
}

/// The committed record as the store reads it back.
fn read_back(session: &Session) -> Arc<ToolResultRecord> {
    let read = session.store.read(&SessionId::new("cap")).unwrap();
    read.events
        .iter()
        .find_map(|event| match &event.data {
            EventData::ToolResult(record) => Some(Arc::clone(record)),
            _ => None,
        })
        .unwrap()
}

fn marker(left_out: usize, whole: usize, digest: &str) -> String {
    format!(
        "\n[… {left_out} of {whole} bytes left out here; the whole text is kept beside the session log as {digest} …]\n"
    )
}

#[tokio::test]
async fn three_mib_of_text_is_cut_to_head_marker_and_tail_and_the_whole_is_kept_beside_the_log() {
    let session = session();
    let whole = three_mib();
    let committed = run(&session, spec("loud"), Answer::Text(whole.clone())).await;
    let record = &committed.record();

    // The model reads head + marker + tail, within the cap, cut between lines.
    let [ContentBlock::Text { text }] = record.content.as_slice() else {
        panic!("{:?}", record.content)
    };
    assert!(text.len() <= DEFAULT_CONTENT_TEXT_CAP, "{}", text.len());
    assert!(
        text.len() > DEFAULT_CONTENT_TEXT_CAP - 400,
        "{}",
        text.len()
    );
    let digest = digest_of(&serde_json::to_vec(&ContentBlock::text(whole.clone())).unwrap());
    let (head, rest) = text.split_once("\n[…").unwrap();
    let tail = &rest[rest.find("…]\n").unwrap() + "…]\n".len()..];
    assert!(
        whole.starts_with(head) && head.ends_with("żółć\n"),
        "{head}"
    );
    assert!(whole.ends_with(tail) && tail.starts_with("line "), "{tail}");
    let left_out = whole.len() - head.len() - tail.len();
    assert_eq!(
        text,
        &format!("{head}{}{tail}", marker(left_out, whole.len(), &digest))
    );

    // The rest of the record is untouched, and the record knows where the whole is.
    assert_eq!(
        record.as_ref(),
        &ToolResultRecord {
            content: record.content.clone(),
            value: Some(json!({"lines": 3})),
            effects: vec![written()],
            timing: record.timing,
            elided: vec![ElidedBlock {
                index: 0,
                bytes: whole.len() as u64,
                digest: digest.clone(),
                whole: Some(ContentBlock::text(whole.clone())),
            }],
            ..ToolResultRecord::success(Vec::new())
        }
    );

    // The log line is small: the whole block is a file beside the log, named by its digest.
    // (The content's JSON is longer than its text by the escaped line breaks.)
    let line = result_line(&session);
    let content_json = serde_json::to_string(&record.content).unwrap().len();
    assert!(line.len() < content_json + 1_000, "{}", line.len());
    assert!(
        !line.contains(r#""whole""#),
        "the line holds no whole block"
    );
    let path = session.store.path_of(&SessionId::new("cap")).unwrap();
    let blob = path.with_file_name(format!(
        "cap.blobs/{}.json",
        digest.trim_start_matches("sha256:")
    ));
    let kept: ContentBlock = serde_json::from_slice(&std::fs::read(blob).unwrap()).unwrap();
    assert_eq!(kept, ContentBlock::text(whole.clone()));

    // Reading the session gives back the record that was committed (invariant 10).
    assert_eq!(&read_back(&session), committed.record());
}

#[tokio::test]
async fn a_result_under_the_cap_is_untouched() {
    let session = session();
    let text = "x".repeat(DEFAULT_CONTENT_TEXT_CAP);
    let committed = run(&session, spec("loud"), Answer::Text(text.clone())).await;
    assert_eq!(
        committed.record().as_ref(),
        &ToolResultRecord {
            value: Some(json!({"lines": 3})),
            effects: vec![written()],
            timing: committed.record().timing,
            ..ToolResultRecord::success(vec![ContentBlock::text(text)])
        }
    );
    assert_eq!(&read_back(&session), committed.record());
}

#[tokio::test]
async fn an_error_of_three_mib_keeps_its_status_effects_and_error_text_form() {
    let session = session();
    let message = three_mib();
    let committed = run(&session, spec("loud"), Answer::Failure(message.clone())).await;
    let record = &committed.record();
    assert!(record.is_error());
    assert_eq!(record.error_code(), Some(&ErrorCode::ToolFailed));
    assert_eq!(record.effects, vec![written()]);
    // The model reads `Error: <message>`, and the message is the cut one: the record says
    // once what the model read.
    let ToolErrorInfo { message: cut, .. } = record.error.clone().unwrap();
    assert_eq!(
        record.content,
        vec![ContentBlock::text(format!("Error: {cut}"))]
    );
    assert!(record.text().len() <= DEFAULT_CONTENT_TEXT_CAP);
    assert!(
        cut.starts_with("line 0000000 ✓ żółć\n")
            && message.ends_with(cut.rsplit_once("…]\n").unwrap().1)
    );
    let whole = ContentBlock::text(format!("Error: {message}"));
    assert_eq!(
        record.elided,
        vec![ElidedBlock::new(0, whole)],
        "the whole error text is kept"
    );
    // The content and the message, each cut: nothing of the 3 MiB is in the line twice.
    let content_json = serde_json::to_string(&record.content).unwrap().len();
    assert!(result_line(&session).len() < 2 * content_json + 1_000);
    assert_eq!(&read_back(&session), committed.record());
}

#[tokio::test]
async fn a_tool_may_lower_the_cap_and_json_blocks_count_as_their_text() {
    let session = session();
    let value = json!({"rows": (0..2_000).map(|n| json!({"n": n, "name": format!("row {n}")})).collect::<Vec<_>>()});
    let committed = run(
        &session,
        spec("rows")
            .into_builder()
            .max_content_text_bytes(1_000)
            .build(),
        Answer::Json(value.clone()),
    )
    .await;
    let record = &committed.record();
    assert_eq!(record.content[0], ContentBlock::text("summary"));
    let cut = record.content[1].as_text().unwrap();
    assert!(cut.len() + "summary".len() <= 1_000, "{}", cut.len());
    assert!(cut.starts_with(r#"{"rows":[{"n":0,"#), "{cut}");
    assert_eq!(
        record.elided,
        vec![ElidedBlock::new(1, ContentBlock::Json { value })]
    );
    assert_eq!(&read_back(&session), committed.record());
}
