//! `ProviderClient` against hostile servers on 127.0.0.1 (issue 25): a stream kept open by
//! keepalives after the start of a tool call, one still writing when its deadline passes,
//! silent ones, bodies that trickle, a 429 storm whose waits are measured as the server
//! sees them, and a `Retry-After` given as an HTTP date. Every deadline is small and set by
//! the test; what is timed is only that a failure came after its deadline and before the
//! deadline plus slack.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use support::{FakeServer, Reply, fixture};
use tokio_util::sync::CancellationToken;
use toolrail_agent_loop::{ModelClient, ModelDelta, ModelError, ModelFailure, ModelRequest};
use toolrail_providers::{ApiKey, ProviderClient, ProviderConfig, RetryPolicy, Wire};
use toolrail_session_log::{ContentBlock, ConversationItem};
use toolrail_test_support::http::{call_chunk, http_date, text_chunk};

/// Slack for a loaded machine (two cores, three engineers): a failure must come within its
/// bound plus this.
const SLACK: Duration = Duration::from_millis(1_500);

/// One try, deadlines far away: each test sets what it tests.
fn config(server: &FakeServer) -> ProviderConfig {
    let mut config = ProviderConfig::new(Wire::OpenAi, format!("{}/v1", server.url), "m");
    config.api_key = ApiKey::None;
    config.retry = RetryPolicy {
        attempts: 1,
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(5),
    };
    config.idle_timeout = Duration::from_secs(60);
    config.request_timeout = Duration::from_secs(60);
    config.step_timeout = Duration::from_secs(60);
    config
}

fn request() -> ModelRequest {
    ModelRequest {
        system: None,
        messages: Arc::new(vec![ConversationItem::User(vec![ContentBlock::text(
            "Clean up.",
        )])]),
        tools: Arc::new([]),
    }
}

