//! Registry rules: unique names, provenance, conflicts, reserved names, scopes, exposure.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::sync::Arc;

use support::{Behaviour, Probe, object_schema};
use toolrail_session_log::ToolSource;
use toolrail_tools_core::{
    Exposure, RegistryBuilder, ToolSpec,
    registry::{CallOrigin, NamePattern, RegistryError},
};

fn probe(name: &str) -> Arc<Probe> {
    Probe::new(name, Behaviour::Succeed)
}

fn ext(name: &str) -> ToolSource {
    ToolSource::Extension(name.into())
}

fn source_of(registry: &toolrail_tools_core::Registry, name: &str) -> Option<ToolSource> {
    registry
        .snapshot()
        .resolve(name, CallOrigin::Model)
        .map(|entry| entry.source().clone())
}

#[test]
fn a_duplicate_builtin_is_a_build_error() {
    let error = RegistryBuilder::new()
        .builtin(probe("read"))
        .builtin(probe("read"))
        .build()
        .err()
        .unwrap();
    assert_eq!(
        error,
        RegistryError::DuplicateBuiltin {
            name: "read".into()
        }
    );
    assert!(error.to_string().contains("rename one of them"));
}

#[test]
fn an_extension_reusing_a_builtin_name_is_skipped_with_a_warning() {
    let (registry, warnings) = RegistryBuilder::new()
        .external(ext("lint"), probe("read"))
        .builtin(probe("read"))
        .build()
        .unwrap();
    assert_eq!(
        source_of(&registry, "read"),
        Some(ToolSource::Builtin),
        "registration order does not matter"
    );
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].skipped, ext("lint"));
    assert_eq!(warnings[0].kept, Some(ToolSource::Builtin));
    assert!(
        warnings[0].message.contains("explicit override"),
        "{}",
        warnings[0].message
    );
}

#[test]
fn an_explicit_override_lets_an_extension_replace_a_builtin() {
    let (registry, warnings) = RegistryBuilder::new()
        .builtin(probe("read"))
        .external(ext("better-read"), probe("read"))
        .allow_override("read")
        .build()
        .unwrap();
    assert!(warnings.is_empty());
    assert_eq!(source_of(&registry, "read"), Some(ext("better-read")));
}

#[test]
fn a_second_external_tool_with_a_taken_name_is_skipped_not_swapped() {
    let (registry, warnings) = RegistryBuilder::new()
        .external(ToolSource::Mcp("one".into()), probe("search"))
        .external(ToolSource::Mcp("two".into()), probe("search"))
        .build()
        .unwrap();
    assert_eq!(
        source_of(&registry, "search"),
        Some(ToolSource::Mcp("one".into()))
    );
    assert_eq!(warnings.len(), 1);
    // The same at run time: an MCP server joining cannot take a name.
    let warning = registry
        .register_external(ToolSource::Mcp("three".into()), probe("search"))
        .unwrap();
    assert!(warning.is_some());
    assert_eq!(
        source_of(&registry, "search"),
        Some(ToolSource::Mcp("one".into()))
    );
}

/// The names a runtime keeps for its own tools: whoever composes the registry says which.
const RESERVED: [&str; 2] = ["run_code", "tool_search"];

fn reserving() -> RegistryBuilder {
    RESERVED
        .iter()
        .fold(RegistryBuilder::new(), |builder, name| {
            builder.reserve(*name)
        })
}

#[test]
fn reserved_names_are_refused_to_ordinary_registration() {
    for reserved in RESERVED {
        // From an untrusted source: skipped, so one bad MCP server cannot stop the rest.
        let (registry, warnings) = reserving()
            .external(ext("x"), probe(reserved))
            .external(ext("x"), probe("fine"))
            .build()
            .unwrap();
        assert_eq!(registry.snapshot().names(), ["fine"]);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].message.contains("reserved"),
            "{}",
            warnings[0].message
        );
        // From a trusted source: a configuration error.
        let error = reserving().builtin(probe(reserved)).build().err().unwrap();
        assert_eq!(
            error,
            RegistryError::ReservedName {
                name: reserved.into()
            }
        );
        // Without the reservation the name is an ordinary one.
        let (free, _) = RegistryBuilder::new()
            .builtin(probe(reserved))
            .build()
            .unwrap();
        assert_eq!(free.snapshot().names(), [reserved]);
    }
    // Only the runtime installs them, and only under a reserved name.
    let (registry, _) = reserving().runtime_tool(probe("run_code")).build().unwrap();
    assert_eq!(source_of(&registry, "run_code"), Some(ToolSource::Runtime));
    let unreserved = reserving()
        .runtime_tool(probe("search"))
        .build()
        .err()
        .unwrap();
    assert_eq!(
        unreserved,
        RegistryError::NotReserved {
            name: "search".into()
        }
    );
    let late = registry.install_runtime_tool(probe("other")).err();
    assert_eq!(
        late,
        Some(RegistryError::NotReserved {
            name: "other".into()
        })
    );
    assert!(registry.install_runtime_tool(probe("tool_search")).is_ok());
}

