//! Recorded streams of both formats assembled into assistant messages: parallel tool calls,
//! reasoning, a message cut by the length limit inside a call's arguments, a stream that just
//! stops, an error mid-stream — and the same message whatever bytes the stream arrives in
//! (split at every boundary, and at random ones).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use proptest::prelude::*;
use serde_json::json;
use support::fixture;
use toolrail_agent_loop::ModelResponse;
use toolrail_providers::sse::{SseEvent, SseParser};
use toolrail_providers::{AnthropicStream, OpenAiStream, StreamError};
use toolrail_session_log::event::{AssistantBlock, StopReason};

#[derive(Clone, Copy, Debug)]
enum Format {
    OpenAi,
    Anthropic,
}

/// The stream `bytes`, arriving in the pieces `cuts` makes, assembled.
fn assemble(format: Format, bytes: &[u8], cuts: &[usize]) -> Result<ModelResponse, StreamError> {
    let mut parser = SseParser::default();
    let mut events: Vec<SseEvent> = Vec::new();
    let mut start = 0;
    let mut bounds: Vec<usize> = cuts
        .iter()
        .map(|cut| cut.min(&bytes.len()).to_owned())
        .collect();
    bounds.sort_unstable();
    bounds.push(bytes.len());
    for end in bounds {
        parser.feed(&bytes[start..end], &mut events).unwrap();
        start = end;
    }
    match format {
        Format::OpenAi => {
            let mut stream = OpenAiStream::new();
            for event in &events {
                stream.event(event)?;
            }
            stream.finish()
        }
        Format::Anthropic => {
            let mut stream = AnthropicStream::new();
            for event in &events {
                stream.event(event)?;
            }
            stream.finish()
        }
    }
}

fn call(id: &str, name: &str, arguments: &str) -> AssistantBlock {
    AssistantBlock::ToolCall {
        call_id: id.into(),
        name: name.to_owned(),
        arguments_raw: arguments.to_owned(),
    }
}

fn text(text: &str) -> AssistantBlock {
    AssistantBlock::Text {
        text: text.to_owned(),
    }
}

fn thinking(text: &str) -> AssistantBlock {
    AssistantBlock::Thinking {
        text: text.to_owned(),
    }
}

