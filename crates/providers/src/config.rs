//! How to reach a model server: the wire format, where, which model, the key (named, never
//! held in the configuration or logged), timeouts and retries.

use std::time::Duration;

/// The two wire formats nearly every model server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions (`POST {base}/chat/completions`): OpenAI, DeepSeek, vLLM,
    /// llama.cpp's server, Ollama.
    OpenAi,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
}

impl Wire {
    /// The format's short name: `openai`, `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// The environment variable a key is usually kept in.
    pub fn usual_key_variable(self) -> &'static str {
        match self {
            Self::OpenAi => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

/// Where the API key comes from. A key named by a variable is read when a request is made;
/// a key given directly is kept in a [`Secret`], which never prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiKey {
    /// No key (a local server).
    None,
    /// This variable must be set.
    Env(String),
    /// This variable, if it is set (the usual one, for servers that may not need it).
    EnvIfSet(String),
    /// A key the embedder holds (from a secret store, say).
    Given(Secret),
}

/// A key that shows as `***` in any `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Holds `key` as it will be sent.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// When and how often a failed request is tried again: on 429, 5xx, connection failures
/// and streams that break off, never on other 4xx answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub attempts: u32,
    /// The ceiling of the wait before the second try; it doubles each time, up to
    /// `max_delay`. Each wait is drawn at random below its ceiling ("full jitter"), so
    /// clients that failed together do not come back together.
    pub first_delay: Duration,
    /// The highest ceiling of a wait between two tries.
    pub max_delay: Duration,
    /// The longest wait a server's `Retry-After` (seconds or an HTTP date) is honoured for,
    /// exactly; a server that asks for longer is not tried again, and the failure says how
    /// long it asked.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the wait after failed try number `attempt` (from 1).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.first_delay
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.max_delay)
    }

    /// The wait after failed try number `attempt` (from 1): what the server's `Retry-After`
    /// asked, or a random wait below the attempt's ceiling. `None` when the server asked
    /// for longer than `max_retry_after`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        match retry_after {
            Some(asked) if asked > self.max_retry_after => None,
            Some(asked) => Some(asked),
            None => Some(jittered(self.ceiling(attempt))),
        }
    }
}

/// A random duration from zero up to `ceiling`.
fn jittered(ceiling: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // Each `RandomState` is keyed afresh from the process's random seed: enough randomness
    // for spreading retries, without a dependency.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(random % nanos.saturating_add(1))
}

/// A `Retry-After` value: seconds, or an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) taken
/// as the time left until then from `now`; a date in the past is no wait.
pub(crate) fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = http_date(value)?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// An IMF-fixdate, the form HTTP requires senders to use: `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(text: &str) -> Option<std::time::SystemTime> {
    let (_weekday, rest) = text.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: u64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let mut part = || -> Option<u64> { clock.next()?.parse().ok() };
    let (hour, minute, second) = (part()?, part()?, part()?);
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    if year < 1970 || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (March-based years).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let of_era = y % 400;
    let of_year = (153 * m + 2) / 5 + day - 1;
    let of_era_days = of_era * 365 + of_era / 4 - of_era / 100 + of_year;
    let days = (era * 146_097 + of_era_days).checked_sub(719_468)?;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second.min(59);
    std::time::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// The default longest try: 20 minutes. A long answer is legitimate: the longest one
/// models write in one request (64,000 output tokens, thinking included, at the 50-60
/// tokens a second of a large model) streams for about 18 minutes, and cutting it would
/// waste what was paid for. A stream that is still open after that is a stall behind
/// keepalives, which nothing else ends.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// The default longest model request, retries included: 30 minutes. One try may use its
/// whole request deadline and a try that broke or stalled early still leaves room for
/// another; and however the server fails — tries that stall until their deadline, waits as
/// long as `Retry-After` asks — a step of the agent ends within this, never later.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Whether and which tool the model must call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the servers' default; nothing is sent).
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call (OpenAI `required`, Anthropic `any`).
    Required,
    /// This tool.
    Tool(String),
}

