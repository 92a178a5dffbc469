//! Session leases on PostgreSQL: one worker at a time drives a session; a lease that runs
//! out may be taken over; the old holder's next append is refused (fencing), so nothing it
//! writes after a takeover reaches the log, and `seq` stays dense.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod pg;

use std::time::Duration;

use toolrail_session_log::*;

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
    let with_password = url.replace("toolrail@", "toolrail:hunter2@");
    let shown = format!(
        "{:?}",
        PostgresStore::connect(&with_password, Durability::Strict)
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}
