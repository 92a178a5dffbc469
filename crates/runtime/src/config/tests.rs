//! Reading configurations: defaults, every section, and errors that name the field.

use super::*;

#[test]
fn an_empty_file_is_every_default() {
    let config = SessionConfig::from_toml("").unwrap_or_default();
    assert_eq!(config, SessionConfig::default());
    assert_eq!(config.tools.enabled, DEFAULT_TOOLS);
    assert_eq!(config.sandbox.mode, SandboxModeName::ReadOnly);
    assert_eq!(config.limits.max_parallel, 8);
    assert_eq!(config.store.url, "jsonl:.toolrail/sessions");
    assert_eq!(config.store.durability, DurabilityName::Strict);
    assert!(config.model.is_none() && config.code.languages.is_empty());
}

#[test]
fn every_section_reads() {
    let text = r#"
        [workspace]
        roots = ["src", "/tmp"]

        [tools]
        enabled = ["read", "bash", "grep"]
        deferred = ["grep"]
        [tools.bash]
        timeout_ms = 5000
        read_only_commands = ["git status*"]
        env = { RUST_LOG = "info" }
        [tools.files]
        read_lines = 100

        [code]
        languages = ["javascript", "python"]
        presentation = "code"
        wall_ms = 1000

        [mcp_servers.time]
        command = "uvx"
        args = ["mcp-server-time"]

        [sandbox]
        mode = "workspace-write"
        tier = "bubblewrap"
        rules = [{ command = "cargo test*", mode = "full-access" }]

        [permissions]
        preset = "never-ask"
        allow = ["read"]
        deny = [{ rule = "bash(curl *)", reason = "offline" }]

        [model]
        provider = "anthropic"
        model = "claude-sonnet-4-5"
        temperature = 0.2
        tool_choice = "required"
        extra_body = { top_k = 5 }
        request_timeout_ms = 600000
        [model.retry]
        attempts = 2

        [store]
        url = "sqlite:sessions.db"
        durability = "batched"

        [limits]
        max_parallel = 2
        call_timeout_ms = 60000
    "#;
    let config = match SessionConfig::from_toml(text) {
        Ok(config) => config,
        Err(error) => panic!("{error}"),
    };
    assert_eq!(config.tools.deferred, ["grep"]);
    assert_eq!(config.tools.bash.timeout_ms, 5000);
    assert_eq!(config.tools.bash.env["RUST_LOG"], "info");
    assert_eq!(config.tools.files.read_lines, Some(100));
    assert_eq!(
        config.code.languages,
        [CodeLanguage::Javascript, CodeLanguage::Python]
    );
    assert_eq!(config.code.presentation, CodePresentation::Code);
    assert!(config.mcp_servers.contains_key("time"));
    assert_eq!(config.sandbox.tier, SandboxTierName::Bubblewrap);
    assert_eq!(config.sandbox.rules[0].mode, SandboxModeName::FullAccess);
    assert_eq!(config.permissions.preset, Some(PresetName::NeverAsk));
    assert_eq!(
        config.permissions.deny[0].parts(),
        ("bash(curl *)", Some("offline"))
    );
    let model = config.model.as_ref();
    assert_eq!(
        model.map(|model| model.provider),
        Some(ProviderName::Anthropic)
    );
    assert_eq!(model.and_then(|model| model.temperature), Some(0.2));
    assert_eq!(model.map(|model| model.retry.attempts), Some(2));
    assert_eq!(
        model.map(|model| (model.request_timeout_ms, model.step_timeout_ms)),
        Some((600_000, 1_800_000)),
        "what is unset keeps its default"
    );
    assert_eq!(config.store.durability, DurabilityName::Batched);
    assert_eq!(config.limits.call_timeout_ms, Some(60_000));
    // What is written is read back the same, as the log records it.
    let written = serde_json::to_value(&config).unwrap_or_default();
    assert_eq!(
        SessionConfig::from_json_value(written, "round trip").ok(),
        Some(config)
    );
}

fn error_of(text: &str) -> String {
    match SessionConfig::from_toml(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn unknown_fields_and_bad_values_name_the_field_and_the_fix() {
    let unknown = error_of("[tools]\nenable = []");
    assert_eq!(
        unknown,
        "toolrail.toml (inline): `tools.enable`: TOML parse error at line 2, column 1: unknown field `enable`, expected one of `enabled`, `deferred`, `bash`, `files`"
    );
    let nested =
        error_of("[model]\nprovider = \"openai\"\nmodel = \"m\"\n[model.retry]\ntries = 3");
    assert!(nested.contains("model.retry"), "{nested}");
    let mode = error_of("[sandbox]\nmode = \"read-write\"");
    assert!(
        mode.contains("sandbox.mode") && mode.contains("workspace-write"),
        "{mode}"
    );
    let temperature = error_of("[model]\nprovider = \"openai\"\nmodel = \"m\"\ntemperature = 3.5");
    assert!(
        temperature.contains("model.temperature") && temperature.contains("0 to 2"),
        "{temperature}"
    );
    let parallel = error_of("[limits]\nmax_parallel = 0");
    assert!(parallel.contains("limits.max_parallel") && parallel.contains("strict serial"));
    let deferred = error_of("[tools]\nenabled = [\"read\"]\ndeferred = [\"grep\"]");
    assert!(deferred.contains("tools.deferred") && deferred.contains("`grep`"));
    let store = error_of("[store]\nurl = \"mysql://x\"");
    assert!(
        store.contains("store.url") && store.contains("jsonl:DIR"),
        "{store}"
    );
    let strict = error_of("[model]\nprovider = \"anthropic\"\nmodel = \"m\"\nstrict = true");
    assert!(strict.contains("model.strict"), "{strict}");
    let deadline = error_of("[model]\nprovider = \"openai\"\nmodel = \"m\"\nstep_timeout_ms = 0");
    assert!(
        deadline.contains("model.step_timeout_ms") && deadline.contains("is 0"),
        "{deadline}"
    );
    let syntax = error_of("[tools\nenabled = 3");
    assert!(syntax.contains("toolrail.toml"), "{syntax}");
}

#[test]
fn paths_of_a_file_are_taken_from_its_folder() {
    let mut config = SessionConfig::from_toml(
        "[workspace]\nroots = [\"src\", \"/abs\"]\n[store]\nurl = \"jsonl:sessions\"",
    )
    .unwrap_or_default();
    config.anchor(Path::new("/project"));
    assert_eq!(
        config.workspace.roots,
        [PathBuf::from("/project/src"), PathBuf::from("/abs")]
    );
    assert_eq!(config.store.url, "jsonl:/project/sessions");
}

/// The file's defaults are the client's: the numbers are written twice (this crate reads
/// configurations without the client), so this holds them together.
#[cfg(feature = "providers")]
#[test]
fn model_deadlines_default_to_the_provider_client_s() {
    let model = ModelConfig::new(ProviderName::Openai, "m");
    let client = toolrail_providers::ProviderConfig::new(toolrail_providers::Wire::OpenAi, "", "m");
    assert_eq!(
        [
            model.idle_timeout_ms,
            model.request_timeout_ms,
            model.step_timeout_ms
        ]
        .map(std::time::Duration::from_millis),
        [
            client.idle_timeout,
            client.request_timeout,
            client.step_timeout
        ]
    );
}
