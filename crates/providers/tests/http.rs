//! `ProviderClient` against a fake server on 127.0.0.1 replaying recorded streams: what each
//! format's request carries (tools, the conversation with tool results, the key in its
//! header), retries on 429 and 5xx but not on 401, the server's words in every error, an
//! error mid-stream, a whole JSON answer to a streamed request, and cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{FakeServer, Reply, fixture};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{ModelClient, ModelError, ModelRequest, ToolDefinition};
use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, RetryPolicy, Secret, Wire};
use toolrail_session_log::{
    ContentBlock, ConversationItem, ToolResultRecord,
    event::{AssistantBlock, AssistantMessage, StopReason},
    message_calls::MessageCall,
};

fn config(wire: Wire, server: &FakeServer) -> ProviderConfig {
    let base = match wire {
        Wire::OpenAi => format!("{}/v1", server.url),
        Wire::Anthropic => server.url.clone(),
    };
    let mut config = ProviderConfig::new(wire, base, "test-model");
    config.api_key = ApiKey::Given(Secret::new("sk-test-123"));
    config.retry = RetryPolicy {
        attempts: 3,
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
    };
    config
}

/// A conversation with a tool call answered, one failed, and a context message.
fn request() -> ModelRequest {
    let failed =
        ToolResultRecord::failure(toolrail_session_log::ErrorCode::ToolFailed, "no such file");
    ModelRequest {
        system: Some("Be brief.".to_owned()),
        messages: std::sync::Arc::new(vec![
            ConversationItem::User(vec![ContentBlock::text("Read both files.")]),
            ConversationItem::Assistant(AssistantMessage {
                blocks: vec![
                    AssistantBlock::Text {
                        text: "Reading.".to_owned(),
                    },
                    AssistantBlock::ToolCall {
                        call_id: "c1".into(),
                        name: "read".to_owned(),
                        arguments_raw: r#"{"path":"a.rs"}"#.to_owned(),
                    },
                    AssistantBlock::ToolCall {
                        call_id: "c2".into(),
                        name: "read".to_owned(),
                        arguments_raw: r#"{"path":"b.rs"}"#.to_owned(),
                    },
                ],
                stop_reason: StopReason::ToolCalls,
            }),
            ConversationItem::ToolResult {
                call_id: "c1".into(),
                record: Arc::new(ToolResultRecord::success(vec![ContentBlock::text(
                    "fn a() {}",
                )])),
            },
            ConversationItem::ToolResult {
                call_id: "c2".into(),
                record: Arc::new(failed),
            },
            ConversationItem::Context {
                source: "hook".to_owned(),
                content: vec![ContentBlock::text("b.rs was moved.")],
            },
        ]),
        tools: std::sync::Arc::new([ToolDefinition {
            name: "read".to_owned(),
            description: "Read a file.".to_owned(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }]),
    }
}

async fn complete(
    client: &ProviderClient,
) -> Result<toolrail_agent_loop::ModelResponse, ModelError> {
    client.complete(&request(), &CancellationToken::new()).await
}

#[tokio::test]
async fn openai_request_carries_tools_results_and_key_and_the_stream_becomes_the_message() {
    let server = FakeServer::start(vec![Reply::stream(&fixture(
        "openai/parallel_tool_calls.sse",
    ))])
    .await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let response = complete(&client).await.unwrap();
    assert_eq!(response.message.stop_reason, StopReason::ToolCalls);
    assert_eq!(response.message.tool_calls().len(), 2);
    assert_eq!(response.response_id.as_deref(), Some("chatcmpl-1"));
    assert_eq!(response.response_model.as_deref(), Some("m"));
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-test-123"));
    assert_eq!(
        seen[0].body,
        json!({
            "model": "test-model",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Read both files."},
                {"role": "assistant", "content": "Reading.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"b.rs\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "fn a() {}"},
                {"role": "tool", "tool_call_id": "c2", "content": "Error: no such file"},
                {"role": "user", "content": "b.rs was moved."}
            ],
            "tools": [{"type": "function", "function": {
                "name": "read", "description": "Read a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
            }}]
        })
    );
}

