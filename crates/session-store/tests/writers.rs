//! The writers of a store are shared: a thousand open sessions are written by a few threads,
//! each session's events still land in its own file in `seq` order, and the threads end when
//! the last session closes. (Its own test binary: it counts the process's threads.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use toolrail_session_log::event::*;
use toolrail_session_log::*;
use toolrail_session_store::*;

/// Threads of this process named as the store names its writers (15 bytes: the kernel keeps
/// no more of a thread name).
fn writer_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|task| {
            let comm = task.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|name| name.trim() == "toolrail-writer")
        })
        .count()
}

fn step_end() -> EventDraft {
    EventDraft {
        ts: Timestamp::now(),
        turn: Some(TurnId(1)),
        step: Some(StepId(1)),
        call_id: None,
        data: EventData::StepEnd(StepEnd::default()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_open_sessions_share_a_few_writers_and_each_keeps_its_own_order() {
    const SESSIONS: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    for durability in [Durability::None, Durability::Strict] {
        let store = JsonlStore::new(dir.path().join(format!("{durability:?}")), durability)
            .unwrap()
            .with_writers(MAX_WRITERS);
        let logs: Vec<_> = (0..SESSIONS)
            .map(|n| {
                let log = store
                    .create(SessionStart {
                        format_version: FORMAT_VERSION,
                        session_id: SessionId::new(format!("s{n}")),
                        tools: Vec::new(),
                        meta: None,
                    })
                    .unwrap();
                std::sync::Arc::new(log)
            })
            .collect();
        let threads = writer_threads();
        assert!(
            (1..=MAX_WRITERS).contains(&threads),
            "{threads} writer threads for {SESSIONS} open sessions"
        );
        // Every session appends three events at once, durably where the mode says so.
        let mut appends = tokio::task::JoinSet::new();
        for log in &logs {
            let log = std::sync::Arc::clone(log);
            appends.spawn(async move {
                for _ in 0..3 {
                    log.append(step_end(), AppendUrgency::Durable)
                        .await
                        .unwrap();
                }
                log.barrier().await.unwrap();
            });
        }
        while let Some(done) = appends.join_next().await {
            done.unwrap();
        }
        assert!(logs.iter().all(|log| log.syncs() >= 1));
        drop(logs);
        for n in [0, SESSIONS / 2, SESSIONS - 1] {
            let read = store.read(&SessionId::new(format!("s{n}"))).unwrap();
            let seqs: Vec<u64> = read.events.iter().map(|event| event.seq).collect();
            assert_eq!(seqs, [1, 2, 3, 4], "session s{n} in mode {durability:?}");
        }
    }
    // The threads end once no session is open (each notices on its own, at once).
    for _ in 0..200 {
        if writer_threads() == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "{} writer threads outlived their sessions",
        writer_threads()
    );
}