/// The start of a tool call whose arguments never end.
fn call_start() -> Vec<u8> {
    call_chunk(0, "call_1", "bash", r#"{"command": "rm -rf "#).into_bytes()
}

/// A stream that begins a tool call, then sends `: keepalive` every 100 ms (for at most
/// 30 s: bounded, and far past every deadline here).
fn keepalive_stall() -> Reply {
    let mut pieces = vec![call_start()];
    pieces.extend(std::iter::repeat_n(b": keepalive\n\n".to_vec(), 300));
    Reply {
        pieces,
        pause: Duration::from_millis(100),
        ..Reply::stream(b"")
    }
}

/// Every delta, in order.
#[derive(Default)]
struct Deltas(Mutex<Vec<ModelDelta>>);

impl toolrail_agent_loop::DeltaSink for Deltas {
    fn delta(&self, delta: ModelDelta) {
        self.0.lock().push(delta);
    }
}

async fn failure_of(client: &ProviderClient, deltas: &Deltas) -> (ModelFailure, Duration) {
    let started = Instant::now();
    let answer = client
        .stream(&request(), &CancellationToken::new(), deltas)
        .await;
    let took = started.elapsed();
    match answer {
        Err(ModelError::Failed(failure)) => {
            eprintln!("after {took:?}: {}", failure.message);
            (failure, took)
        }
        other => panic!("not a failure: {other:?}"),
    }
}

/// The gaps between the requests the server received.
fn gaps(server: &FakeServer) -> Vec<Duration> {
    server
        .seen()
        .windows(2)
        .map(|pair| pair[1].at.duration_since(pair[0].at))
        .collect()
}

/// The issue's case: keepalives after part of a tool call kept a request open forever.
/// Now each try ends at the request deadline, the half call it streamed is declared void
/// when the next try starts, and the last failure names the deadline and its length.
#[tokio::test]
async fn keepalives_after_part_of_a_tool_call_end_at_the_request_deadline() {
    let server = FakeServer::start(vec![keepalive_stall(), keepalive_stall()]).await;
    let mut config = config(&server);
    config.retry.attempts = 2;
    config.request_timeout = Duration::from_secs(1);
    // Keepalives every 100 ms never let this pass: only a deadline can end the stream.
    config.idle_timeout = Duration::from_millis(300);
    let client = ProviderClient::new(config).unwrap();
    let deltas = Deltas::default();
    let (failure, took) = failure_of(&client, &deltas).await;
    let message = &failure.message;
    assert!(
        message.contains("the request deadline of 1 s passed with the answer stalled"),
        "{message}"
    );
    assert!(
        message.contains("keepalives and other bytes do not extend it"),
        "{message}"
    );
    assert!(message.contains("gave up after 2 tries"), "{message}");
    assert!(failure.retryable, "a stalled server may answer later");
    assert_eq!(failure.status, Some(200));
    // Each try lasted its deadline, no more (the server saw the second one a deadline later).
    assert_eq!(server.seen().len(), 2);
    let gap = gaps(&server)[0];
    assert!(
        gap >= Duration::from_millis(950) && gap < Duration::from_secs(1) + SLACK,
        "{gap:?}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(2) + SLACK,
        "{took:?}"
    );
    // The half call reached the sink twice, the second time after the first was declared
    // void.
    let deltas = deltas.0.lock().clone();
    let started: Vec<usize> = deltas
        .iter()
        .enumerate()
        .filter(|(_, delta)| matches!(delta, ModelDelta::ToolCallStarted { .. }))
        .map(|(at, _)| at)
        .collect();
    let restarted = deltas
        .iter()
        .position(|delta| matches!(delta, ModelDelta::Restarted { attempt: 2, .. }))
        .expect("the second try was announced");
    assert_eq!(started.len(), 2, "{deltas:?}");
    assert!(
        started[0] < restarted && restarted < started[1],
        "{deltas:?}"
    );
}

/// A stream still writing its answer when the request deadline passes is not tried again —
/// the same answer would be cut at the same point — and says to raise the deadline.
#[tokio::test]
async fn an_answer_still_coming_at_the_request_deadline_is_not_tried_again() {
    let words: Vec<Vec<u8>> = (0..300)
        .map(|n| text_chunk(&format!("word{n} ")).into_bytes())
        .collect();
    let writing = Reply {
        pieces: words,
        pause: Duration::from_millis(100),
        ..Reply::stream(b"")
    };
    let server = FakeServer::start(vec![writing.clone(), writing]).await;
    let mut config = config(&server);
    config.retry.attempts = 2;
    config.request_timeout = Duration::from_secs(1);
    config.idle_timeout = Duration::from_millis(400);
    let client = ProviderClient::new(config).unwrap();
    let (failure, took) = failure_of(&client, &Deltas::default()).await;
    let message = &failure.message;
    assert!(
        message.contains("the request deadline of 1 s passed before the answer was whole"),
        "{message}"
    );
    assert!(message.contains("raise the request timeout"), "{message}");
    assert!(!failure.retryable, "the same request would be cut again");
    assert_eq!(server.seen().len(), 1);
    assert!(took < Duration::from_secs(1) + SLACK, "{took:?}");
}

/// A stream that sends its head and then nothing: each try ends at the idle timeout and is
/// tried again, until the step deadline ends the request — not the tries × idle timeout of
/// the retry policy alone (ten tries here, 3 s at the least). With an idle timeout longer
/// than the step, the step's deadline ends the try itself.
#[tokio::test]
async fn a_silent_stream_is_tried_again_only_until_the_step_deadline() {
    // The head, then silence: a gate nobody opens (the server gives up on it after 30 s).
    let silent = Reply {
        pieces: vec![Vec::new()],
        gate: Some(Arc::new(tokio::sync::Notify::new())),
        ..Reply::stream(b"")
    };
    let server = FakeServer::start(vec![silent.clone(); 10]).await;
    let mut retried = config(&server);
    retried.retry.attempts = 10;
    retried.idle_timeout = Duration::from_millis(300);
    retried.step_timeout = Duration::from_secs(1);
    let client = ProviderClient::new(retried).unwrap();
    let (failure, took) = failure_of(&client, &Deltas::default()).await;
    let message = &failure.message;
    assert!(message.contains("the step deadline of 1 s"), "{message}");
    // The tries before it ended at the idle timeout, named as such.
    assert!(
        message.contains("nothing arrived for 300 ms, the idle timeout"),
        "{message}"
    );
    assert!(failure.retryable);
    let tries = server.seen().len();
    assert!((2..=4).contains(&tries), "{tries} tries in 1 s");
    assert!(took < Duration::from_secs(1) + SLACK, "{took:?}");

    // With an idle timeout longer than the step, the step deadline ends the one try.
    let server = FakeServer::start(vec![silent; 2]).await;
    let mut config = config(&server);
    config.retry.attempts = 10;
    config.step_timeout = Duration::from_secs(1);
    let client = ProviderClient::new(config).unwrap();
    let (failure, took) = failure_of(&client, &Deltas::default()).await;
    let message = &failure.message;
    assert!(
        message.contains("the step deadline of 1 s passed during try 1"),
        "{message}"
    );
    assert_eq!(server.seen().len(), 1);
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(1) + SLACK,
        "{took:?}"
    );
}