impl ToolChoice {
    /// Reads `auto`, `none`, `required` (or `any`), or a tool's name.
    pub fn parse(text: &str) -> Self {
        match text {
            "auto" => Self::Auto,
            "none" => Self::None,
            "required" | "any" => Self::Required,
            name => Self::Tool(name.to_owned()),
        }
    }
}

/// One model server and model.
///
/// # Deadlines
///
/// Three lengths bound every wait of a request: `idle_timeout` (a silent connection),
/// `request_timeout` (one try, whatever the server sends) and `step_timeout` (all tries and
/// the waits between them). A model served nearby, which answers in seconds, can be given
/// far shorter ones than the defaults, so a stall ends in a minute:
///
/// ```
/// use std::time::Duration;
/// use toolrail_providers::{DEFAULT_REQUEST_TIMEOUT, ProviderConfig, Wire};
///
/// let mut config = ProviderConfig::new(Wire::OpenAi, "http://127.0.0.1:8080/v1", "qwen3-8b");
/// assert_eq!(config.request_timeout, DEFAULT_REQUEST_TIMEOUT);
/// config.idle_timeout = Duration::from_secs(20);
/// config.request_timeout = Duration::from_secs(60);
/// config.step_timeout = Duration::from_secs(150);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderConfig {
    /// The format the server speaks.
    pub wire: Wire,
    /// `https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`, `https://api.anthropic.com`.
    pub base_url: String,
    /// The model's name as the server knows it, sent as the body's `model`.
    pub model: String,
    /// Where the key comes from; by default the wire's usual variable, if it is set.
    pub api_key: ApiKey,
    /// The longest wait for a connection to the server (default 10 s).
    pub connect_timeout: Duration,
    /// The longest silence allowed while waiting for the answer's first or next bytes: the
    /// detector of a dead connection. Any byte resets it, a keepalive comment too, so it
    /// cannot end a stream that stalls politely; the two deadlines below do.
    pub idle_timeout: Duration,
    /// The longest one try may take, from sending the request to the end of its answer.
    /// Nothing the server sends extends it. A try it ends whose answer had stalled (nothing
    /// of it for `idle_timeout`, keepalives aside) is tried again like a broken stream; one
    /// whose answer was still coming is not, since the same answer would be cut again.
    pub request_timeout: Duration,
    /// The longest one model request may take: every try and every wait between tries.
    /// What it ends is not tried again.
    pub step_timeout: Duration,
    /// When a failed request is tried again, and how long the client waits first.
    pub retry: RetryPolicy,
    /// The answer's length limit (Anthropic requires one: 4096 when unset).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (unset: the server's default).
    pub temperature: Option<f64>,
    /// Nucleus sampling (unset: the server's default).
    pub top_p: Option<f64>,
    /// Whether and which tool the model must call (sent only when the request offers tools).
    pub tool_choice: ToolChoice,
    /// Fields merged into every request body last, over what the client wrote: a server's
    /// own options (`seed`, `reasoning_effort`, `top_k`).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// OpenAI strict mode: schemas adapted (every property required, no others, optional
    /// ones nullable) and `strict: true` on every function.
    pub strict: bool,
    /// Ask an OpenAI-compatible server for usage in the stream (`stream_options`); a
    /// server that refuses the field needs this off.
    pub stream_usage: bool,
}

