//! Every answer path of the approval services: answered, expired, dropped, cancelled batch,
//! no listener, no terminal; scripted answers in order and closed when they run out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Cursor;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use toolrail_interaction::{ChannelApprovals, ScriptedApprovals, TerminalApprovals};
use toolrail_tools_core::{
    ApprovalAnswer, ApprovalRequest, ApprovalService, CancellationToken, context::CallIdentity,
};

fn request(call_id: &str, session_key: Option<&str>) -> ApprovalRequest {
    ApprovalRequest {
        identity: CallIdentity {
            call_id: call_id.into(),
            index: 0,
            name: "bash".to_owned(),
            turn: None,
            step: None,
            source: None,
            version: None,
        },
        tool_kind: "execute",
        subject: Some("git push".to_owned()),
        arguments: json!({"command": "git push"}).into(),
        reason: "pushing needs an approval".to_owned(),
        session_key: session_key.map(str::to_owned),
        preview: None,
    }
}

#[tokio::test]
async fn a_ui_sees_each_request_with_an_id_and_answers_it() {
    let (service, mut inbox) = ChannelApprovals::new(None);
    let cancel = CancellationToken::new();
    let asked = request("c1", Some("bash(git push)"));
    let asking = service.request(&asked, &cancel);
    let ui = async {
        let pending = inbox.next().await.unwrap();
        assert_eq!(pending.id(), 1);
        assert_eq!(pending.request().identity.call_id.as_str(), "c1");
        assert_eq!(pending.request().subject.as_deref(), Some("git push"));
        assert_eq!(pending.request().reason, "pushing needs an approval");
        pending
            .answer(ApprovalAnswer::AllowedForSession {
                key: "bash(git *)".to_owned(),
            })
            .unwrap();
    };
    let (answer, ()) = tokio::join!(asking, ui);
    assert_eq!(
        answer,
        ApprovalAnswer::AllowedForSession {
            key: "bash(git *)".to_owned()
        }
    );
    // The next request gets the next id.
    let second = request("c2", None);
    let asking = service.request(&second, &cancel);
    let ui = async {
        let pending = inbox.next().await.unwrap();
        assert_eq!(pending.id(), 2);
        pending
            .answer(ApprovalAnswer::Rejected { reason: None })
            .unwrap();
    };
    let (answer, ()) = tokio::join!(asking, ui);
    assert_eq!(answer, ApprovalAnswer::Rejected { reason: None });
}

#[tokio::test(start_paused = true)]
async fn a_deadline_expires_the_request_and_withdraws_it_from_the_ui() {
    let (service, mut inbox) = ChannelApprovals::new(Some(Duration::from_secs(30)));
    let cancel = CancellationToken::new();
    let asked = request("c1", None);
    let answer = service.request(&asked, &cancel).await;
    assert_eq!(answer, ApprovalAnswer::Expired);
    let pending = inbox.try_next().unwrap();
    assert!(pending.is_withdrawn());
    // A late answer does not count, and says so.
    assert_eq!(
        pending.answer(ApprovalAnswer::AllowedOnce),
        Err(ApprovalAnswer::AllowedOnce)
    );
}

#[tokio::test]
async fn a_request_dropped_unanswered_is_cancelled() {
    let (service, mut inbox) = ChannelApprovals::new(None);
    let cancel = CancellationToken::new();
    let asked = request("c1", None);
    let asking = service.request(&asked, &cancel);
    let ui = async {
        drop(inbox.next().await.unwrap());
    };
    let (answer, ()) = tokio::join!(asking, ui);
    assert_eq!(answer, ApprovalAnswer::Cancelled);
}

