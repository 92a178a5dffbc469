//! Any bytes as a model server's stream: the SSE parser and both formats' assembly must
//! never panic, and the message must not depend on how the bytes were split into chunks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolrail_providers::sse::{SseEvent, SseParser};
use toolrail_providers::{AnthropicStream, OpenAiStream};

fn events(data: &[u8], chunk: usize) -> Result<Vec<SseEvent>, String> {
    let mut parser = SseParser::new(1 << 16);
    let mut events = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        parser
            .feed(piece, &mut events)
            .map_err(|error| error.to_string())?;
    }
    Ok(events)
}

fn assembled(events: &[SseEvent]) -> (String, String) {
    let mut openai = OpenAiStream::new();
    let openai = events
        .iter()
        .try_for_each(|event| openai.event(event))
        .and_then(|()| openai.finish());
    let mut anthropic = AnthropicStream::new();
    let anthropic = events
        .iter()
        .try_for_each(|event| anthropic.event(event))
        .and_then(|()| anthropic.finish());
    (format!("{openai:?}"), format!("{anthropic:?}"))
}

fuzz_target!(|data: &[u8]| {
    let chunk = usize::from(data.first().copied().unwrap_or(1) % 13) + 1;
    let whole = events(data, data.len());
    let split = events(data, chunk);
    assert_eq!(whole, split, "the events depend on the chunking");
    if let Ok(events) = whole {
        let _ = assembled(&events);
    }
});
