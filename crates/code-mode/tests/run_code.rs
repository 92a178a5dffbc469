//! `run_code` with the JavaScript runtime, end to end through the pipeline: values and
//! output come back; every binding call is a call of its own, logged with its result; the
//! scheduler's rules hold inside a run; refusals are catchable; limits end programs with
//! `CODE_RUN_FAILED (<kind>)` and every binding call still commits an honest outcome.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolrail_code_mode::{CodeMode, Limits};
use toolrail_session_log::BoxFuture;
use toolrail_session_log::{ContentBlock, EventData};
use toolrail_tools_core::{
    CallView, HookError, PreExecuteDecision, PreExecuteHook, PreNext,
    pipeline::{BatchControl, DEFAULT_CONTENT_TEXT_CAP},
};

mod support;

use support::{Harness, code};

fn harness(limits: Limits) -> Harness {
    harness_with(limits, None)
}

/// Refuses `probe` calls whose value is `"forbidden"`, as a permission rule would.
struct DenyForbidden;

impl PreExecuteHook for DenyForbidden {
    fn name(&self) -> &str {
        "deny-forbidden"
    }

    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            if call.arguments.get("value") == Some(&json!("forbidden")) {
                return Ok(PreExecuteDecision::Deny {
                    reason: "probing the forbidden is not allowed".to_owned(),
                });
            }
            next.run().await
        })
    }
}

fn harness_with(limits: Limits, hook: Option<Arc<dyn PreExecuteHook>>) -> Harness {
    support::session(&CodeMode::new(limits), hook, "javascript")
}