#[tokio::test]
async fn a_cancelled_batch_cancels_its_pending_approval() {
    let (service, mut inbox) = ChannelApprovals::new(None);
    let cancel = CancellationToken::new();
    let asked = request("c1", None);
    let asking = service.request(&asked, &cancel);
    let ui = async {
        let pending = inbox.next().await.unwrap();
        cancel.cancel();
        // The UI learns the request was withdrawn.
        pending.withdrawn().await;
        pending
    };
    let (answer, pending) = tokio::join!(asking, ui);
    assert_eq!(answer, ApprovalAnswer::Cancelled);
    assert!(pending.answer(ApprovalAnswer::AllowedOnce).is_err());
    // Already cancelled: not even put to the UI.
    assert_eq!(
        service.request(&asked, &cancel).await,
        ApprovalAnswer::Cancelled
    );
    assert!(inbox.try_next().is_none());
}

#[tokio::test]
async fn with_no_ui_listening_the_answer_is_unavailable() {
    let (service, inbox) = ChannelApprovals::new(None);
    drop(inbox);
    let answer = service
        .request(&request("c1", None), &CancellationToken::new())
        .await;
    assert_eq!(answer, ApprovalAnswer::Unavailable);
}

#[tokio::test]
async fn scripted_answers_come_in_order_then_nothing_is_approved() {
    let service = ScriptedApprovals::new([
        ApprovalAnswer::AllowedOnce,
        ApprovalAnswer::AllowedForSession { key: String::new() },
    ]);
    let cancel = CancellationToken::new();
    assert_eq!(
        service.request(&request("c1", None), &cancel).await,
        ApprovalAnswer::AllowedOnce
    );
    // An empty scripted key stands for the key the request offers.
    assert_eq!(
        service
            .request(&request("c2", Some("bash(git push)")), &cancel)
            .await,
        ApprovalAnswer::AllowedForSession {
            key: "bash(git push)".to_owned()
        }
    );
    assert_eq!(
        service.request(&request("c3", None), &cancel).await,
        ApprovalAnswer::Unavailable
    );
    let asked: Vec<String> = service
        .asked()
        .iter()
        .map(|request| request.identity.call_id.to_string())
        .collect();
    assert_eq!(asked, ["c1", "c2", "c3"]);
}

/// A writer the test can read after handing it to the service.
#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Screen {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Screen {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().clone()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_shows_the_request_and_reads_the_reply() {
    let cases = [
        ("y\n", Some("bash(git push)"), ApprovalAnswer::AllowedOnce),
        (
            "s\n",
            Some("bash(git push)"),
            ApprovalAnswer::AllowedForSession {
                key: "bash(git push)".to_owned(),
            },
        ),
        (
            "n: not on a Friday\n",
            None,
            ApprovalAnswer::Rejected {
                reason: Some("not on a Friday".to_owned()),
            },
        ),
        // Unreadable three times: a rejection, never an approval.
        (
            "ok\nsure\nfine\n",
            None,
            ApprovalAnswer::Rejected {
                reason: Some("no readable answer on the terminal".to_owned()),
            },
        ),
        // End of input: nobody is there.
        ("", None, ApprovalAnswer::Unavailable),
        // A session answer where none is offered is read again.
        ("s\nn\n", None, ApprovalAnswer::Rejected { reason: None }),
    ];
    for (typed, key, expected) in cases {
        let screen = Screen::default();
        let service =
            TerminalApprovals::with_io(Cursor::new(typed.as_bytes().to_vec()), screen.clone());
        let answer = service
            .request(&request("c7", key), &CancellationToken::new())
            .await;
        assert_eq!(answer, expected, "typed {typed:?}");
        let shown = screen.text();
        assert!(
            shown.contains("`bash`") && shown.contains("c7") && shown.contains("git push"),
            "{shown}"
        );
        assert!(shown.contains("pushing needs an approval"), "{shown}");
        assert!(service.is_available(), "the terminal is handed back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_every_request_is_unavailable() {
    let service = TerminalApprovals::stdio();
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    assert_eq!(service.is_available(), interactive);
    if !interactive {
        let answer = service
            .request(&request("c1", None), &CancellationToken::new())
            .await;
        assert_eq!(answer, ApprovalAnswer::Unavailable);
    }
}
