//! The approvals endpoint answered from `curl` on 127.0.0.1, as a person's script would:
//! a missing or wrong token is 401 and changes nothing; the pending request is listed; an
//! answer decides it once; an answer for an unknown or decided approval is 409 and changes
//! nothing; a request the asker stopped waiting for is gone; no endpoint means no yes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolrail_interaction::{ApprovalEndpoint, EndpointError};
use toolrail_tools_core::context::CallIdentity;
use toolrail_tools_core::{ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken};

fn request(call: &str) -> ApprovalRequest {
    ApprovalRequest {
        identity: CallIdentity {
            call_id: call.into(),
            index: 0,
            name: "bash".to_owned(),
            turn: None,
            step: None,
            source: None,
            version: None,
        },
        tool_kind: "execute",
        subject: Some("git push".to_owned()),
        arguments: Arc::new(json!({"command": "git push"})),
        reason: "pushing needs a yes".to_owned(),
        session_key: Some("bash(git push)".to_owned()),
        preview: None,
    }
}

/// `curl` with `args`, on a thread (it blocks): the status code and the body as JSON.
async fn curl(args: Vec<String>) -> (u16, Value) {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-s", "-m", "10", "-w", "\n%{http_code}"])
            .args(args)
            .output()
            .expect("curl runs (CI installs it)")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (
        status.trim().parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn url(endpoint: &ApprovalEndpoint, path: &str) -> String {
    format!("http://{}{path}", endpoint.address())
}

fn bearer(token: &str) -> Vec<String> {
    vec!["-H".to_owned(), format!("Authorization: Bearer {token}")]
}

fn post(endpoint: &ApprovalEndpoint, token: &str, body: &str) -> Vec<String> {
    let mut args = bearer(token);
    args.extend([
        "-X".to_owned(),
        "POST".to_owned(),
        "-H".to_owned(),
        "content-type: application/json".to_owned(),
        "--data".to_owned(),
        body.to_owned(),
        url(endpoint, "/answer"),
    ]);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_from_curl_with_the_token_only_and_once() {
    let (service, endpoint) = ApprovalEndpoint::start("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let service = Arc::new(service);
    let asking = {
        let service = Arc::clone(&service);
        tokio::spawn(async move {
            let cancel = CancellationToken::new();
            service.request(&request("c1"), &cancel).await
        })
    };
    let token = endpoint.token().to_owned();
    // The request reaches the endpoint's book.
    let mut listed = Value::Null;
    for _ in 0..100 {
        let mut args = bearer(&token);
        args.push(url(&endpoint, "/pending"));
        let (status, body) = curl(args).await;
        assert_eq!(status, 200, "{body}");
        if body["pending"]
            .as_array()
            .is_some_and(|list| !list.is_empty())
        {
            listed = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pending = &listed["pending"][0];
    assert_eq!(pending["call_id"], "c1", "{listed}");
    assert_eq!(pending["subject"], "git push");
    assert_eq!(pending["session_key"], "bash(git push)");
    let id = pending["id"].as_u64().unwrap();

    // No token, a wrong one: 401, and nothing is decided.
    let (status, _) = curl(vec![url(&endpoint, "/pending")]).await;
    assert_eq!(status, 401);
    let wrong = "0".repeat(64);
    let (status, _) = curl(post(
        &endpoint,
        &wrong,
        &format!(r#"{{"id": {id}, "answer": "allow_once"}}"#),
    ))
    .await;
    assert_eq!(status, 401);
    assert!(!asking.is_finished(), "a refused answer decided nothing");

    // Malformed: 400. Unknown id: 409. Both change nothing.
    let (status, _) = curl(post(
        &endpoint,
        &token,
        r#"{"id": 1, "answer": "yes please"}"#,
    ))
    .await;
    assert_eq!(status, 400);
    let (status, body) = curl(post(
        &endpoint,
        &token,
        r#"{"id": 999, "answer": "allow_once"}"#,
    ))
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(!asking.is_finished());

    let (status, body) = curl(post(
        &endpoint,
        &token,
        &format!(r#"{{"id": {id}, "answer": "reject", "reason": "not today"}}"#),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        asking.await.unwrap(),
        ApprovalAnswer::Rejected {
            reason: Some("not today".to_owned())
        }
    );
    // Already decided: 409, the answer stands.
    let (status, body) = curl(post(
        &endpoint,
        &token,
        &format!(r#"{{"id": {id}, "answer": "allow_once"}}"#),
    ))
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("already decided"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answer_uses_the_offered_key_and_a_withdrawn_request_is_gone() {
    let (service, endpoint) = ApprovalEndpoint::start("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let service = Arc::new(service);
    let token = endpoint.token().to_owned();
    let cancel = CancellationToken::new();
    let withdrawn = {
        let (service, cancel) = (Arc::clone(&service), cancel.clone());
        tokio::spawn(async move { service.request(&request("c1"), &cancel).await })
    };
    let kept = {
        let service = Arc::clone(&service);
        tokio::spawn(async move {
            service
                .request(&request("c2"), &CancellationToken::new())
                .await
        })
    };
    let listed = loop {
        let mut args = bearer(&token);
        args.push(url(&endpoint, "/pending"));
        let (_, body) = curl(args).await;
        if body["pending"]
            .as_array()
            .is_some_and(|list| list.len() == 2)
        {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    cancel.cancel();
    assert_eq!(withdrawn.await.unwrap(), ApprovalAnswer::Cancelled);
    let id_of = |call: &str| {
        listed["pending"]
            .as_array()
            .unwrap()
            .iter()
            .find(|pending| pending["call_id"] == call)
            .and_then(|pending| pending["id"].as_u64())
            .unwrap()
    };
    let first = id_of("c1");
    let (status, body) = curl(post(
        &endpoint,
        &token,
        &format!(r#"{{"id": {first}, "answer": "allow_once"}}"#),
    ))
    .await;
    assert_eq!(
        status, 409,
        "a withdrawn request cannot be approved: {body}"
    );
    let second = id_of("c2");
    let (status, _) = curl(post(
        &endpoint,
        &token,
        &format!(r#"{{"id": {second}, "answer": "allow_for_session"}}"#),
    ))
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        kept.await.unwrap(),
        ApprovalAnswer::AllowedForSession {
            key: "bash(git push)".to_owned()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_loopback_and_no_endpoint_is_no_yes() {
    let outside = ApprovalEndpoint::start("0.0.0.0:0".parse().unwrap(), None).await;
    assert!(
        matches!(outside, Err(EndpointError::NotLoopback(_))),
        "{outside:?}"
    );
    let (service, endpoint) = ApprovalEndpoint::start("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    drop(endpoint);
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        service.request(&request("c1"), &CancellationToken::new()),
    )
    .await
    .unwrap();
    // Whether the request met the endpoint going or gone, it is never a yes.
    assert!(
        matches!(
            answer,
            ApprovalAnswer::Unavailable | ApprovalAnswer::Cancelled
        ),
        "{answer:?}"
    );
}