fn limits() -> Limits {
    Limits {
        wall: Duration::from_secs(10),
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_combines_binding_values_and_every_call_is_logged_with_its_result() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
            const a = await probe({value: {n: 2}});
            const b = await probe({value: {n: 3}});
            console.log("sum is", a.n + b.n);
            return {sum: a.n + b.n};
            "#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(result.record().value, Some(json!({"sum": 5})));
    assert_eq!(result.record().text(), "sum is 5\n[returned] {\"sum\":5}");
    let details = serde_json::to_value(result.record().details.as_ref().unwrap()).unwrap();
    assert_eq!(details["type"], "code-run");
    assert_eq!(details["sub_calls"][1]["call_id"], "c1:code:2");
    // Each binding call: dispatch start, the pipeline's own call/start/result, then the
    // dispatch with its result — under its own id, in submission order.
    let trail = h.trail();
    let of = |id: &str| -> Vec<String> {
        trail
            .iter()
            .filter(|(_, call)| call == id)
            .map(|(kind, _)| kind.clone())
            .collect()
    };
    for id in ["c1:code:1", "c1:code:2"] {
        assert_eq!(
            of(id),
            [
                "tool/code-dispatch-start",
                "tool/call",
                "tool/start",
                "tool/result",
                "tool/code-dispatch"
            ],
            "{id}"
        );
    }
    let dispatched = h
        .log
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::CodeDispatch(dispatch)
                if event.call_id.as_ref().unwrap().as_str() == "c1:code:1" =>
            {
                Some(dispatch)
            }
            _ => None,
        });
    let dispatched = dispatched.unwrap();
    assert_eq!(dispatched.parent_call_id.as_str(), "c1");
    assert_eq!(dispatched.result.value, Some(json!({"n": 2})));
    // Replay rebuilds every sub-call of the run from the log alone.
    let records = toolrail_session_log::call_records(&h.log.events());
    let parent = records.iter().find(|r| r.call_id.as_str() == "c1").unwrap();
    let rebuilt: Vec<(String, Option<serde_json::Value>)> = parent
        .dispatches
        .iter()
        .map(|dispatch| {
            (
                dispatch.call_id.to_string(),
                dispatch
                    .settled
                    .as_ref()
                    .and_then(|settled| settled.result.value.clone()),
            )
        })
        .collect();
    assert_eq!(
        rebuilt,
        [
            ("c1:code:1".to_owned(), Some(json!({"n": 2}))),
            ("c1:code:2".to_owned(), Some(json!({"n": 3})))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_safe_bindings_overlap_and_an_exclusive_one_runs_alone() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
            await Promise.all([
              probe({sleep_ms: 150}), probe({sleep_ms: 150}), probe({sleep_ms: 150}),
            ]);
            await Promise.all([probe({sleep_ms: 50, concurrency: "exclusive"}), probe({sleep_ms: 50})]);
            return "done";
            "#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    let trail: Vec<(String, String)> = h
        .trail()
        .into_iter()
        .filter(|(kind, _)| kind == "tool/start" || kind == "tool/result")
        .filter(|(_, id)| id.starts_with("c1:code:"))
        .collect();
    let position = |kind: &str, id: &str| {
        trail
            .iter()
            .position(|(k, i)| k == kind && i == id)
            .unwrap()
    };
    // The three shared calls all started before any of them finished.
    let last_start = ["c1:code:1", "c1:code:2", "c1:code:3"]
        .map(|id| position("tool/start", id))
        .into_iter()
        .max()
        .unwrap();
    let first_result = ["c1:code:1", "c1:code:2", "c1:code:3"]
        .map(|id| position("tool/result", id))
        .into_iter()
        .min()
        .unwrap();
    assert!(last_start < first_result, "{trail:?}");
    // The exclusive call ran alone: the next call started only after it committed.
    assert!(
        position("tool/result", "c1:code:4") < position("tool/start", "c1:code:5"),
        "{trail:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_binding_is_catchable_and_an_oversized_reply_fails_only_that_binding() {
    let h = harness(Limits {
        binding_bytes: 1_000,
        ..limits()
    });
    let result = h
        .run(
            r#"
            const seen = [];
            try { await probe({fail: "boom"}); } catch (e) { seen.push(e.code + ": " + e.message); }
            try { await probe({output_bytes: 5000}); } catch (e) { seen.push(e.code); }
            try { await teleport({}); } catch (e) { seen.push(e.name); }
            seen.push((await probe({value: "still here"})));
            return seen;
            "#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(
        result.record().value,
        Some(json!([
            "TOOL_FAILED: boom",
            "CODE_BINDING_TOO_LARGE",
            "ReferenceError",
            "still here"
        ]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_gets_the_whole_text_while_its_logged_result_is_capped_for_the_model() {
    // 100 KB of text: over the model's 64 KiB cap, within the 256 KiB a binding may return.
    let h = harness(limits());
    let result = h
        .run(
            r#"
            const text = await probe({output_bytes: 100000});
            return text.length;
            "#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert_eq!(result.record().value, Some(json!(100_000)));
    let dispatched = h
        .log
        .events()
        .into_iter()
        .find_map(|event| match event.data {
            EventData::CodeDispatch(dispatch) => Some(dispatch),
            _ => None,
        })
        .unwrap();
    let logged = &dispatched.result;
    assert!(logged.text().len() <= DEFAULT_CONTENT_TEXT_CAP);
    assert!(logged.text().contains(" bytes left out here"));
    assert_eq!(
        logged.elided[0].whole,
        Some(ContentBlock::text("x".repeat(100_000)))
    );
    assert_eq!(logged.whole_text(), "x".repeat(100_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_denied_by_policy_is_catchable_and_never_runs() {
    let h = harness_with(limits(), Some(Arc::new(DenyForbidden)));
    let result = h
        .run(
            r#"
            let refused;
            try { await probe({value: "forbidden", marker: true}); } catch (e) { refused = e.code + ": " + e.message; }
            return [refused, await probe({value: "allowed"})];
            "#,
        )
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    let value = result.record().value.clone().unwrap();
    assert!(
        value[0].as_str().unwrap().starts_with("POLICY_DENIED: ")
            && value[0].as_str().unwrap().contains("probing the forbidden"),
        "{value}"
    );
    assert_eq!(value[1], json!("allowed"));
    // The refused call was recorded and answered, but never started.
    let trail = h.trail();
    assert!(trail.contains(&("tool/call".to_owned(), "c1:code:1".to_owned())));
    assert!(!trail.contains(&("tool/start".to_owned(), "c1:code:1".to_owned())));
    assert_eq!(h.results_of("c1:code:1"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_end_programs_with_their_kind() {
    let h = harness(Limits {
        wall: Duration::from_millis(400),
        memory_bytes: 16 << 20,
        ..Limits::default()
    });
    for (program, kind) in [
        ("while (true) {}", "CODE_RUN_FAILED (timeout)"),
        (
            "const hog = []; while (true) { hog.push(new Array(100000).fill(7)); }",
            "CODE_RUN_FAILED (memory)",
        ),
        ("return (", "CODE_RUN_FAILED (syntax)"),
        ("throw new Error('nope')", "CODE_RUN_FAILED (exception)"),
    ] {
        h.run_fails_with(program, kind).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_waiting_past_its_wall_time_ends_and_its_binding_still_commits() {
    let h = harness(Limits {
        wall: Duration::from_millis(1_000),
        ..Limits::default()
    });
    let result = h.run("await probe({sleep_ms: 30000}); return 1;").await;
    assert_eq!(code(&result).as_deref(), Some("CODE_RUN_FAILED"));
    assert!(
        result.record().text().contains("(timeout)"),
        "{}",
        result.record().text()
    );
    // The binding call was stopped and committed an honest outcome before run_code returned.
    assert_eq!(h.results_of("c1:code:1"), 1, "{:?}", h.trail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_program_lists_the_binding_calls_that_had_effects() {
    let h = harness(limits());
    let result = h
        .run(
            r#"
            await probe({effects: ["wrote a"]});
            await probe({value: 1});
            throw new Error("changed my mind");
            "#,
        )
        .await;
    let text = result.record().text();
    assert_eq!(code(&result).as_deref(), Some("CODE_RUN_FAILED"));
    assert!(
        text.contains("binding calls that had effects, not rolled back: c1:code:1 (probe)"),
        "{text}"
    );
    assert!(!text.contains("c1:code:2"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_settles_its_binding_calls() {
    let h = harness(limits());
    let control = BatchControl::default();
    let cancel = control.cancel.clone();
    let log = h.log.clone();
    let canceller = tokio::spawn(async move {
        // Cancel once both binding calls are running.
        for _ in 0..1_000 {
            let started = log
                .events()
                .iter()
                .filter(|event| event.data.kind() == "tool/start")
                .count();
            if started >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    });
    let result = h
        .run_with(
            "await Promise.all([probe({sleep_ms: 30000}), probe({sleep_ms: 30000})]); return 1;",
            &control,
        )
        .await;
    canceller.await.unwrap();
    assert!(result.record().is_error(), "{:?}", result.record());
    assert_eq!(
        code(&result).as_deref(),
        Some("ABORTED"),
        "{}",
        result.record().text()
    );
    assert_eq!(h.results_of("c1:code:1"), 1, "{:?}", h.trail());
    assert_eq!(h.results_of("c1:code:2"), 1, "{:?}", h.trail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_bindings_run_at_once_than_the_cap() {
    // Five 100 ms bodies two at a time take three rounds: at least 300 ms, however fast the
    // machine (a lower bound only, which noise cannot break).
    let h = harness(Limits {
        max_parallel: 2,
        ..limits()
    });
    let started = std::time::Instant::now();
    let result = h
        .run("await Promise.all([1, 2, 3, 4, 5].map(() => probe({sleep_ms: 100}))); return 1;")
        .await;
    assert_eq!(code(&result), None, "{}", result.record().text());
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(h.results_of("c1:code:5"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_cannot_start_a_program_and_deep_recursion_is_a_memory_failure() {
    let h = harness(limits());
    let result = h
        .run("try { await run_code({code: '1', description: 'x'}); } catch (e) { return e.name; }")
        .await;
    assert_eq!(
        result.record().value,
        Some(json!("ReferenceError")),
        "no SDK function for it"
    );
    let result = h
        .run("try { await __call('run_code', {code: '1', description: 'x'}); } catch (e) { return e.code; }")
        .await;
    assert_eq!(
        result.record().value,
        Some(json!("UNKNOWN_TOOL")),
        "{}",
        result.record().text()
    );
    let result = h.run("const f = (n) => f(n + 1) + 1; return f(0);").await;
    assert!(
        result.record().text().contains("CODE_RUN_FAILED (memory)"),
        "{}",
        result.record().text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_and_the_returned_value_are_capped() {
    let h = harness(Limits {
        output_bytes: 100,
        ..limits()
    });
    let result = h
        .run("for (let i = 0; i < 50; i++) { console.log('line ' + i); } return 1;")
        .await;
    let text = result.record().text();
    assert!(
        text.contains("[output cut: over the cap]") && !text.contains("line 49"),
        "{text}"
    );
    let result = h.run("return 'x'.repeat(1000);").await;
    assert!(
        result.record().text().contains("CODE_RUN_FAILED (output)"),
        "{}",
        result.record().text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_in_code_mode_offers_run_code_with_its_sdk_and_refuses_direct_calls() {
    use toolrail_agent_loop::{AgentLoop, LoopConfig, Scheduler, SchedulerConfig, ScriptedModel};
    use toolrail_code_mode::PresentationMode;
    use toolrail_session_log::{
        ContentBlock,
        event::{AssistantBlock, AssistantMessage, StopReason},
    };

    let h = harness(limits());
    let call = |id: &str, name: &str, args: serde_json::Value| AssistantBlock::ToolCall {
        call_id: id.into(),
        name: name.to_owned(),
        arguments_raw: args.to_string(),
    };
    let model = Arc::new(ScriptedModel::new([AssistantMessage {
        blocks: vec![
            call("d1", "probe", json!({})),
            call(
                "d2",
                "run_code",
                json!({"code": "return (await probe({value: 7}));", "description": "x"}),
            ),
        ],
        stop_reason: StopReason::ToolCalls,
    }]));
    let mut agent = AgentLoop::new(
        h.registry.clone(),
        Scheduler::new(Arc::clone(&h.pipeline), SchedulerConfig::default()),
        h.log.clone(),
        model.clone(),
        LoopConfig {
            presentation: Some(PresentationMode::Code.presentation()),
            ..LoopConfig::default()
        },
    );
    agent
        .run_turn(vec![ContentBlock::text("go")], Default::default(), None)
        .await
        .unwrap();
    let request = &model.requests()[0];
    let offered: Vec<&str> = request
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(offered, ["run_code"]);
    assert!(
        request
            .system
            .as_deref()
            .unwrap_or_default()
            .contains("async function probe(args)"),
        "{:?}",
        request.system
    );
    let results: Vec<(String, Option<String>, Option<serde_json::Value>)> = h
        .log
        .events()
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::ToolResult(record) => Some((
                event.call_id.map(|id| id.to_string()).unwrap_or_default(),
                record.error_code().map(ToString::to_string),
                record.value.clone(),
            )),
            _ => None,
        })
        .filter(|(id, _, _)| id == "d1" || id == "d2")
        .collect();
    assert_eq!(
        results,
        [
            ("d1".to_owned(), Some("UNKNOWN_TOOL".to_owned()), None),
            ("d2".to_owned(), None, Some(json!(7)))
        ]
    );
}

/// JSON.stringify would turn NaN into null and a function into nothing: such a value is
/// refused by name, never changed on its way out of the program or into a binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_json_cannot_carry_are_refused_by_name_not_changed() {
    let h = harness(limits());
    for (program, expected) in [
        ("return NaN;", "the program's return value holds NaN,"),
        ("return [1, Infinity];", "holds Infinity (under key \"1\")"),
        ("return 10n;", "BigInt"),
        ("const a = {}; a.self = a; return a;", "circular reference"),
        (
            "return () => 1;",
            "the program's return value holds a function",
        ),
        (
            "return Symbol('x');",
            "the program's return value holds a symbol",
        ),
        ("return {f: () => 1};", "holds a function (under key \"f\")"),
        (
            "return [1, Symbol('x')];",
            "holds a symbol (under key \"1\")",
        ),
        (
            "return {m: new Map([[1, 2]])};",
            "holds a Map (under key \"m\")",
        ),
        ("return [new Set([1])];", "holds a Set (under key \"0\")"),
        (
            "return await probe({value: NaN});",
            "the arguments of probe holds NaN (under key \"value\")",
        ),
        ("return {['k\\udc00']: 1};", "could not be read as JSON"),
    ] {
        h.run_fails_with(program, expected).await;
    }
    let dispatched = h
        .trail()
        .iter()
        .filter(|(kind, _)| kind == "tool/code-dispatch-start")
        .count();
    assert_eq!(dispatched, 0, "a refused argument never reaches a binding");
    // A string that is not Unicode (a lone surrogate) comes back well formed.
    let result = h.run("return 'a\\ud800b';").await;
    assert_eq!(result.record().value, Some(json!("a\u{fffd}b")));
}