#[tokio::test]
async fn anthropic_request_puts_results_in_one_user_message_with_is_error() {
    let server = FakeServer::start(vec![Reply::stream(&fixture(
        "anthropic/parallel_tool_uses.sse",
    ))])
    .await;
    let client = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let response = complete(&client).await.unwrap();
    assert_eq!(response.message.tool_calls().len(), 3);
    assert_eq!(response.response_id.as_deref(), Some("msg_1"));
    assert_eq!(response.response_model.as_deref(), Some("m"));
    let seen = &server.seen()[0];
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("x-api-key"), Some("sk-test-123"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        seen.body,
        json!({
            "model": "test-model",
            "max_tokens": 4096,
            "stream": true,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Read both files."}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a.rs"}},
                    {"type": "tool_use", "id": "c2", "name": "read", "input": {"path": "b.rs"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "fn a() {}"}]},
                    {"type": "tool_result", "tool_use_id": "c2", "is_error": true,
                     "content": [{"type": "text", "text": "Error: no such file"}]},
                    {"type": "text", "text": "b.rs was moved."}
                ]}
            ],
            "tools": [{"name": "read", "description": "Read a file.",
                       "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
        })
    );
}

/// A message whose second call repeated the first one's id: the model's next request names
/// the calls and answers them under the ids the log has (`c1`, `c1-dup2`), on both wires.
#[tokio::test]
async fn a_repeated_call_id_goes_back_under_the_id_its_result_has() {
    let mut request = request();
    let ConversationItem::Assistant(message) =
        &mut std::sync::Arc::make_mut(&mut request.messages)[1]
    else {
        panic!("the second item is the assistant message");
    };
    let AssistantBlock::ToolCall { call_id, .. } = &mut message.blocks[2] else {
        panic!("the third block is the second call");
    };
    *call_id = "c1".into();
    let ConversationItem::ToolResult { call_id, .. } =
        &mut std::sync::Arc::make_mut(&mut request.messages)[3]
    else {
        panic!("the fourth item is the second result");
    };
    *call_id = "c1-dup2".into();
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let fixture_name = match wire {
            Wire::OpenAi => "openai/parallel_tool_calls.sse",
            Wire::Anthropic => "anthropic/parallel_tool_uses.sse",
        };
        let server = FakeServer::start(vec![Reply::stream(&fixture(fixture_name))]).await;
        let client = ProviderClient::new(config(wire, &server)).unwrap();
        client
            .complete(&request, &CancellationToken::new())
            .await
            .unwrap();
        let body = &server.seen()[0].body;
        let (asked, answered): (Vec<&str>, Vec<&str>) = match wire {
            Wire::OpenAi => (
                body["messages"][2]["tool_calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|call| call["id"].as_str().unwrap())
                    .collect(),
                (3..5)
                    .map(|at| body["messages"][at]["tool_call_id"].as_str().unwrap())
                    .collect(),
            ),
            Wire::Anthropic => (
                body["messages"][1]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|block| block.get("id").and_then(|id| id.as_str()))
                    .collect(),
                body["messages"][2]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|block| block.get("tool_use_id").and_then(|id| id.as_str()))
                    .collect(),
            ),
        };
        assert_eq!(asked, ["c1", "c1-dup2"], "{wire:?}: {body}");
        assert_eq!(answered, ["c1", "c1-dup2"], "{wire:?}: {body}");
    }
}

#[tokio::test]
async fn a_429_is_tried_again_and_then_succeeds() {
    let server = FakeServer::start(vec![
        Reply::json(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"rate_limit"}}"#,
        )
        .header("retry-after", "0"),
        Reply::stream(&fixture("openai/parallel_tool_calls.sse")),
    ])
    .await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let response = complete(&client).await.unwrap();
    assert_eq!(response.message.stop_reason, StopReason::ToolCalls);
    assert_eq!(server.seen().len(), 2);
}

/// A 200 that is a web page (a proxy's, a login's) fails at once naming its content type:
/// trying again would fetch the same page.
#[tokio::test]
async fn a_200_that_is_not_a_stream_or_json_fails_at_once_naming_its_content_type() {
    let page = Reply {
        headers: vec![("content-type".into(), "text/html; charset=utf-8".into())],
        ..Reply::json(200, "<html><body>Sign in to continue</body></html>")
    };
    let server = FakeServer::start(vec![page.clone(), page.clone(), page]).await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let ModelError::Failed(failure) = complete(&client).await.unwrap_err() else {
        panic!("not a failure");
    };
    assert!(
        failure
            .message
            .contains("content type `text/html; charset=utf-8`"),
        "{}",
        failure.message
    );
    assert_eq!(server.seen().len(), 1, "not tried again");
    assert_eq!(failure.status, Some(200));
    assert!(!failure.retryable, "the same address gives the same page");
}

