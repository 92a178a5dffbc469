//! `ProviderClient::stream`: deltas arrive as the server sends them, build exactly the
//! message the client returns, are declared void when a broken stream is tried again, and
//! the sampling options reach both wire formats.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use support::{FakeServer, Reply, fixture};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{ModelClient, ModelDelta, ModelRequest, ToolDefinition};
use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, RetryPolicy, ToolChoice, Wire};
use toolrail_session_log::{ContentBlock, ConversationItem, event::AssistantBlock};

fn config(wire: Wire, server: &FakeServer) -> ProviderConfig {
    let base = match wire {
        Wire::OpenAi => format!("{}/v1", server.url),
        Wire::Anthropic => server.url.clone(),
    };
    let mut config = ProviderConfig::new(wire, base, "test-model");
    config.api_key = ApiKey::None;
    config.retry = RetryPolicy {
        attempts: 3,
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
    };
    config
}

fn request() -> ModelRequest {
    ModelRequest {
        system: None,
        messages: std::sync::Arc::new(vec![ConversationItem::User(vec![ContentBlock::text(
            "Go.",
        )])]),
        tools: std::sync::Arc::new([ToolDefinition {
            name: "read".to_owned(),
            description: "Read a file.".to_owned(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]),
    }
}

/// Every delta, with when it arrived.
#[derive(Default)]
struct Seen(Mutex<Vec<(Instant, ModelDelta)>>);

impl Seen {
    fn deltas(&self) -> Vec<ModelDelta> {
        self.0
            .lock()
            .iter()
            .map(|(_, delta)| delta.clone())
            .collect()
    }
}

fn sink(seen: &Arc<Seen>) -> impl Fn(ModelDelta) + Send + Sync + use<> {
    let seen = Arc::clone(seen);
    move |delta| seen.0.lock().push((Instant::now(), delta))
}

#[tokio::test]
async fn deltas_arrive_as_sent_and_build_the_returned_message() {
    for (wire, name) in [
        (Wire::OpenAi, "openai/parallel_tool_calls.sse"),
        (Wire::Anthropic, "anthropic/parallel_tool_uses.sse"),
    ] {
        let server = FakeServer::start(vec![Reply::stream(&fixture(name))]).await;
        let client = ProviderClient::new(config(wire, &server)).unwrap();
        let seen = Arc::new(Seen::default());
        let deltas = sink(&seen);
        let response = client
            .stream(&request(), &CancellationToken::new(), &deltas)
            .await
            .unwrap();
        let deltas = seen.deltas();
        let text: String = deltas
            .iter()
            .filter_map(|delta| match delta {
                ModelDelta::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let message_text: String = response
            .message
            .blocks
            .iter()
            .filter_map(|block| match block {
                AssistantBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(!text.is_empty(), "{name}: the text streamed");
        assert_eq!(text, message_text, "{name}");
        // Each call: started once, in order, with its arguments as the fragments that grew it.
        let calls = response.message.tool_calls();
        for (index, call) in calls.iter().enumerate() {
            let index = u32::try_from(index).unwrap();
            let started: Vec<_> = deltas
                .iter()
                .filter_map(|delta| match delta {
                    ModelDelta::ToolCallStarted {
                        index: at,
                        call_id,
                        name,
                    } if *at == index => Some((call_id.clone(), name.clone())),
                    _ => None,
                })
                .collect();
            assert_eq!(
                started,
                [(call.call_id.to_string(), call.name.to_owned())],
                "{name}"
            );
            let arguments: String = deltas
                .iter()
                .filter_map(|delta| match delta {
                    ModelDelta::ToolCallArguments {
                        index: at,
                        fragment,
                    } if *at == index => Some(fragment.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(arguments, call.arguments_raw, "{name}");
        }
        assert!(
            !deltas
                .iter()
                .any(|delta| matches!(delta, ModelDelta::Restarted { .. })),
            "{name}: nothing was tried again"
        );
    }
}

#[tokio::test]
async fn the_first_delta_arrives_while_the_server_is_still_sending() {
    let words: Vec<Vec<u8>> = ["Hel", "lo, ", "wor", "ld."]
        .iter()
        .map(|word| {
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": null}]})
            )
            .into_bytes()
        })
        .chain(std::iter::once(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
                .to_vec(),
        ))
        .collect();
    // The server holds the rest of its answer back until the first delta reached the sink:
    // a client that waited for the whole answer would never get it.
    let gate = Arc::new(tokio::sync::Notify::new());
    let server = FakeServer::start(vec![Reply {
        pieces: words,
        gate: Some(Arc::clone(&gate)),
        ..Reply::stream(b"")
    }])
    .await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let seen = Arc::new(Seen::default());
    let sink = {
        let seen = Arc::clone(&seen);
        move |delta: ModelDelta| {
            if seen.0.lock().is_empty() {
                gate.notify_one();
            }
            seen.0.lock().push((Instant::now(), delta));
        }
    };
    let response = client
        .stream(&request(), &CancellationToken::new(), &sink)
        .await
        .unwrap();
    let texts: Vec<String> = seen
        .deltas()
        .into_iter()
        .filter_map(|delta| match delta {
            ModelDelta::Text(text) => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Hel", "lo, ", "wor", "ld."]);
    assert_eq!(
        response.message.stop_reason,
        toolrail_session_log::event::StopReason::EndTurn
    );
}

#[tokio::test]
async fn a_stream_broken_after_some_text_is_tried_again_and_its_deltas_declared_void() {
    let broken = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Half an ans\"}}\n\n\
event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let server = FakeServer::start(vec![
        Reply::stream(broken.as_bytes()),
        Reply::stream(&fixture("anthropic/parallel_tool_uses.sse")),
    ])
    .await;
    let client = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let seen = Arc::new(Seen::default());
    let deltas = sink(&seen);
    let response = client
        .stream(&request(), &CancellationToken::new(), &deltas)
        .await
        .unwrap();
    let deltas = seen.deltas();
    let restarted = deltas
        .iter()
        .position(|delta| matches!(delta, ModelDelta::Restarted { attempt: 2, .. }))
        .expect("the second try was announced");
    assert_eq!(deltas[0], ModelDelta::Text("Half an ans".to_owned()));
    assert!(restarted > 0);
    let after: String = deltas[restarted + 1..]
        .iter()
        .filter_map(|delta| match delta {
            ModelDelta::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(!after.contains("Half an ans"));
    assert_eq!(response.message.tool_calls().len(), 3);
}

#[tokio::test]
async fn sampling_options_reach_both_wire_formats() {
    for (wire, name) in [
        (Wire::OpenAi, "openai/parallel_tool_calls.sse"),
        (Wire::Anthropic, "anthropic/parallel_tool_uses.sse"),
    ] {
        let server = FakeServer::start(vec![
            Reply::stream(&fixture(name)),
            Reply::stream(&fixture(name)),
        ])
        .await;
        let mut config = config(wire, &server);
        config.temperature = Some(0.25);
        config.top_p = Some(0.5);
        config.max_tokens = Some(321);
        config.tool_choice = ToolChoice::Tool("read".to_owned());
        config.extra_body.insert("seed".to_owned(), json!(7));
        let client = ProviderClient::new(config).unwrap();
        client
            .complete(&request(), &CancellationToken::new())
            .await
            .unwrap();
        let body = &server.seen()[0].body;
        assert_eq!(body["temperature"], json!(0.25), "{name}");
        assert_eq!(body["top_p"], json!(0.5), "{name}");
        assert_eq!(body["max_tokens"], json!(321), "{name}");
        assert_eq!(body["seed"], json!(7), "{name}: extra fields are merged");
        let expected_choice = match wire {
            Wire::OpenAi => json!({"type": "function", "function": {"name": "read"}}),
            Wire::Anthropic => json!({"type": "tool", "name": "read"}),
        };
        assert_eq!(body["tool_choice"], expected_choice, "{name}");

        // Without tools offered, no tool choice is sent (the servers refuse one).
        let mut bare = request();
        bare.tools = std::sync::Arc::new([]);
        client
            .complete(&bare, &CancellationToken::new())
            .await
            .unwrap();
        let body = &server.seen()[1].body;
        assert_eq!(body.get("tool_choice"), None, "{name}");
    }
}
