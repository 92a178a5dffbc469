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
    /// The wait before the second try; it doubles each time, up to `max_delay`. A server's
    /// `Retry-After` wins when it asks for longer, up to `max_delay`.
    pub first_delay: Duration,
    /// The longest wait between two tries, a server's `Retry-After` included.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed try number `attempt` (from 1).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let doubled = self
            .first_delay
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        doubled
            .max(retry_after.unwrap_or_default())
            .min(self.max_delay)
    }
}

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
    /// The longest silence allowed while waiting for the answer's first or next bytes.
    pub idle_timeout: Duration,
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

    use super::{ProviderConfig, RetryPolicy, Wire};

    #[test]
    fn delays_double_up_to_the_cap_and_a_longer_retry_after_wins() {
        let policy = RetryPolicy {
            attempts: 5,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        };
        let delays: Vec<u128> = (1..=4)
            .map(|attempt| policy.delay(attempt, None).as_millis())
            .collect();
        assert_eq!(delays, [100, 200, 400, 500]);
        assert_eq!(
            policy
                .delay(1, Some(Duration::from_millis(300)))
                .as_millis(),
            300
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(60))).as_millis(),
            500
        );
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
