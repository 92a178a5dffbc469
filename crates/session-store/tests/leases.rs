//! Session leases on PostgreSQL: one worker at a time drives a session; a lease that runs
//! out may be taken over; the old holder's next append is refused (fencing), so nothing it
//! writes after a takeover reaches the log, and `seq` stays dense.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

use toolrail_test_support::pg;

use std::time::Duration;

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;

fn start(id: &str) -> SessionStart {
    SessionStart {
        format_version: FORMAT_VERSION,
        session_id: SessionId::new(id),
        tools: Vec::new(),
        meta: None,
    }
}

fn step() -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: None,
        data: EventData::StepStart(StepStart::default()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_excludes_others_until_it_runs_out_and_then_fences_its_old_holder() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let store = PostgresStore::connect(&server.fresh_database(), Durability::Strict).unwrap();
    let id = SessionId::new("s1");
    let a = store
        .acquire(&id, "worker-a", Duration::from_millis(600))
        .unwrap();
    assert_eq!(a.token, 1);
    let log_a = store.create_leased(start("s1"), &a).unwrap();
    assert_eq!(log_a.append(step(), AppendUrgency::Durable).await, Ok(2));

    // While A's lease runs, B is refused and told who holds it.
    let refused = store
        .acquire(&id, "worker-b", Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("leased to `worker-a`"), "{refused}");
    // So is opening it without a lease (a `toolrail resume` or `recover`): its writes would
    // interleave with A's.
    let unleased = store.open(&id).err().map(|error| error.to_string());
    assert!(
        unleased
            .as_deref()
            .is_some_and(|error| error.contains("leased to `worker-a`")),
        "{unleased:?}"
    );

    // A stops renewing (paused, partitioned); once its lease ran out, B takes over.
    let mut taken = None;
    for _ in 0..100 {
        match store.acquire(&id, "worker-b", Duration::from_secs(30)) {
            Ok(lease) => {
                taken = Some(lease);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let b = taken.expect("the lease is taken over once it ran out");
    assert_eq!(b.token, 2);

    // A wakes up: its next append is refused, and so is renewing its lease.
    let refused = log_a
        .append(step(), AppendUrgency::Durable)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("taken over"), "{refused}");
    // Typed across the sink: whoever drives the session tells a takeover from a failure.
    assert_eq!(
        refused,
        SinkError::TakenOver {
            session: "s1".to_owned(),
            holder: 2,
            held: 1
        }
    );
    assert!(refused.is_taken_over());
    assert!(matches!(
        store.renew(&a).unwrap_err(),
        StoreError::Fenced { token: 1, .. }
    ));
    drop(log_a);

    // B sees every event A wrote before, nothing after, and goes on densely.
    let opened = store.open_leased(&b).unwrap();
    assert_eq!(opened.events.len(), 2);
    assert_eq!(
        opened.log.append(step(), AppendUrgency::Durable).await,
        Ok(3)
    );
    store.renew(&b).unwrap();
    drop(opened);
    store.release(&b).unwrap();
    // Released: anyone may take it at once.
    let c = store
        .acquire(&id, "worker-c", Duration::from_secs(5))
        .unwrap();
    assert_eq!(c.token, 3);
    let events = store.open_leased(&c).unwrap().events;
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_once_and_a_password_never_shows() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let url = server.fresh_database();
    let first = PostgresStore::connect(&url, Durability::Strict).unwrap();
    // A second worker connecting to a migrated database changes nothing and works.
    let second = PostgresStore::connect(&url, Durability::Batched).unwrap();
    let log = first.create(start("m1")).unwrap();
    log.append(step(), AppendUrgency::Durable).await.unwrap();
    drop(log);
    assert_eq!(second.open(&SessionId::new("m1")).unwrap().events.len(), 2);
    for secret in [
        url.replace("toolrail@", "toolrail:hunter2@"),
        format!("{url}?password=hunter2"),
    ] {
        let shown = format!("{:?}", PostgresStore::connect(&secret, Durability::Strict));
        assert!(!shown.contains("hunter2"), "{shown}");
        // An error names the database, not the password.
        let failing = secret.replace("toolrail", "nobody");
        let error = PostgresStore::connect(&failing, Durability::Strict).unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(error.to_string().contains("nobody"), "{error}");
    }
    // A lease for another session cannot create this one.
    let lease = first
        .acquire(&SessionId::new("other"), "w", Duration::from_secs(5))
        .unwrap();
    assert!(matches!(
        first.create_leased(start("m2"), &lease),
        Err(StoreError::Fenced { .. })
    ));
}

fn at(call: Option<&str>, data: EventData) -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: call.map(CallId::from),
        data,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_recovers_the_dead_worker_s_call_as_outcome_unknown() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let store = PostgresStore::connect(&server.fresh_database(), Durability::Strict).unwrap();
    let id = SessionId::new("t1");
    // Worker A starts a side-effecting call and dies before its result (its lease runs out).
    let a = store
        .acquire(&id, "worker-a", Duration::from_millis(300))
        .unwrap();
    let log = store.create_leased(start("t1"), &a).unwrap();
    let message = EventData::AssistantMessage(AssistantMessage {
        blocks: vec![AssistantBlock::ToolCall {
            call_id: CallId::from("w1"),
            name: "write".into(),
            arguments_raw: "{}".into(),
        }],
        stop_reason: StopReason::ToolCalls,
    });
    for (call, data) in [
        (
            None,
            EventData::TurnStart(TurnStart {
                user: Vec::new(),
                trace: None,
                caller: None,
                client: false,
            }),
        ),
        (None, message),
        (
            Some("w1"),
            EventData::ToolCall(ToolCall {
                index: 0,
                name: "write".into(),
                arguments_raw: "{}".into(),
                source: None,
                version: None,
                trace: None,
            }),
        ),
        (Some("w1"), EventData::ToolStart(ToolStart::default())),
    ] {
        log.append(at(call, data), AppendUrgency::Durable)
            .await
            .unwrap();
    }
    // Worker B takes the expired lease over, and recovers.
    let mut taken = None;
    for _ in 0..100 {
        if let Ok(lease) = store.acquire(&id, "worker-b", Duration::from_secs(30)) {
            taken = Some(lease);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = taken.expect("taken over once A's lease ran out");
    let opened = store.open_leased(&b).unwrap();
    let report = recover(&opened.events, 0, &[], &opened.log).await.unwrap();
    let repaired: Vec<(String, Option<&str>)> = report
        .repaired
        .iter()
        .map(|(call, code)| (call.to_string(), code.as_ref().map(ErrorCode::as_str)))
        .collect();
    assert_eq!(
        repaired,
        [("w1".to_owned(), Some("TOOL_OUTCOME_UNKNOWN"))],
        "it started and may have acted: not 'not started'"
    );
    // A, back from the dead, writes its result: refused, and the log holds nothing of it.
    let late = log
        .append(
            at(
                Some("w1"),
                EventData::ToolResult(std::sync::Arc::new(ToolResultRecord::success(vec![
                    ContentBlock::text("done"),
                ]))),
            ),
            AppendUrgency::Durable,
        )
        .await;
    assert!(late.is_err());
    drop(log);
    drop(opened);
    let events = store.open_leased(&b).unwrap().events;
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "seq stays dense"
    );
    let results: Vec<bool> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolResult(record) => Some(record.synthetic),
            _ => None,
        })
        .collect();
    assert_eq!(results, [true], "one result, the takeover's synthetic one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_drain_the_queue_and_no_session_is_driven_twice() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let store = PostgresStore::connect(&server.fresh_database(), Durability::Batched).unwrap();
    for n in 0..200 {
        store
            .enqueue(
                &SessionId::new(format!("q{n:03}")),
                &format!("{{\"n\": {n}}}"),
            )
            .unwrap();
    }
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let store = store.clone();
        workers.spawn(async move {
            let owner = format!("worker-{worker}");
            let mut driven = Vec::new();
            while let Some(claimed) = store.claim(&owner, Duration::from_secs(30)).unwrap() {
                assert_eq!(claimed.earlier_claims, 0);
                let log = store
                    .create_leased(start(claimed.lease.session.as_str()), &claimed.lease)
                    .unwrap();
                log.append(step(), AppendUrgency::Buffered).await.unwrap();
                log.barrier().await.unwrap();
                drop(log);
                store.finish(&claimed.lease, &Finish::Done).unwrap();
                driven.push(claimed.lease.session.as_str().to_owned());
            }
            driven
        });
    }
    let mut all = Vec::new();
    let mut per_worker = Vec::new();
    while let Some(driven) = workers.join_next().await {
        let driven = driven.unwrap();
        per_worker.push(driven.len());
        all.extend(driven);
    }
    all.sort();
    let expected: Vec<String> = (0..200).map(|n| format!("q{n:03}")).collect();
    assert_eq!(all, expected, "every session driven exactly once");
    assert!(
        per_worker.iter().filter(|&&count| count > 0).count() >= 2,
        "{per_worker:?}"
    );
    assert!(
        store
            .claim("late", Duration::from_secs(1))
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_session_whose_worker_went_silent_is_claimed_again() {
    let Some(server) = pg::PgServer::start() else {
        return;
    };
    let store = PostgresStore::connect(&server.fresh_database(), Durability::Strict).unwrap();
    store.enqueue(&SessionId::new("slow"), "{}").unwrap();
    let first = store
        .claim("a", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    // While A's lease runs, nobody else gets it.
    assert!(store.claim("b", Duration::from_secs(30)).unwrap().is_none());
    let mut again = None;
    for _ in 0..100 {
        if let Some(claimed) = store.claim("b", Duration::from_secs(30)).unwrap() {
            again = Some(claimed);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = again.expect("claimed again once A's lease ran out");
    assert_eq!(again.earlier_claims, 1);
    assert!(again.lease.token > first.lease.token);
    // A, back, cannot finish what it no longer holds.
    assert!(matches!(
        store.finish(&first.lease, &Finish::Done),
        Err(StoreError::Fenced { .. })
    ));
    store.finish(&again.lease, &Finish::Done).unwrap();
}