impl ProviderConfig {
    /// `model` on `base_url` in `wire`'s format, with the usual key variable if it is set.
    pub fn new(wire: Wire, base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            wire,
            base_url: base_url.into(),
            model: model.into(),
            api_key: ApiKey::EnvIfSet(wire.usual_key_variable().to_owned()),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            retry: RetryPolicy::default(),
            max_tokens: None,
            temperature: None,
            top_p: None,
            tool_choice: ToolChoice::Auto,
            extra_body: serde_json::Map::new(),
            strict: false,
            stream_usage: true,
        }
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match self.wire {
            Wire::OpenAi => format!("{base}/chat/completions"),
            Wire::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
            Wire::Anthropic => format!("{base}/v1/messages"),
        }
    }

    /// The key, read now: `Err` names the variable that must be set.
    pub(crate) fn key(&self) -> Result<Option<String>, String> {
        match &self.api_key {
            ApiKey::None => Ok(None),
            ApiKey::Env(name) => match std::env::var(name) {
                Ok(key) if !key.is_empty() => Ok(Some(key)),
                Ok(_) | Err(_) => Err(format!(
                    "the API key variable `{name}` is not set; export it with the key, or name another variable"
                )),
            },
            ApiKey::EnvIfSet(name) => Ok(std::env::var(name).ok().filter(|key| !key.is_empty())),
            ApiKey::Given(Secret(key)) => Ok(Some(key.clone())),
        }
    }
}

impl ProviderConfig {
    /// Adds what both wire formats name alike to a request body — the sampling options —
    /// then `extra_body` over everything (the escape hatch for a server's own fields).
    pub(crate) fn finish_body(&self, body: &mut serde_json::Value) {
        if let Some(temperature) = self.temperature {
            body["temperature"] = serde_json::json!(temperature);
        }
        if let Some(top_p) = self.top_p {
            body["top_p"] = serde_json::json!(top_p);
        }
        if let serde_json::Value::Object(fields) = body {
            for (key, value) in &self.extra_body {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ProviderConfig, RetryPolicy, Wire, parse_retry_after};

    #[test]
    fn waits_are_random_below_a_doubling_ceiling_and_retry_after_is_honoured_to_its_cap() {
        let policy = RetryPolicy {
            attempts: 5,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(30),
        };
        let ceilings: Vec<u128> = (1..=4)
            .map(|attempt| policy.ceiling(attempt).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 500]);
        // Full jitter: every wait below its ceiling, spread over it, not one value.
        let waits: Vec<Duration> = (0..2_000).map(|_| policy.delay(3, None).unwrap()).collect();
        assert!(waits.iter().all(|wait| *wait <= Duration::from_millis(400)));
        let below_half = waits
            .iter()
            .filter(|wait| **wait < Duration::from_millis(200))
            .count();
        assert!(
            (700..1_300).contains(&below_half),
            "{below_half} of 2000 below half"
        );
        // A server's wait is kept exactly, up to the cap; past it, no retry.
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(20))),
            Some(Duration::from_secs(20))
        );
        assert_eq!(policy.delay(1, Some(Duration::from_secs(31))), None);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777 - 90);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_retry_after(
                "Sun, 06 Nov 1994 08:49:37 GMT",
                now + Duration::from_secs(900)
            ),
            Some(Duration::ZERO),
            "a date past is no wait"
        );
        assert_eq!(
            parse_retry_after("Thu, 03 Dec 2026 00:00:00 GMT", now).map(|wait| wait.as_secs()),
            Some(1_796_256_000 - 784_111_777 + 90)
        );
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1_500))
        );
        for bad in [
            "soon",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn a_given_key_never_prints() {
        let mut config = ProviderConfig::new(Wire::OpenAi, "http://x", "m");
        config.api_key = super::ApiKey::Given(super::Secret::new("sk-very-secret"));
        assert!(!format!("{config:?}").contains("sk-very-secret"));
    }

    #[test]
    fn endpoints_follow_the_base_url() {
        let openai = ProviderConfig::new(Wire::OpenAi, "http://127.0.0.1:8000/v1/", "m");
        assert_eq!(
            openai.endpoint(),
            "http://127.0.0.1:8000/v1/chat/completions"
        );
        let anthropic = ProviderConfig::new(Wire::Anthropic, "https://api.anthropic.com", "m");
        assert_eq!(
            anthropic.endpoint(),
            "https://api.anthropic.com/v1/messages"
        );
        let anthropic = ProviderConfig::new(Wire::Anthropic, "http://127.0.0.1:9/v1", "m");
        assert_eq!(anthropic.endpoint(), "http://127.0.0.1:9/v1/messages");
    }
}
