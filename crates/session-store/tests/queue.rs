//! The work queue's answers on PostgreSQL: an id the store knows is never queued again
//! unless it failed and is retried; a session given back after a store failure waits again
//! and the next claim takes it; each log's connection names its session; and a connection
//! to a server whose postmaster is stopped fails within the store's bound, its startup
//! included.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use std::time::{Duration, Instant};

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;
use toolrail_test_support::pg;

fn start(id: &str) -> SessionStart {
    SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools: Vec::new(),
        meta: None,
    }
}

fn event(data: EventData) -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: None,
        call_id: None,
        data,
    }
}

fn turn_start() -> EventDraft {
    event(EventData::TurnStart(TurnStart {
        user: vec![ContentBlock::text("go")],
        trace: None,
        caller: None,
        client: false,
    }))
}

fn turn_end() -> EventDraft {
    event(EventData::TurnEnd(TurnEnd {
        kind: TurnEndKind::Completed,
        message: None,
    }))
}

/// The standing a refusal names.
fn refused_as(error: StoreError) -> (&'static str, Standing) {
    match error {
        StoreError::Known { standing, .. } => ("known", standing),
        StoreError::NotRetryable { standing, .. } => ("not retryable", standing),
        other => panic!("not a refusal of the queue: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_id_is_refused_and_only_a_failed_or_stranded_session_is_retried() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let store = PostgresStore::connect(&server.fresh_database(), Durability::Strict).unwrap();
    let id = SessionId::new("q1");
    assert_eq!(store.standing(&id).unwrap(), Standing::Absent);
    assert!(matches!(
        refused_as(store.retry(&id, "{}").unwrap_err()),
        ("not retryable", Standing::Absent)
    ));
    store.enqueue(&id, "{}").unwrap();
    let waiting = Standing::Waiting {
        events: 0,
        reason: None,
    };
    assert_eq!(
        refused_as(store.enqueue(&id, "{}").unwrap_err()),
        ("known", waiting.clone())
    );
    assert_eq!(
        refused_as(store.retry(&id, "{}").unwrap_err()),
        ("not retryable", waiting)
    );
    let claimed = store.claim("w1", Duration::from_secs(30)).unwrap().unwrap();
    let log = store.create_leased(start("q1"), &claimed.lease).unwrap();
    log.append(turn_start(), AppendUrgency::Durable)
        .await
        .unwrap();
    drop(log);
    let running = Standing::Running {
        worker: "w1".to_owned(),
        leased: true,
        events: 2,
    };
    assert_eq!(
        refused_as(store.enqueue(&id, "{}").unwrap_err()),
        ("known", running.clone())
    );
    assert_eq!(
        refused_as(store.retry(&id, "{}").unwrap_err()),
        ("not retryable", running)
    );
    store
        .finish(
            &claimed.lease,
            &Finish::Failed("the script ran out".to_owned()),
        )
        .unwrap();
    let failed = Standing::Failed {
        reason: "the script ran out".to_owned(),
        events: 2,
    };
    assert_eq!(store.standing(&id).unwrap(), failed);
    let error = store.enqueue(&id, "{}").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("session `q1` exists already: it is failed: the script ran out"),
        "{error}"
    );
    // Retried with a new payload: waiting again, to be resumed from its two events.
    assert_eq!(store.retry(&id, "{\"fixed\": true}").unwrap(), failed);
    assert_eq!(
        store.standing(&id).unwrap(),
        Standing::Waiting {
            events: 2,
            reason: Some("retried after it failed: the script ran out".to_owned()),
        }
    );
    let again = store.claim("w2", Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!(again.payload, "{\"fixed\": true}");
    assert_eq!(again.earlier_claims, 1);
    store.finish(&again.lease, &Finish::Done).unwrap();
    assert_eq!(
        refused_as(store.retry(&id, "{}").unwrap_err()),
        ("not retryable", Standing::Done { events: 2 })
    );

    // Sessions written outside the queue (`run --store`): one that ended is never queued,
    // one left open with nobody driving it may be, through a retry only.
    let ended = store.create(start("direct-ended")).unwrap();
    ended
        .append(turn_start(), AppendUrgency::Durable)
        .await
        .unwrap();
    ended
        .append(turn_end(), AppendUrgency::Durable)
        .await
        .unwrap();
    drop(ended);
    let ended_id = SessionId::new("direct-ended");
    let ended_standing = Standing::Unqueued {
        events: 3,
        ended: true,
        holder: None,
    };
    assert_eq!(
        refused_as(store.enqueue(&ended_id, "{}").unwrap_err()),
        ("known", ended_standing.clone())
    );
    assert_eq!(
        refused_as(store.retry(&ended_id, "{}").unwrap_err()),
        ("not retryable", ended_standing)
    );
    let open = store.create(start("direct-open")).unwrap();
    open.append(turn_start(), AppendUrgency::Durable)
        .await
        .unwrap();
    drop(open);
    let open_id = SessionId::new("direct-open");
    assert!(matches!(
        refused_as(store.enqueue(&open_id, "{}").unwrap_err()),
        ("known", Standing::Unqueued { ended: false, .. })
    ));
    store.retry(&open_id, "{}").unwrap();
    assert!(matches!(
        store.standing(&open_id).unwrap(),
        Standing::Waiting { events: 2, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_given_back_waits_again_and_its_log_connection_is_named() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    let id = SessionId::new("r1");
    store.enqueue(&id, "{}").unwrap();
    store.enqueue(&SessionId::new("r2"), "{}").unwrap();
    let first = store.claim("w1", Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!(first.lease.session, id);
    let log = store.create_leased(start("r1"), &first.lease).unwrap();
    log.append(turn_start(), AppendUrgency::Durable)
        .await
        .unwrap();
    // `pg_stat_activity` names the log's connection for its session.
    let database = url.rsplit('/').next().unwrap().to_owned();
    // (The blocking admin client runs a runtime of its own: not on this test's.)
    let named = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                server.admin().rows(&format!(
                    "SELECT application_name FROM pg_stat_activity WHERE datname = '{database}'
                     AND application_name LIKE 'toolrail-log %'"
                ))
            })
            .join()
            .unwrap()
    });
    assert_eq!(named, [[Some("toolrail-log r1".to_owned())]]);
    drop(log);
    store
        .release_claim(&first.lease, "the log's connection was lost")
        .unwrap();
    assert_eq!(
        store.standing(&id).unwrap(),
        Standing::Waiting {
            events: 2,
            reason: Some("the log's connection was lost".to_owned()),
        }
    );
    // Given back, it waits behind r2 (queued before r1 was claimed) and ahead of what is
    // queued now; the claim after r2's takes it at once (no lease to wait out), with a new
    // token.
    store.enqueue(&SessionId::new("r3"), "{}").unwrap();
    let r2 = store.claim("w2", Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!(r2.lease.session.as_str(), "r2");
    let next = store.claim("w2", Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!(next.lease.session, id);
    assert_eq!(next.earlier_claims, 1);
    assert!(next.lease.token > first.lease.token);
    // The first holder, back, can neither give it back again nor finish it.
    assert!(matches!(
        store.release_claim(&first.lease, "again"),
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.finish(&first.lease, &Finish::Done),
        Err(StoreError::Fenced { .. })
    ));
    let listed = store.sessions().unwrap();
    let r1 = listed
        .iter()
        .find(|summary| summary.session == "r1")
        .unwrap();
    assert_eq!(
        (r1.queue.as_deref(), r1.reason.as_deref(), r1.claims),
        (Some("running"), None, 2)
    );
    let r3 = listed
        .iter()
        .find(|summary| summary.session == "r3")
        .unwrap();
    assert_eq!((r3.queue.as_deref(), r3.events), (Some("waiting"), 0));
}

/// A stopped postmaster accepts TCP connections into its backlog and answers none: a new
/// connection fails within the URL's `connect_timeout` (2 s here) plus slack, though the
/// TCP connect itself succeeds. Connections made before keep working (their backends run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_to_a_stopped_postmaster_fails_within_the_bound() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let url = format!("{}?connect_timeout=2", server.fresh_database());
    let store = PostgresStore::connect(&url, Durability::Strict).unwrap();
    store.enqueue(&SessionId::new("before"), "{}").unwrap();
    server.pause();
    // Whatever happens below, the server goes on within 12 s: a connect that waits for it
    // returns then, and the bound check fails instead of the test hanging.
    let resumed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let resumer = std::thread::spawn({
        let resumed = std::sync::Arc::clone(&resumed);
        let pid = server.postmaster_pid();
        move || {
            let deadline = Instant::now() + Duration::from_secs(12);
            while Instant::now() < deadline && !resumed.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    });
    let began = Instant::now();
    let refused = PostgresStore::connect(&url, Durability::Strict);
    let waited = began.elapsed();
    // The pooled connection's backend still answers while the postmaster is stopped.
    let standing = store.standing(&SessionId::new("before"));
    resumed.store(true, std::sync::atomic::Ordering::SeqCst);
    resumer.join().unwrap();
    let error = refused.unwrap_err();
    assert!(
        waited < Duration::from_millis(3_500),
        "a connection waited {waited:?} with a 2 s bound: {error}"
    );
    assert!(
        waited >= Duration::from_millis(1_900),
        "it gave up before its bound: {waited:?}: {error}"
    );
    assert!(
        error.to_string().contains("did not finish its startup"),
        "{error}"
    );
    assert!(
        matches!(standing, Ok(Standing::Waiting { .. })),
        "{standing:?}"
    );
    // Once the postmaster goes on, connecting works again.
    PostgresStore::connect(&url, Durability::Strict).unwrap();
    eprintln!("connect against a stopped postmaster: refused after {waited:?} (bound 2 s)");
}