#[test]
fn invalid_names_and_schemas_are_configuration_errors_for_trusted_tools() {
    let error = RegistryBuilder::new()
        .builtin(probe("has space"))
        .build()
        .err()
        .unwrap();
    assert_eq!(
        error,
        RegistryError::InvalidName {
            name: "has space".into()
        }
    );
    let bad_schema = Probe::with_spec(
        ToolSpec::builder("bad", "b", serde_json::json!({"type": "no-such-type"})).build(),
        Behaviour::Succeed,
    );
    let error = RegistryBuilder::new()
        .builtin(bad_schema.clone())
        .build()
        .err()
        .unwrap();
    assert!(
        matches!(error, RegistryError::InvalidSchema { ref name, which: "input", .. } if name == "bad"),
        "{error}"
    );
    // The same tool from an MCP server is skipped with the reason.
    let (registry, warnings) = RegistryBuilder::new()
        .external(ToolSource::Mcp("srv".into()), bad_schema)
        .build()
        .unwrap();
    assert!(registry.snapshot().is_empty());
    assert!(
        warnings[0]
            .message
            .contains("input schema of `bad` does not compile"),
        "{}",
        warnings[0].message
    );
    assert_eq!(warnings[0].kept, None);
}

#[test]
fn several_problems_are_reported_at_once() {
    let error = reserving()
        .builtin(probe("run_code"))
        .builtin(probe("bad name"))
        .build()
        .err()
        .unwrap();
    let RegistryError::Several(problems) = error else {
        panic!("expected several problems")
    };
    assert_eq!(problems.len(), 2);
}

#[test]
fn snapshots_are_immutable_and_sources_can_leave() {
    let (registry, _) = RegistryBuilder::new()
        .builtin(probe("read"))
        .external(ToolSource::Mcp("gh".into()), probe("mcp__gh__issue"))
        .build()
        .unwrap();
    let before = registry.snapshot();
    assert_eq!(
        registry.remove_source(&ToolSource::Mcp("gh".into())),
        vec!["mcp__gh__issue".to_owned()]
    );
    assert_eq!(
        before.names(),
        ["mcp__gh__issue", "read"],
        "an earlier snapshot keeps its tools"
    );
    assert_eq!(registry.snapshot().names(), ["read"]);
    let manifest = before.manifest();
    assert_eq!(manifest[0].source, ToolSource::Mcp("gh".into()));
    assert_eq!(manifest[0].version, "1");
}

#[test]
fn a_tool_the_builder_defers_waits_for_loading_whatever_its_spec_says() {
    let direct = Probe::with_spec(
        ToolSpec::builder("deploy", "d", object_schema()).build(),
        Behaviour::Succeed,
    );
    let (registry, _) = RegistryBuilder::new()
        .builtin(direct)
        .defer("deploy")
        .build()
        .unwrap();
    assert!(
        registry
            .snapshot()
            .resolve("deploy", CallOrigin::Model)
            .is_none()
    );
    let catalog = registry.deferred_catalog();
    assert_eq!(catalog.len(), 1);
    assert_eq!(catalog[0].spec().exposure(), Exposure::Deferred);
    registry.load_deferred(&["deploy"]);
    assert!(
        registry
            .snapshot()
            .resolve("deploy", CallOrigin::Model)
            .is_some()
    );
}

#[test]
fn deferred_tools_join_after_loading_and_hidden_tools_are_host_only() {
    let deferred = Probe::with_spec(
        ToolSpec::builder("deploy", "d", object_schema())
            .exposure(Exposure::Deferred)
            .build(),
        Behaviour::Succeed,
    );
    let hidden = Probe::with_spec(
        ToolSpec::builder("internal", "i", object_schema())
            .exposure(Exposure::Hidden)
            .build(),
        Behaviour::Succeed,
    );
    let (registry, _) = RegistryBuilder::new()
        .external(ext("x"), deferred)
        .external(ext("x"), hidden)
        .build()
        .unwrap();
    let first = registry.snapshot();
    assert!(first.resolve("deploy", CallOrigin::Model).is_none());
    assert_eq!(registry.deferred_catalog().len(), 1);
    assert_eq!(
        registry.load_deferred(&["deploy", "internal", "nope"]),
        vec!["deploy".to_owned()]
    );
    assert!(
        first.resolve("deploy", CallOrigin::Model).is_none(),
        "loading joins from the next snapshot"
    );
    assert!(
        registry
            .snapshot()
            .resolve("deploy", CallOrigin::Model)
            .is_some()
    );
    assert!(registry.deferred_catalog().is_empty());
    assert!(
        registry
            .snapshot()
            .resolve("internal", CallOrigin::Model)
            .is_none()
    );
    assert!(
        registry
            .snapshot()
            .resolve("internal", CallOrigin::Host)
            .is_some()
    );
    assert!(!registry.snapshot().names().contains(&"internal"));
}

