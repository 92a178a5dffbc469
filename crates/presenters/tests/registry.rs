//! Presenters a tool registers: they show that tool's calls; one that panics is replaced by
//! the generic card for that call, never a crash.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolrail_presenters::{
    Card, CardBody, CardKind, CardStatus, Presenter, Presenters, present_call,
};
use toolrail_session_log::{ContentBlock, ToolResultRecord};

struct Deploy;

impl Presenter for Deploy {
    fn present_call(&self, tool: &str, args: &Value) -> Card {
        Card {
            title: format!("deploy to {}", args["target"].as_str().unwrap_or("?")),
            ..present_call(CardKind::Generic, tool, args)
        }
    }

    fn present_result(&self, tool: &str, args: &Value, result: &ToolResultRecord) -> Card {
        Card {
            status: CardStatus::Succeeded,
            body: CardBody::Generic {
                arguments: String::new(),
                output: Some(result.text()),
            },
            ..self.present_call(tool, args)
        }
    }
}

struct Broken;

impl Presenter for Broken {
    fn present_call(&self, _tool: &str, _args: &Value) -> Card {
        panic!("broken presenter")
    }

    fn present_result(&self, _: &str, _: &Value, _: &ToolResultRecord) -> Card {
        panic!("broken presenter")
    }
}

#[test]
fn a_registered_presenter_shows_its_tool_and_a_broken_one_falls_back() {
    let presenters = Presenters::new()
        .register("deploy", Arc::new(Deploy))
        .register("bash", Arc::new(Broken));
    let args = json!({"target": "staging"});
    assert_eq!(presenters.call("deploy", &args).title, "deploy to staging");
    let result = ToolResultRecord::success(vec![ContentBlock::text("done")]);
    let card = presenters.result("deploy", &args, &result);
    assert_eq!(card.title, "deploy to staging");
    assert_eq!(card.status, CardStatus::Succeeded);
    // The broken presenter's tool still gets a card: the generic one.
    let card = presenters.result("bash", &json!({"command": "ls"}), &result);
    assert_eq!(card.kind, CardKind::Generic);
    assert_eq!(card.status, CardStatus::Succeeded);
    assert_eq!(presenters.call("bash", &json!({})).kind, CardKind::Generic);
    // Tools without a registered presenter keep their built-in card.
    assert_eq!(
        presenters.call("grep", &json!({"pattern": "x"})).kind,
        CardKind::Search
    );
}