/// A wait before another try that would end past the step deadline is not begun: the
/// request fails at once, saying what the server asked and what the step had left.
#[tokio::test]
async fn a_retry_wait_past_the_step_deadline_fails_at_once_saying_so() {
    let limited =
        Reply::json(429, r#"{"error":{"message":"slow down"}}"#).header("retry-after", "4");
    let server = FakeServer::start(vec![limited.clone(), limited]).await;
    let mut config = config(&server);
    config.retry.attempts = 2;
    config.step_timeout = Duration::from_secs(2);
    let client = ProviderClient::new(config).unwrap();
    let (failure, took) = failure_of(&client, &Deltas::default()).await;
    let message = &failure.message;
    assert!(message.contains("slow down"), "{message}");
    assert!(
        message.contains("gave up after 1 try: the step deadline of 2 s leaves"),
        "{message}"
    );
    assert!(message.contains("less than the 4 s wait"), "{message}");
    assert!(failure.retryable);
    assert_eq!(failure.status, Some(429));
    assert_eq!(server.seen().len(), 1);
    assert!(took < SLACK, "{took:?}");
}

/// Every wait of a try is bounded by the request deadline, not only the stream's: a server
/// silent before its head, an error body that trickles, a whole JSON answer that trickles.
#[tokio::test]
async fn every_wait_of_a_try_ends_at_the_request_deadline() {
    let trickle = |status: u16, content_type: &str| Reply {
        status,
        headers: vec![("content-type".into(), content_type.into())],
        pieces: (0..300).map(|_| b" ".to_vec()).collect(),
        pause: Duration::from_millis(100),
        gate: None,
        before_head: Duration::ZERO,
    };
    let cases = [
        (
            Reply {
                before_head: Duration::from_secs(30),
                ..Reply::stream(b"")
            },
            "the server had not begun to answer",
        ),
        (
            trickle(503, "application/json"),
            "the server answered 503 and sent",
        ),
        (
            trickle(200, "application/json"),
            "the server answered 200 and sent",
        ),
    ];
    for (reply, said) in cases {
        let server = FakeServer::start(vec![reply]).await;
        let mut config = config(&server);
        config.request_timeout = Duration::from_millis(700);
        let client = ProviderClient::new(config).unwrap();
        let (failure, took) = failure_of(&client, &Deltas::default()).await;
        let message = &failure.message;
        assert!(
            message.contains("the request deadline of 700 ms passed"),
            "{message}"
        );
        assert!(message.contains(said), "{said}: {message}");
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_millis(700) + SLACK,
            "{said}: {took:?}"
        );
        assert_eq!(server.seen().len(), 1);
    }
}

