//! The span builder through a real session: spans go through the same bounded queue as an
//! OTLP export, to the SDK's in-memory exporter, and the tests read the tree back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::SpanId;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use toolrail_session_log::CallId;
use toolrail_session_log::event::{AssistantBlock, AssistantMessage, StopReason};
use toolrail_tools_core::{ToolContext, ToolOutput, ToolResult, ToolSpec, Typed, TypedTool};

use super::genai::{Semconv, invoke_agent_span_name, name};
use super::{Counters, ExportReport, Telemetry, export, feed};
use crate::config::TelemetryConfig;
use crate::scenario::ScriptedModel;
use crate::{Agent, AgentBuilder, PresetName, Store};

/// Telemetry exporting to memory through the bounded queue `config` describes.
fn in_memory(config: &TelemetryConfig) -> (Telemetry, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let counters = Arc::new(Counters::default());
    let tracers = export::bounded_tracers(
        exporter.clone(),
        config,
        &counters,
        Resource::builder().build(),
    );
    let telemetry = Telemetry::with_providers(
        tracers,
        SdkMeterProvider::builder().build(),
        config,
        Semconv::LatestExperimental,
        counters,
    );
    (telemetry, exporter)
}

/// What became of the spans once every ended one is exported (a flush, not a shutdown:
/// the in-memory exporter forgets its spans when shut down).
fn flushed(telemetry: &Telemetry) -> ExportReport {
    feed::drain(&telemetry.feeds);
    telemetry.tracers.force_flush().unwrap();
    telemetry.report()
}

/// A parallel-safe tool that waits `0` and answers "ok", under the name it is given.
struct Wait(&'static str, Duration);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

impl TypedTool for Wait {
    type Args = NoArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<NoArgs>(self.0, "Waits, then answers ok.")
            .read_only()
            .parallel_safe()
            .build()
    }

    async fn run(&self, _ctx: &ToolContext, _args: NoArgs) -> ToolResult {
        if !self.1.is_zero() {
            tokio::time::sleep(self.1).await;
        }
        Ok(ToolOutput::text("ok"))
    }
}

/// One assistant message calling `(id, tool)` with no arguments.
fn calls(calls: &[(&str, &str)]) -> AssistantMessage {
    AssistantMessage {
        blocks: calls
            .iter()
            .map(|(id, name)| AssistantBlock::ToolCall {
                call_id: CallId::from(*id),
                name: (*name).to_owned(),
                arguments_raw: "{}".to_owned(),
            })
            .collect(),
        stop_reason: StopReason::ToolCalls,
    }
}

/// A session with the tools `noop` (instant), `slow` (2 ms) and `refused` (denied by a
/// rule), answered by `script`, exporting through `telemetry`.
fn session(
    folder: &tempfile::TempDir,
    script: Vec<AssistantMessage>,
    telemetry: &Telemetry,
) -> AgentBuilder {
    Agent::builder()
        .workspace([folder.path()])
        .store(Store::jsonl(folder.path().join("sessions")).unwrap())
        .session_id("s1")
        .model_client(Arc::new(ScriptedModel::new(script)))
        .tools(Vec::<String>::new())
        .tool(Typed::new(Wait("noop", Duration::ZERO)))
        .tool(Typed::new(Wait("slow", Duration::from_millis(2))))
        .tool(Typed::new(Wait("refused", Duration::ZERO)))
        .preset(PresetName::FullAuto)
        .deny("refused")
        .telemetry(telemetry.clone())
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

fn the<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let mut found = spans.iter().filter(|span| span.name == name);
    let span = found.next().unwrap_or_else(|| panic!("no {name} span"));
    assert!(found.next().is_none(), "more than one {name} span");
    span
}

fn call<'a>(spans: &'a [SpanData], id: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| attribute(span, "gen_ai.tool.call.id").as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no span of call {id}"))
}

/// The names of `parent`'s children, sorted.
fn children(spans: &[SpanData], parent: &SpanData) -> Vec<String> {
    let mut names: Vec<String> = spans
        .iter()
        .filter(|span| span.parent_span_id == parent.span_context.span_id())
        .map(|span| span.name.to_string())
        .collect();
    names.sort();
    names
}