#[test]
fn scopes_shadow_explicitly_and_restrict_what_they_inherit() {
    let (registry, _) = RegistryBuilder::new()
        .builtin(probe("read"))
        .builtin(probe("write"))
        .builtin(probe("bash"))
        .external(ToolSource::Mcp("gh".into()), probe("mcp__gh__issue"))
        .external(ToolSource::Mcp("gh".into()), probe("mcp__gh__pr"))
        .build()
        .unwrap();

    let scope = registry
        .scope()
        .deny([NamePattern::new("bash"), NamePattern::new("mcp__gh__pr")])
        .shadow(ext("sub-agent"), probe("read"))
        .add(ext("sub-agent"), probe("notes"))
        .build()
        .unwrap();
    let snapshot = scope.snapshot();
    assert_eq!(
        snapshot.names(),
        ["mcp__gh__issue", "notes", "read", "write"]
    );
    assert_eq!(
        snapshot
            .resolve("read", CallOrigin::Model)
            .unwrap()
            .source(),
        &ext("sub-agent")
    );
    assert_eq!(
        registry
            .snapshot()
            .resolve("read", CallOrigin::Model)
            .unwrap()
            .source(),
        &ToolSource::Builtin,
        "the parent is unchanged"
    );

    let read_only = registry
        .scope()
        .allow([NamePattern::new("read"), NamePattern::new("mcp__*")])
        .build()
        .unwrap();
    assert_eq!(
        read_only.snapshot().names(),
        ["mcp__gh__issue", "mcp__gh__pr", "read"]
    );

    // Nested scopes restrict further.
    let nested = Arc::new(read_only)
        .scope()
        .deny([NamePattern::new("mcp__gh__pr")])
        .build()
        .unwrap();
    assert_eq!(nested.snapshot().names(), ["mcp__gh__issue", "read"]);
}

#[test]
fn scopes_refuse_implicit_replacement_and_reserved_names() {
    let (registry, _) = reserving().builtin(probe("read")).build().unwrap();
    let implicit = registry
        .scope()
        .add(ext("x"), probe("read"))
        .build()
        .err()
        .unwrap();
    assert!(implicit.to_string().contains("use shadow"), "{implicit}");
    let nothing = registry
        .scope()
        .shadow(ext("x"), probe("write"))
        .build()
        .err()
        .unwrap();
    assert!(
        nothing.to_string().contains("nothing to shadow")
            || nothing.to_string().contains("has no tool"),
        "{nothing}"
    );
    let reserved = registry
        .scope()
        .add(ext("x"), probe("tool_search"))
        .build()
        .err()
        .unwrap();
    assert_eq!(
        reserved,
        RegistryError::ReservedName {
            name: "tool_search".into()
        }
    );
}

#[test]
fn run_time_registration_follows_the_same_rules_and_an_override_can_be_undone() {
    let (registry, _) = RegistryBuilder::new()
        .builtin(probe("read"))
        .builtin(probe("grep"))
        .allow_override("grep")
        .build()
        .unwrap();
    let mcp = ToolSource::Mcp("fs".into());
    // No override configured for `read`: skipped, the built-in stays.
    let warning = registry
        .register_external(mcp.clone(), probe("read"))
        .unwrap();
    assert_eq!(warning.map(|w| w.kept), Some(Some(ToolSource::Builtin)));
    assert_eq!(source_of(&registry, "read"), Some(ToolSource::Builtin));
    // Override configured for `grep`: replaced while the server is there...
    assert_eq!(
        registry
            .register_external(mcp.clone(), probe("grep"))
            .unwrap(),
        None
    );
    assert_eq!(source_of(&registry, "grep"), Some(mcp.clone()));
    // ...and the built-in comes back when it leaves.
    assert_eq!(registry.remove_source(&mcp), vec!["grep".to_owned()]);
    assert_eq!(source_of(&registry, "grep"), Some(ToolSource::Builtin));
    // Trusted sources cannot join at run time.
    assert!(
        registry
            .register_external(ToolSource::Builtin, probe("x"))
            .is_err()
    );
}