/// Cancellation wins at every wait: during a keepalive stall, during a retry's wait, and
/// over a deadline that is due at the same moment.
#[tokio::test]
async fn cancellation_wins_over_stalls_waits_and_deadlines() {
    let limited =
        Reply::json(429, r#"{"error":{"message":"slow down"}}"#).header("retry-after", "4");
    let server = FakeServer::start(vec![keepalive_stall(), limited]).await;
    let mut config = config(&server);
    config.retry.attempts = 2;
    let client = ProviderClient::new(config).unwrap();
    for _ in 0..2 {
        let cancel = CancellationToken::new();
        let later = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            later.cancel();
        });
        let started = Instant::now();
        let answer = client.complete(&request(), &cancel).await;
        assert_eq!(answer.unwrap_err(), ModelError::Cancelled);
        assert!(started.elapsed() < Duration::from_millis(300) + SLACK);
    }
    // A try whose deadline is due at once, with the request already cancelled.
    let mut config = client.config().clone();
    config.request_timeout = Duration::ZERO;
    let client = ProviderClient::new(config).unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let answer = client.complete(&request(), &cancel).await;
    assert_eq!(answer.unwrap_err(), ModelError::Cancelled);
}

/// A 429 storm: every wait between tries is drawn at random below its ceiling (full
/// jitter), as the server sees the tries arrive. Without jitter the waits would be the
/// ceilings themselves: 50, 100, 200, then 400 ms ten times.
#[tokio::test]
async fn a_429_storm_is_waited_out_with_jittered_gaps_within_the_backoff() {
    let limited = Reply::json(429, r#"{"error":{"message":"Rate limit reached"}}"#);
    let mut script = vec![limited; 13];
    script.push(Reply::stream(&fixture("openai/parallel_tool_calls.sse")));
    let server = FakeServer::start(script).await;
    let mut config = config(&server);
    config.retry = RetryPolicy {
        attempts: 14,
        first_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(400),
        max_retry_after: Duration::from_secs(5),
    };
    let policy = config.retry.clone();
    let client = ProviderClient::new(config).unwrap();
    let response = client
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(response.message.tool_calls().len(), 2);
    let gaps = gaps(&server);
    let millis: Vec<u128> = gaps.iter().map(Duration::as_millis).collect();
    eprintln!("gaps between tries, ms: {millis:?}");
    assert_eq!(gaps.len(), 13);
    // Within the backoff: no gap longer than its try's ceiling (plus the try itself).
    for (at, gap) in gaps.iter().enumerate() {
        let ceiling = policy.ceiling(u32::try_from(at).unwrap() + 1);
        assert!(
            *gap <= ceiling + Duration::from_millis(250),
            "gap {at}: {gap:?} over its ceiling {ceiling:?}: {millis:?}"
        );
    }
    // Not all equal: the ten gaps under the 400 ms ceiling spread over it. Ten uniform
    // draws fall within 80 ms of each other once in about 250,000 runs; ten waits of a
    // fixed 400 ms would differ only by the noise of the machine.
    let capped = &millis[3..];
    let spread = capped.iter().max().unwrap() - capped.iter().min().unwrap();
    assert!(spread > 80, "spread {spread} ms: {millis:?}");
}

/// A `Retry-After` given as a date two seconds ahead is waited for until then — far longer
/// than this client's own backoff (20 ms at most) — and the next try succeeds.
#[tokio::test]
async fn a_retry_after_date_is_waited_for_until_that_moment() {
    // The date has whole seconds: the wait it asks for is between 1 and 2 s from now.
    let until = http_date(SystemTime::now() + Duration::from_secs(2));
    let server = FakeServer::start(vec![
        Reply::json(429, r#"{"error":{"message":"busy"}}"#).header("retry-after", &until),
        Reply::stream(&fixture("openai/parallel_tool_calls.sse")),
    ])
    .await;
    let mut config = config(&server);
    config.retry.attempts = 2;
    let client = ProviderClient::new(config).unwrap();
    let response = client
        .complete(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(response.message.tool_calls().len(), 2);
    let gap = gaps(&server)[0];
    eprintln!("Retry-After {until}: the second try came {gap:?} after the first");
    assert!(
        gap >= Duration::from_millis(900) && gap <= Duration::from_secs(2) + SLACK,
        "{gap:?}"
    );
}
