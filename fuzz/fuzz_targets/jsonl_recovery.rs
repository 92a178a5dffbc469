//! Any bytes as a session's JSONL file: opening it never panics (a torn tail is cut, a bad
//! line is an error naming it), and recovery of what opened leaves a log that opens again
//! and needs no second repair.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use toolrail_session_log::{SessionId, SessionLog, recover, recovery::EffectProbe};
use toolrail_session_store::{Durability, JsonlStore, SessionStore};

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let Ok(store) = JsonlStore::new(dir.path(), Durability::None) else {
        return;
    };
    let id = SessionId::new("fuzzed");
    let Ok(path) = store.path_of(&id) else {
        return;
    };
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(opened) = store.open(&id) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let log: Arc<dyn SessionLog> = Arc::new(opened.log);
    let probes: Vec<Arc<dyn EffectProbe>> = Vec::new();
    let repaired = runtime.block_on(async {
        let report = recover(&opened.events, opened.torn_bytes_dropped, &probes, log.as_ref()).await;
        let synced = log.barrier().await;
        report.is_ok() && synced.is_ok()
    });
    drop(log);
    if !repaired {
        return;
    }
    let again = store.open(&id).expect("a recovered log opens again");
    // Recovery is idempotent: what it repaired stays repaired.
    let log: Arc<dyn SessionLog> = Arc::new(again.log);
    let second = runtime
        .block_on(recover(&again.events, again.torn_bytes_dropped, &probes, log.as_ref()))
        .expect("recovering a recovered log");
    assert!(second.is_empty(), "a second recovery repaired again: {second:?}");
});