fn all_phases() -> TelemetryConfig {
    TelemetryConfig {
        phase_spans_min_ms: 0,
        ..TelemetryConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_two_parallel_calls_is_two_siblings_under_the_batch_span() {
    let folder = tempfile::tempdir().unwrap();
    // No call of this test takes an hour: none gets phase spans.
    let config = TelemetryConfig {
        phase_spans_min_ms: 3_600_000,
        ..TelemetryConfig::default()
    };
    let (telemetry, exporter) = in_memory(&config);
    let agent = session(
        &folder,
        vec![calls(&[("a", "noop"), ("b", "noop")])],
        &telemetry,
    )
    .build()
    .await
    .unwrap();
    agent.prompt("go").await.unwrap();
    assert_eq!(flushed(&telemetry).dropped, 0);
    let spans = exporter.get_finished_spans().unwrap();

    let turn = the(&spans, &invoke_agent_span_name());
    let batch = the(&spans, name::BATCH);
    assert_eq!(turn.parent_span_id, SpanId::INVALID);
    assert_eq!(batch.parent_span_id, turn.span_context.span_id());
    assert_eq!(
        children(&spans, batch),
        ["execute_tool noop", "execute_tool noop"]
    );
    assert_eq!(
        attribute(batch, "toolrail.batch.calls").as_deref(),
        Some("2")
    );
    for id in ["a", "b"] {
        let span = call(&spans, id);
        assert_eq!(span.span_context.trace_id(), turn.span_context.trace_id());
        assert_eq!(attribute(span, "error.type"), None);
        // Calls shorter than the threshold get no phase spans.
        assert_eq!(children(&spans, span), Vec::<String>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_has_its_error_type_and_no_run_phase() {
    let folder = tempfile::tempdir().unwrap();
    let (telemetry, exporter) = in_memory(&all_phases());
    let agent = session(&folder, vec![calls(&[("r", "refused")])], &telemetry)
        .build()
        .await
        .unwrap();
    agent.prompt("go").await.unwrap();
    flushed(&telemetry);
    let spans = exporter.get_finished_spans().unwrap();

    let refused = call(&spans, "r");
    assert_eq!(refused.name, "execute_tool refused");
    assert_eq!(
        attribute(refused, "error.type").as_deref(),
        Some("POLICY_DENIED")
    );
    assert!(matches!(
        refused.status,
        opentelemetry::trace::Status::Error { .. }
    ));
    let events: Vec<&str> = refused.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events, [name::EVENT_DENIED]);
    // The rule was the permissions hook's: the event names it.
    let by = refused.events[0]
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "toolrail.by")
        .map(|kv| kv.value.to_string());
    assert_eq!(by.as_deref(), Some("permissions"));
    let phases = children(&spans, refused);
    assert!(
        phases.iter().all(|phase| phase == name::PHASE_POLICY),
        "a refused call ran: {phases:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_threshold_has_its_phases_as_children_in_order() {
    let folder = tempfile::tempdir().unwrap();
    let (telemetry, exporter) = in_memory(&TelemetryConfig::default());
    let agent = session(&folder, vec![calls(&[("s", "slow")])], &telemetry)
        .build()
        .await
        .unwrap();
    agent.prompt("go").await.unwrap();
    flushed(&telemetry);
    let spans = exporter.get_finished_spans().unwrap();

    let slow = call(&spans, "s");
    let mut phases: Vec<&SpanData> = spans
        .iter()
        .filter(|span| span.parent_span_id == slow.span_context.span_id())
        .collect();
    phases.sort_by_key(|span| span.start_time);
    let names: Vec<&str> = phases.iter().map(|span| span.name.as_ref()).collect();
    assert!(names.contains(&name::PHASE_RUN), "{names:?}");
    let order = [
        name::PHASE_POLICY,
        name::PHASE_QUEUED,
        name::PHASE_RUN,
        name::PHASE_COMMIT_WAIT,
    ];
    let ranks: Vec<usize> = names
        .iter()
        .map(|name| order.iter().position(|known| known == name).unwrap())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    for phase in &phases {
        assert!(
            phase.start_time >= slow.start_time && phase.end_time <= slow.end_time,
            "{} outside its call: {:?}",
            phase.name,
            [
                slow.start_time,
                phase.start_time,
                phase.end_time,
                slow.end_time
            ]
        );
        assert!(phase.start_time < phase.end_time);
    }
    for pair in phases.windows(2) {
        assert!(pair[0].end_time <= pair[1].start_time, "phases overlap");
    }
    let run = phases
        .iter()
        .find(|span| span.name == name::PHASE_RUN)
        .unwrap();
    let ran = run.end_time.duration_since(run.start_time).unwrap();
    // The 2 ms sleep, less at most the millisecond the log's commit time is rounded down by.
    assert!(ran >= Duration::from_millis(1), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_links_its_next_turn_to_the_interrupted_one() {
    let folder = tempfile::tempdir().unwrap();
    let (telemetry, exporter) = in_memory(&TelemetryConfig::default());
    let agent = session(&folder, vec![calls(&[("a", "noop")])], &telemetry)
        .build()
        .await
        .unwrap();
    agent.prompt("go").await.unwrap();
    drop(agent);

    // A crash just after the call was recorded: the log ends at its `tool/call`.
    let log = std::fs::read_dir(folder.path().join("sessions"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: String = text
        .split_inclusive('\n')
        .take_while(|line| !line.contains("\"tool/start\"") && !line.contains("\"tool/result\""))
        .collect();
    assert!(kept.contains("\"tool/call\""), "{kept}");
    std::fs::write(&log, kept).unwrap();
    let store = Store::jsonl(folder.path().join("sessions")).unwrap();
    let interrupted = store
        .read(&"s1".into())
        .unwrap()
        .into_iter()
        .find_map(|event| match event.data {
            toolrail_session_log::EventData::TurnStart(start) => start.trace,
            _ => None,
        })
        .expect("the interrupted turn's span ids are in its turn/start");
    // The first session's spans are out of the way before the resumed one's are read.
    flushed(&telemetry);
    exporter.reset();

    let resumed = session(&folder, vec![], &telemetry)
        .resume(&store, &"s1".into())
        .await
        .unwrap();
    resumed.agent.prompt("go on").await.unwrap();
    flushed(&telemetry);
    let spans = exporter.get_finished_spans().unwrap();

    let linked = |span: &SpanData| {
        span.links.links.iter().any(|link| {
            link.span_context.trace_id().to_bytes() == interrupted.trace_id
                && link.span_context.span_id().to_bytes() == interrupted.span_id
        })
    };
    let turn = the(&spans, &invoke_agent_span_name());
    assert!(linked(turn), "{:?}", turn.links);
    assert_ne!(
        turn.span_context.trace_id().to_bytes(),
        interrupted.trace_id,
        "the new turn is a trace of its own, linked"
    );
    let recovery = the(&spans, name::RECOVERY);
    assert!(linked(recovery), "{:?}", recovery.links);
    let events: Vec<&str> = recovery.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events, [name::EVENT_RECOVERY_REPAIRED]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_thousand_calls_drops_nothing() {
    // Under the defaults, and with every call's phases too (five spans a call).
    for config in [TelemetryConfig::default(), all_phases()] {
        let folder = tempfile::tempdir().unwrap();
        let (telemetry, exporter) = in_memory(&config);
        let ids: Vec<String> = (0..1_000).map(|n| format!("c{n}")).collect();
        let burst: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "noop")).collect();
        let agent = session(&folder, vec![calls(&burst)], &telemetry)
            .build()
            .await
            .unwrap();
        agent.prompt("go").await.unwrap();
        let report = flushed(&telemetry);
        let spans = exporter.get_finished_spans().unwrap();
        let executed = spans
            .iter()
            .filter(|span| span.name == "execute_tool noop")
            .count();
        assert_eq!(
            (report.dropped, report.failed, report.events_dropped),
            (0, 0, 0),
            "{config:?}"
        );
        assert_eq!(executed, 1_000, "{config:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_lost_cut_their_turn_short_and_the_next_turn_is_whole() {
    use std::collections::HashSet;
    use toolrail_session_log::{EventData, EventDraft};

    let folder = tempfile::tempdir().unwrap();
    let (recording, _) = in_memory(&TelemetryConfig::default());
    let script = vec![
        calls(&[("a", "noop"), ("b", "noop")]),
        ScriptedModel::text("one"),
    ];
    let agent = session(&folder, script, &recording).build().await.unwrap();
    agent.prompt("first").await.unwrap();
    agent.prompt("second").await.unwrap();
    drop(agent);
    let events = Store::jsonl(folder.path().join("sessions"))
        .unwrap()
        .read(&"s1".into())
        .unwrap();

    // The session's events handed to its telemetry thread, all but the first result: the
    // queue was full when it came.
    let lost = events
        .iter()
        .position(|event| matches!(event.data, EventData::ToolResult(_)))
        .unwrap();
    let next_turn = lost
        + events[lost..]
            .iter()
            .position(|event| matches!(event.data, EventData::TurnStart(_)))
            .unwrap();
    let (telemetry, exporter) = in_memory(&all_phases());
    let spans = super::spans::SessionSpans::new(
        &telemetry,
        "s1".into(),
        super::genai::ChatSettings::default(),
        toolrail_tools_core::Registry::empty(),
    );
    let (sender, handed) = std::sync::mpsc::sync_channel(events.len());
    for (seq, event) in events.iter().enumerate().filter(|(seq, _)| *seq != lost) {
        let draft = EventDraft {
            ts: event.ts,
            turn: event.turn,
            step: event.step,
            call_id: event.call_id.clone(),
            data: event.data.clone(),
        };
        sender
            .send(feed::Message::Event {
                seq: seq as u64,
                draft,
            })
            .unwrap();
    }
    drop(sender);
    feed::make_spans(spans, &handed, &telemetry.counters);
    let report = flushed(&telemetry);
    let spans = exporter.get_finished_spans().unwrap();

    // The rest of the first turn is skipped and counted; what it had open is cut short.
    assert_eq!(report.events_dropped, (next_turn - lost - 1) as u64);
    let turn = |number: &str| {
        spans
            .iter()
            .find(|span| {
                span.name == invoke_agent_span_name()
                    && attribute(span, "toolrail.turn").as_deref() == Some(number)
            })
            .unwrap_or_else(|| panic!("no turn {number}"))
    };
    let in_trace = |turn: &SpanData| -> Vec<&SpanData> {
        spans
            .iter()
            .filter(|span| span.span_context.trace_id() == turn.span_context.trace_id())
            .collect()
    };
    let cut: Vec<&str> = in_trace(turn("1"))
        .iter()
        .filter(|span| matches!(span.status, opentelemetry::trace::Status::Error { .. }))
        .map(|span| span.name.as_ref())
        .collect();
    let mut cut = cut;
    cut.sort_unstable();
    assert_eq!(
        cut,
        [
            "chat",
            "execute_tool noop",
            "execute_tool noop",
            invoke_agent_span_name().as_str(),
            name::BATCH
        ]
    );
    assert_eq!(in_trace(turn("1")).len(), 5, "no span after the gap");
    // The next turn is whole.
    let second = in_trace(turn("2"));
    assert_eq!(second.len(), 2);
    assert!(
        second
            .iter()
            .all(|span| !matches!(span.status, opentelemetry::trace::Status::Error { .. }))
    );
    // No span lost its parent.
    let ids: HashSet<SpanId> = spans
        .iter()
        .map(|span| span.span_context.span_id())
        .collect();
    for span in &spans {
        assert!(
            span.parent_span_id == SpanId::INVALID || ids.contains(&span.parent_span_id),
            "{} has no parent",
            span.name
        );
    }
}

/// A model whose answers name themselves as a server's do, `(response id, model)` per
/// request in order, or name nothing (`None`, as a server that sends no id).
struct Named(std::sync::Mutex<std::collections::VecDeque<Option<(&'static str, &'static str)>>>);

impl toolrail_agent_loop::ModelClient for Named {
    fn complete<'a>(
        &'a self,
        _request: &'a toolrail_agent_loop::ModelRequest,
        _cancel: &'a toolrail_tools_core::CancellationToken,
    ) -> toolrail_session_log::BoxFuture<
        'a,
        Result<toolrail_agent_loop::ModelResponse, toolrail_agent_loop::ModelError>,
    > {
        let named = self.0.lock().unwrap().pop_front().flatten();
        Box::pin(std::future::ready(Ok(toolrail_agent_loop::ModelResponse {
            message: ScriptedModel::text("done"),
            usage: None,
            response_id: named.map(|(id, _)| id.to_owned()),
            response_model: named.map(|(_, model)| model.to_owned()),
        })))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_span_carries_the_response_id_and_model_its_step_end_recorded() {
    use toolrail_session_log::EventData;

    let folder = tempfile::tempdir().unwrap();
    let (telemetry, exporter) = in_memory(&TelemetryConfig::default());
    let model = Named(std::sync::Mutex::new(
        [Some(("chatcmpl-42", "m-2026-01-01")), None].into(),
    ));
    let agent = session(&folder, Vec::new(), &telemetry)
        .model_client(Arc::new(model))
        .build()
        .await
        .unwrap();
    agent.prompt("first").await.unwrap();
    agent.prompt("second").await.unwrap();
    assert_eq!(flushed(&telemetry).dropped, 0);
    drop(agent);

    // The loop recorded what the server said in `step/end`, and only that.
    let recorded: Vec<(Option<String>, Option<String>)> =
        Store::jsonl(folder.path().join("sessions"))
            .unwrap()
            .read(&"s1".into())
            .unwrap()
            .into_iter()
            .filter_map(|event| match event.data {
                EventData::StepEnd(step) => Some((step.response_id, step.response_model)),
                _ => None,
            })
            .collect();
    assert_eq!(
        recorded,
        [
            (
                Some("chatcmpl-42".to_owned()),
                Some("m-2026-01-01".to_owned())
            ),
            (None, None)
        ]
    );

    let spans = exporter.get_finished_spans().unwrap();
    let mut chats: Vec<&SpanData> = spans
        .iter()
        .filter(|span| attribute(span, "gen_ai.operation.name").as_deref() == Some(name::CHAT))
        .collect();
    chats.sort_by_key(|span| span.start_time);
    let served = |span: &SpanData| {
        (
            attribute(span, "gen_ai.response.id"),
            attribute(span, "gen_ai.response.model"),
        )
    };
    assert_eq!(
        chats.iter().map(|span| served(span)).collect::<Vec<_>>(),
        [
            (
                Some("chatcmpl-42".to_owned()),
                Some("m-2026-01-01".to_owned())
            ),
            // A server that named nothing: no attribute, not an empty one.
            (None, None)
        ]
    );
}
