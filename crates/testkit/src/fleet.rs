//! The runtime's fleet worker, with the test kit's probes among the tools every session's
//! scenario may name.

use std::sync::Arc;

pub use toolrail_runtime::fleet::{Driven, Outcome, Report, Worker, WorkerConfig};
use toolrail_session_store::PostgresStore;

/// A worker whose sessions may name `probe` and `probe_idem`.
pub fn worker(store: PostgresStore, config: WorkerConfig) -> Worker {
    Worker::new(store, config)
        .with_tools(Arc::new(|folder: &std::path::Path| crate::probes(folder)))
}
