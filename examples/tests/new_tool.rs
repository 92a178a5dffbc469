//! A new tool with facts of its own, added the way a stranger adds one: a `web_fetch`-like
//! tool with web details and a code of its own, written against the facade's public API
//! only (nothing outside this file changes), run by an agent, and drawn as its own card.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;

use toolrail::details::{self, Details};
use toolrail::layers::presenters::{CardBody, CardKind, CardStatus, Presenters, render_plain};
use toolrail::prelude::*;
use toolrail::scenario::ScriptedModel;

/// The pages this tool can fetch, by address; any other host is blocked.
struct WebFetch {
    pages: BTreeMap<&'static str, &'static str>,
}

/// The tool's own failure: the address is not one it may fetch.
const BLOCKED: ToolCode = toolrail::tool_code!("WEB_FETCH_BLOCKED");

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WebFetchArgs {
    /// The address to fetch.
    url: String,
}

impl TypedTool for WebFetch {
    type Args = WebFetchArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<WebFetchArgs>("web_fetch", "Fetch a web page's text.")
            .read_only()
            .parallel_safe()
            .build()
    }

    async fn run(&self, _ctx: &ToolContext, args: WebFetchArgs) -> ToolResult {
        let Some(html) = self.pages.get(args.url.as_str()) else {
            return Err(ToolFailure::with_code(
                BLOCKED,
                format!(
                    "`{}` is not on the list of pages this tool may fetch",
                    args.url
                ),
            ));
        };
        let title = html
            .split_once("<title>")
            .and_then(|(_, rest)| rest.split_once("</title>"))
            .map(|(title, _)| title.to_owned());
        let text: String = html
            .split('>')
            .filter_map(|part| part.split('<').next())
            .collect();
        Ok(ToolOutput::text(text.clone()).with_details(details::Web {
            url: args.url,
            status: Some(200),
            title,
            excerpt: Some(text.chars().take(40).collect()),
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_s_web_fetch_tool_gets_its_own_card_and_code() {
    let folder = tempfile::tempdir().unwrap();
    let tool = WebFetch {
        pages: BTreeMap::from([(
            "https://example.test/",
            "<html><title>Example</title><p>An example page.</p></html>",
        )]),
    };
    let model = Arc::new(ScriptedModel::new([
        ScriptedModel::tool_call("c1", "web_fetch", r#"{"url": "https://example.test/"}"#),
        ScriptedModel::tool_call("c2", "web_fetch", r#"{"url": "https://elsewhere.test/"}"#),
        ScriptedModel::text("One page fetched, one blocked."),
    ]));
    let agent = Agent::builder()
        .workspace([folder.path()])
        .store(Store::jsonl(folder.path().join("sessions")).unwrap())
        .tools(["read"])
        .tool(Typed::new(tool))
        .model_client(model)
        .build()
        .await
        .unwrap();
    let answer = agent.prompt("Fetch both pages.").await.unwrap();
    assert_eq!(answer.text, "One page fetched, one blocked.");
    let [fetched, blocked] = answer.results.as_slice() else {
        panic!("two results: {:?}", answer.results);
    };

    // The details are the tool's, typed, and its card is the web card they name.
    let Some(Details::Web(web)) = &fetched.details else {
        panic!("web details: {:?}", fetched.details);
    };
    assert_eq!(web.title.as_deref(), Some("Example"));
    let presenters = Presenters::new();
    let card = presenters.result(
        "web_fetch",
        &serde_json::json!({"url": "https://example.test/"}),
        fetched,
    );
    assert_eq!(card.kind, CardKind::Web);
    assert_eq!(card.title, "web_fetch https://example.test/");
    assert!(
        matches!(&card.body, CardBody::Web { status: Some(200), title: Some(title), .. } if title == "Example"),
        "{:?}",
        card.body
    );
    let shown = render_plain(&card);
    assert!(shown.contains("Example"), "{shown}");

    // Its own code reaches the model and the card as it gave it.
    assert_eq!(
        blocked.error_code().map(|code| code.as_str()),
        Some("WEB_FETCH_BLOCKED")
    );
    let card = presenters.result(
        "web_fetch",
        &serde_json::json!({"url": "https://elsewhere.test/"}),
        blocked,
    );
    assert!(
        matches!(&card.status, CardStatus::Failed { code, .. } if code == "WEB_FETCH_BLOCKED"),
        "{:?}",
        card.status
    );
}