/// `Retry-After` is read in both its forms, and a wait longer than the client's cap is not
/// waited for: the request fails at once, saying how long the server asked.
#[tokio::test]
async fn a_retry_after_past_the_cap_in_seconds_or_as_a_date_fails_at_once_saying_so() {
    for (asked, said) in [
        ("3600", "asked to wait 3600 s"),
        ("Fri, 01 Jan 2100 00:00:00 GMT", "asked to wait"),
    ] {
        let limited = Reply::json(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"rate_limit"}}"#,
        )
        .header("retry-after", asked);
        let server = FakeServer::start(vec![
            limited,
            Reply::stream(&fixture("openai/parallel_tool_calls.sse")),
        ])
        .await;
        let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
        let ModelError::Failed(failure) = complete(&client).await.unwrap_err() else {
            panic!("not a failure");
        };
        assert!(
            failure.message.contains(said),
            "{asked}: {}",
            failure.message
        );
        assert!(
            failure.message.contains("Rate limit reached"),
            "{}",
            failure.message
        );
        assert!(failure.retryable, "it may pass later");
        assert_eq!(server.seen().len(), 1, "{asked}: not tried again");
    }
    // A date already past is no wait: tried again at once, and it succeeds.
    let server = FakeServer::start(vec![
        Reply::json(429, r#"{"error":{"message":"busy"}}"#)
            .header("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT"),
        Reply::stream(&fixture("openai/parallel_tool_calls.sse")),
    ])
    .await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    assert!(complete(&client).await.is_ok());
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_401_is_not_tried_again_and_says_what_the_server_said() {
    let server = FakeServer::start(vec![
        Reply::json(
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        )
        .header("request-id", "req_0042"),
    ])
    .await;
    let client = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let ModelError::Failed(failure) = complete(&client).await.unwrap_err() else {
        panic!("not a failure");
    };
    let message = &failure.message;
    assert!(message.contains("401 Unauthorized"), "{message}");
    assert!(message.contains("invalid x-api-key"), "{message}");
    assert!(message.contains("request id req_0042"), "{message}");
    assert!(
        !message.contains("sk-test-123"),
        "the key never shows: {message}"
    );
    // The same facts, typed, for programs that decide what to do.
    assert_eq!(failure.status, Some(401));
    assert!(!failure.retryable, "a refused key does not pass by waiting");
    assert_eq!(failure.request_id.as_deref(), Some("req_0042"));
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn server_errors_are_tried_up_to_the_limit_then_reported() {
    let server = FakeServer::start(vec![
        Reply::json(503, r#"{"error":{"message":"overloaded"}}"#),
        Reply::json(500, r#"{"error":{"message":"boom"}}"#),
        Reply::json(503, r#"{"error":{"message":"still overloaded"}}"#),
    ])
    .await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let ModelError::Failed(failure) = complete(&client).await.unwrap_err() else {
        panic!("not a failure");
    };
    let message = &failure.message;
    assert!(message.contains("still overloaded"), "{message}");
    assert!(message.contains("gave up after 3 tries"), "{message}");
    assert_eq!(failure.status, Some(503));
    assert!(failure.retryable, "an overloaded server may answer later");
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn a_passing_error_mid_stream_is_tried_again_and_a_lasting_one_is_reported() {
    let server = FakeServer::start(vec![
        Reply::stream(&fixture("anthropic/error_mid_stream.sse")),
        Reply::stream(&fixture("anthropic/parallel_tool_uses.sse")),
    ])
    .await;
    let client = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let response = complete(&client).await.unwrap();
    assert_eq!(response.message.tool_calls().len(), 3);
    assert_eq!(server.seen().len(), 2, "overloaded mid-stream: tried again");
    let lasting = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long\"}}\n\n";
    let server = FakeServer::start(vec![Reply::stream(lasting.as_bytes())]).await;
    let client = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let ModelError::Failed(failure) = complete(&client).await.unwrap_err() else {
        panic!("not a failure");
    };
    let message = &failure.message;
    assert!(
        message.contains("invalid_request_error: prompt is too long"),
        "{message}"
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_redirect_is_not_followed_so_the_key_stays_where_it_was_sent() {
    let server = FakeServer::start(vec![Reply {
        status: 307,
        headers: vec![("location".into(), "http://127.0.0.1:9/elsewhere".into())],
        pieces: Vec::new(),
        pause: Duration::ZERO,
        gate: None,
        before_head: Duration::ZERO,
    }])
    .await;
    let client = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let ModelError::Failed(failure) = complete(&client).await.unwrap_err() else {
        panic!("not a failure");
    };
    let message = &failure.message;
    assert!(message.contains("redirect"), "{message}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_whole_json_answer_to_a_streamed_request_is_read_too() {
    let server = FakeServer::start(vec![
        Reply::json(
            200,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\": \"x\"}"}}]},"finish_reason":"tool_calls"}]}"#,
        ),
        Reply::json(
            200,
            r#"{"type":"message","content":[{"type":"text","text":"Sure."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"x"}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}"#,
        ),
    ])
    .await;
    let response = complete(&ProviderClient::new(config(Wire::OpenAi, &server)).unwrap())
        .await
        .unwrap();
    assert_eq!(
        response.message.tool_calls(),
        [MessageCall {
            call_id: "call_1".into(),
            name: "read",
            arguments_raw: r#"{"path": "x"}"#,
            repeated_id: None
        }]
    );
    let response = complete(&ProviderClient::new(config(Wire::Anthropic, &server)).unwrap())
        .await
        .unwrap();
    assert_eq!(response.message.stop_reason, StopReason::ToolCalls);
    assert_eq!(
        response.message.tool_calls(),
        [MessageCall {
            call_id: "toolu_1".into(),
            name: "read",
            arguments_raw: r#"{"path":"x"}"#,
            repeated_id: None
        }]
    );
}

#[tokio::test]
async fn a_whole_json_answer_s_id_and_model_are_read_and_absent_ones_stay_absent() {
    let server = FakeServer::start(vec![
        Reply::json(
            200,
            r#"{"id":"chatcmpl-7","object":"chat.completion","model":"gpt-x-2026-01-01","choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}]}"#,
        ),
        Reply::json(
            200,
            r#"{"id":"msg_7","type":"message","role":"assistant","model":"claude-x-20260101","content":[{"type":"text","text":"Hi."}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":4}}"#,
        ),
        Reply::json(
            200,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}]}"#,
        ),
        Reply::json(
            200,
            r#"{"type":"message","content":[{"type":"text","text":"Hi."}],"stop_reason":"end_turn"}"#,
        ),
    ])
    .await;
    let served = |response: &toolrail_agent_loop::ModelResponse| {
        (
            response.response_id.clone(),
            response.response_model.clone(),
        )
    };
    let named = |id: &str, model: &str| (Some(id.to_owned()), Some(model.to_owned()));
    let openai = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let anthropic = ProviderClient::new(config(Wire::Anthropic, &server)).unwrap();
    let response = complete(&openai).await.unwrap();
    assert_eq!(response.message.text(), "Hi.");
    assert_eq!(served(&response), named("chatcmpl-7", "gpt-x-2026-01-01"));
    let response = complete(&anthropic).await.unwrap();
    assert_eq!(response.message.text(), "Hi.");
    assert_eq!(served(&response), named("msg_7", "claude-x-20260101"));
    // Neither names the answer: nothing is made up.
    let response = complete(&openai).await.unwrap();
    assert_eq!(served(&response), (None, None));
    let response = complete(&anthropic).await.unwrap();
    assert_eq!(served(&response), (None, None));
}