#[test]
fn a_scope_loads_deferred_tools_for_itself_only() {
    let deferred = Probe::with_spec(
        ToolSpec::builder("deploy", "d", object_schema())
            .exposure(Exposure::Deferred)
            .build(),
        Behaviour::Succeed,
    );
    let own_deferred = Probe::with_spec(
        ToolSpec::builder("rollback", "r", object_schema())
            .exposure(Exposure::Deferred)
            .build(),
        Behaviour::Succeed,
    );
    let (registry, _) = RegistryBuilder::new()
        .external(ext("x"), deferred)
        .build()
        .unwrap();
    let scope = registry
        .scope()
        .add(ext("sub"), own_deferred)
        .build()
        .unwrap();
    assert!(scope.snapshot().is_empty());
    assert_eq!(
        scope.load_deferred(&["deploy", "rollback", "nope"]),
        ["deploy", "rollback"]
    );
    assert_eq!(scope.snapshot().names(), ["deploy", "rollback"]);
    assert!(
        registry.snapshot().is_empty(),
        "the parent does not see the scope's loads"
    );
    assert!(
        scope.load_deferred(&["deploy"]).is_empty(),
        "already loaded"
    );
}

#[tokio::test]
async fn in_code_mode_the_model_sees_run_code_alone_and_programs_see_the_rest() {
    use toolrail_tools_core::{CallRequest, Pipeline, pipeline::BatchControl};
    let run_code = Probe::with_spec(
        ToolSpec::builder("run_code", "runs a program", object_schema())
            .model_only()
            .build(),
        Behaviour::Succeed,
    );
    let (registry, _) = reserving()
        .builtin(probe("read"))
        .builtin(probe("grep"))
        .runtime_tool(run_code)
        .build()
        .unwrap();
    let tools = registry.snapshot().for_code_mode("run_code");
    assert_eq!(tools.names(), ["run_code"]);
    assert!(tools.is_code_only("read") && !tools.is_code_only("run_code"));
    let for_programs: Vec<&str> = tools.for_programs().iter().map(|e| e.name()).collect();
    assert_eq!(for_programs, ["grep", "read", "run_code"]);
    assert!(tools.resolve("read", CallOrigin::Model).is_none());
    assert!(tools.resolve("read", CallOrigin::Code).is_some());
    assert!(
        tools.resolve("run_code", CallOrigin::Code).is_none(),
        "a program cannot start another program"
    );

    let pipeline = Pipeline::builder(Arc::new(toolrail_session_log::MemorySink::new())).build();
    let direct = pipeline
        .execute_one(
            &tools,
            CallRequest::new("c1", 0, "read", "{}"),
            &BatchControl::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        direct.record().error_code().map(|c| c.as_str()),
        Some("UNKNOWN_TOOL")
    );
    assert!(
        direct
            .record()
            .text()
            .contains("call it from a program through `run_code`"),
        "{}",
        direct.record().text()
    );
    // The crate that owns code mode says it in its own words.
    let worded = tools
        .clone()
        .with_code_only_refusal(|tool, entry| format!("`{tool}`: write a program for `{entry}`"));
    assert_eq!(
        worded.code_only_refusal("read").as_deref(),
        Some("`read`: write a program for `run_code`")
    );
    assert_eq!(worded.code_only_refusal("run_code"), None);
    let from_program = pipeline
        .execute_one(
            &tools,
            CallRequest::new("c1:code:1", 0, "read", "{}").from_code(),
            &BatchControl::default(),
        )
        .await
        .unwrap();
    assert!(
        !from_program.record().is_error(),
        "{:?}",
        from_program.record()
    );
}

/// Many tools of one source join in one change: one new snapshot, the same rules per tool
/// (a taken name is skipped with its warning), the order kept.
#[test]
fn many_external_tools_join_in_one_change_under_the_same_rules() {
    let (registry, _) = RegistryBuilder::new()
        .builtin(probe("read"))
        .build()
        .unwrap();
    let before = registry.snapshot();
    let source = ToolSource::Mcp("many".into());
    let tools: Vec<Arc<dyn toolrail_tools_core::Tool>> = ["mcp__many__a", "read", "mcp__many__b"]
        .into_iter()
        .map(|name| probe(name) as Arc<dyn toolrail_tools_core::Tool>)
        .collect();
    let warnings = registry.register_externals(&source, tools).unwrap();
    assert_eq!(warnings.len(), 3);
    assert!(warnings[0].is_none() && warnings[2].is_none());
    assert_eq!(warnings[1].as_ref().map(|w| w.name.as_str()), Some("read"));
    assert_eq!(
        registry.snapshot().names(),
        ["mcp__many__a", "mcp__many__b", "read"]
    );
    assert_eq!(source_of(&registry, "read"), Some(ToolSource::Builtin));
    assert!(!before.is_same_snapshot(&registry.snapshot()));
    assert!(registry.snapshot().is_same_snapshot(&registry.snapshot()));
    let trusted = registry.register_externals(&ToolSource::Builtin, Vec::new());
    assert!(matches!(trusted, Err(RegistryError::Scope { .. })));
}