#[test]
fn openai_parallel_tool_calls_are_assembled_by_index() {
    let response = assemble(
        Format::OpenAi,
        &fixture("openai/parallel_tool_calls.sse"),
        &[],
    )
    .unwrap();
    assert_eq!(
        response.message.blocks,
        [
            thinking("Both files first."),
            text("Reading both files."),
            call("call_a", "read", r#"{"path":"src/lib.rs"}"#),
            call("call_b", "read", r#"{"path": "src/métier.rs"}"#),
        ]
    );
    assert_eq!(response.message.stop_reason, StopReason::ToolCalls);
    assert_eq!(
        response.usage,
        Some(json!({"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}))
    );
}

#[test]
fn anthropic_tool_uses_are_assembled_from_input_deltas() {
    let response = assemble(
        Format::Anthropic,
        &fixture("anthropic/parallel_tool_uses.sse"),
        &[],
    )
    .unwrap();
    assert_eq!(
        response.message.blocks,
        [
            thinking("Both files first."),
            text("Reading both files."),
            call("toolu_a", "read", r#"{"path":"src/lib.rs"}"#),
            call("toolu_b", "read", r#"{"path": "src/métier.rs"}"#),
            // No input deltas: a call without arguments.
            call("toolu_c", "glob_all", "{}"),
        ]
    );
    assert_eq!(response.message.stop_reason, StopReason::ToolCalls);
    assert_eq!(
        response.usage,
        Some(json!({"input_tokens": 42, "output_tokens": 17}))
    );
}

/// The answer's id and model, as the server named them: from the OpenAI chunks and from
/// Anthropic's `message_start`.
fn served(response: &ModelResponse) -> (Option<&str>, Option<&str>) {
    (
        response.response_id.as_deref(),
        response.response_model.as_deref(),
    )
}

#[test]
fn the_server_s_response_id_and_model_are_read_from_both_stream_formats() {
    let response = assemble(
        Format::OpenAi,
        &fixture("openai/parallel_tool_calls.sse"),
        &[],
    )
    .unwrap();
    assert_eq!(served(&response), (Some("chatcmpl-1"), Some("m")));
    let response = assemble(
        Format::Anthropic,
        &fixture("anthropic/parallel_tool_uses.sse"),
        &[],
    )
    .unwrap();
    assert_eq!(served(&response), (Some("msg_1"), Some("m")));
}

#[test]
fn a_placeholder_id_is_skipped_and_the_first_real_one_holds() {
    // Azure sends a content-filter chunk with empty id and model before the answer's.
    let stream = concat!(
        "data: {\"id\":\"\",\"model\":\"\",\"choices\":[],\"prompt_filter_results\":[]}\n\n",
        "data: {\"id\":\"chatcmpl-9\",\"model\":\"gpt-x-2026-01-01\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"id\":\"chatcmpl-other\",\"model\":\"other\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let response = assemble(Format::OpenAi, stream.as_bytes(), &[]).unwrap();
    assert_eq!(
        served(&response),
        (Some("chatcmpl-9"), Some("gpt-x-2026-01-01"))
    );
}

#[test]
fn a_stream_that_names_no_id_or_model_leaves_them_absent() {
    let openai = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let response = assemble(Format::OpenAi, openai.as_bytes(), &[]).unwrap();
    assert_eq!(response.message.blocks, [text("Hi")]);
    assert_eq!(served(&response), (None, None));
    let anthropic = concat!(
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"Hi\"}}\n\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );
    let response = assemble(Format::Anthropic, anthropic.as_bytes(), &[]).unwrap();
    assert_eq!(response.message.blocks, [text("Hi")]);
    assert_eq!(served(&response), (None, None));
}

#[test]
fn a_message_cut_by_the_length_limit_inside_arguments_is_a_length_message() {
    for (format, name, id) in [
        (Format::OpenAi, "openai/cut_by_length.sse", "call_w"),
        (
            Format::Anthropic,
            "anthropic/cut_by_max_tokens.sse",
            "toolu_w",
        ),
    ] {
        let response = assemble(format, &fixture(name), &[]).unwrap();
        assert_eq!(response.message.stop_reason, StopReason::Length, "{name}");
        assert_eq!(
            response.message.blocks,
            [call(
                id,
                "write",
                r##"{"path":"notes.md","content":"# Pla"##
            )],
            "{name}"
        );
    }
}

#[test]
fn a_stream_that_stops_inside_a_call_is_a_length_message_and_one_without_calls_an_error() {
    let response = assemble(
        Format::OpenAi,
        &fixture("openai/ends_mid_arguments.sse"),
        &[],
    )
    .unwrap();
    assert_eq!(response.message.stop_reason, StopReason::Length);
    assert_eq!(
        response.message.blocks,
        [call("call_w", "write", r#"{"path":"notes.md","con"#)]
    );
    // Cut before `message_stop`, even after a stop reason: not a finished message.
    let whole = fixture("anthropic/parallel_tool_uses.sse");
    let cut = whole.len() - "data: {\"type\":\"message_stop\"}\n\n".len() - 20;
    let response = assemble(Format::Anthropic, &whole[..cut], &[]).unwrap();
    assert_eq!(response.message.stop_reason, StopReason::Length);
    let text_only = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    assert_eq!(
        assemble(Format::OpenAi, text_only, &[]).unwrap_err(),
        StreamError::Ended
    );
}

#[test]
fn an_error_mid_stream_is_the_server_s_message() {
    let error = assemble(Format::OpenAi, &fixture("openai/error_mid_stream.sse"), &[]).unwrap_err();
    assert_eq!(
        error,
        StreamError::Transient("The server had an error while processing your request.".to_owned())
    );
    let error = assemble(
        Format::Anthropic,
        &fixture("anthropic/error_mid_stream.sse"),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        error,
        StreamError::Transient("overloaded_error: Overloaded".to_owned())
    );
}

const STREAMS: [(Format, &str); 5] = [
    (Format::OpenAi, "openai/parallel_tool_calls.sse"),
    (Format::OpenAi, "openai/cut_by_length.sse"),
    (Format::OpenAi, "openai/ends_mid_arguments.sse"),
    (Format::Anthropic, "anthropic/parallel_tool_uses.sse"),
    (Format::Anthropic, "anthropic/cut_by_max_tokens.sse"),
];

#[test]
fn every_byte_boundary_gives_the_same_message() {
    for (format, name) in STREAMS {
        let bytes = fixture(name);
        let whole = assemble(format, &bytes, &[]);
        for cut in 0..=bytes.len() {
            assert_eq!(
                assemble(format, &bytes, &[cut]),
                whole,
                "{name} cut at {cut}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_chunking_gives_the_same_message(
        stream in 0..STREAMS.len(),
        cuts in proptest::collection::vec(0usize..6_000, 0..40),
    ) {
        let (format, name) = STREAMS[stream];
        let bytes = fixture(name);
        prop_assert_eq!(assemble(format, &bytes, &cuts), assemble(format, &bytes, &[]));
    }
}

#[test]
fn calls_sent_whole_without_an_index_stay_apart() {
    let stream = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"b\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let response = assemble(Format::OpenAi, stream.as_bytes(), &[]).unwrap();
    assert_eq!(
        response.message.blocks,
        [
            call("c1", "read", r#"{"path":"a"}"#),
            call("c2", "read", r#"{"path":"b"}"#)
        ]
    );
}

/// A server that sends calls whole, without an index, and a model that repeated an id: two
/// calls, not one with joined arguments (the runtime refuses the repeat by its own id).
#[test]
fn a_repeated_id_sent_whole_without_an_index_is_a_second_call() {
    let stream = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"b\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let response = assemble(Format::OpenAi, stream.as_bytes(), &[]).unwrap();
    assert_eq!(
        response.message.blocks,
        [
            call("c1", "read", r#"{"path":"a"}"#),
            call("c1", "read", r#"{"path":"b"}"#)
        ]
    );
    let ids: Vec<String> = response
        .message
        .tool_calls()
        .into_iter()
        .map(|call| call.call_id.to_string())
        .collect();
    assert_eq!(ids, ["c1", "c1-dup2"]);
}