#[tokio::test]
async fn cancelling_a_slow_stream_answers_cancelled_at_once() {
    let bytes = fixture("openai/parallel_tool_calls.sse");
    let server = FakeServer::start(vec![Reply {
        pieces: bytes.chunks(40).map(<[u8]>::to_vec).collect(),
        pause: Duration::from_secs(5),
        ..Reply::stream(&bytes)
    }])
    .await;
    let client = ProviderClient::new(config(Wire::OpenAi, &server)).unwrap();
    let cancel = CancellationToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        later.cancel();
    });
    let answer = tokio::time::timeout(Duration::from_secs(4), client.complete(&request(), &cancel))
        .await
        .expect("cancellation is honoured mid-stream, long before the stream would end");
    assert_eq!(answer.unwrap_err(), ModelError::Cancelled);
}

#[tokio::test]
async fn a_server_that_is_not_there_is_named_in_the_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let mut config =
        ProviderConfig::new(Wire::OpenAi, format!("http://{address}/v1"), "test-model");
    config.api_key = ApiKey::None;
    config.retry.attempts = 2;
    config.retry.first_delay = Duration::from_millis(10);
    let ModelError::Failed(failure) = complete(&ProviderClient::new(config).unwrap())
        .await
        .unwrap_err()
    else {
        panic!("not a failure");
    };
    let message = &failure.message;
    assert!(message.contains(&address.to_string()), "{message}");
    assert!(message.contains("could not be reached"), "{message}");
}

#[tokio::test]
async fn a_named_key_variable_that_is_not_set_is_named_and_nothing_is_sent() {
    let server = FakeServer::start(vec![]).await;
    let mut config = config(Wire::OpenAi, &server);
    config.api_key = ApiKey::Env("TOOLRAIL_TEST_KEY_THAT_IS_NEVER_SET".to_owned());
    let ModelError::Failed(failure) = complete(&ProviderClient::new(config).unwrap())
        .await
        .unwrap_err()
    else {
        panic!("not a failure");
    };
    let message = &failure.message;
    assert!(
        message.contains("TOOLRAIL_TEST_KEY_THAT_IS_NEVER_SET"),
        "{message}"
    );
    assert!(server.seen().is_empty());
}
