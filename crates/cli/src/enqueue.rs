//! `toolrail enqueue --store postgres://… SCENARIO_FILE [--session ID] [--retry]`: a
//! scenario put in a PostgreSQL store's queue for `toolrail worker`. An id the store knows
//! already — queued before, or holding events — is refused, naming where the session stands
//! and what to do; `--retry` queues a failed session again, to be resumed from its log.
//! `run --scenario --store --enqueue` queues through the same code.

use std::path::PathBuf;

use anyhow::Result;
use toolrail_runtime::scenario::Scenario;
use toolrail_session_log::SessionId;
use toolrail_session_store::{PostgresStore, Standing, StoreError};

use crate::bad_input;
use crate::worker::connect;

#[derive(clap::Args)]
pub(crate) struct EnqueueArgs {
    /// The store: `postgres://user@host:port/database`.
    #[arg(long)]
    store: String,
    /// The scenario file a worker drives (docs/scenarios.md).
    scenario: PathBuf,
    /// The session's id (default: `queued-<time>-<pid>`); required with `--retry`.
    #[arg(long)]
    session: Option<String>,
    /// Queue a failed session again (or one a run outside the queue left with a turn
    /// open): the worker that claims it resumes it from its log, recovery first, with this
    /// scenario file. Refused for a session that is waiting, running or done.
    #[arg(long)]
    retry: bool,
}

/// Whether a session is new to the queue or queued again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queueing {
    /// A session the store does not know yet.
    New,
    /// A failed session, queued again to be resumed from its log.
    Retry,
}

pub(crate) fn run(args: EnqueueArgs) -> Result<()> {
    let path = &args.scenario;
    let payload = std::fs::read_to_string(path)
        .map_err(|error| bad_input!("cannot read {}: {error}", path.display()))?;
    Scenario::from_json(&payload).map_err(|error| bad_input!("{}: {error}", path.display()))?;
    let queueing = if args.retry {
        Queueing::Retry
    } else {
        Queueing::New
    };
    let id = match (args.session, queueing) {
        (Some(id), _) => SessionId::new(id),
        (None, Queueing::New) => SessionId::new(stamped_id("queued")),
        (None, Queueing::Retry) => {
            return Err(bad_input!(
                "--retry: name the session to queue again with --session"
            ));
        }
    };
    let store = connect(&args.store)?;
    enqueue(&store, &id, &payload, queueing)
}

/// An id for a session named by no one: `<prefix>-<milliseconds>-<pid>`.
pub(crate) fn stamped_id(prefix: &str) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis())
        .unwrap_or_default();
    format!("{prefix}-{stamp}-{}", std::process::id())
}

/// Puts session `id` with `payload` in `store`'s queue, and says so; a refusal is bad input
/// (exit 2) that names where the session stands and what to do.
pub(crate) fn enqueue(
    store: &PostgresStore,
    id: &SessionId,
    payload: &str,
    queueing: Queueing,
) -> Result<()> {
    match queueing {
        Queueing::New => {
            store.enqueue(id, payload).map_err(refused)?;
            println!("queued session {id}: `toolrail worker --store …` will drive it");
        }
        Queueing::Retry => {
            let before = store.retry(id, payload).map_err(refused)?;
            println!(
                "queued session {id} again (it was {before}): a worker resumes it from its {} events, recovery first",
                before.events()
            );
        }
    }
    Ok(())
}

/// A store's refusal as the user reads it: where the session stands and what to do (exit
/// 2), or the store failing (exit 1).
pub(crate) fn refused(error: StoreError) -> anyhow::Error {
    if let StoreError::Known { standing, .. } = &error {
        bad_input!("{error}; {}", advice(standing, Queueing::New))
    } else if let StoreError::NotRetryable { standing, .. } = &error {
        bad_input!("--retry: {error}; {}", advice(standing, Queueing::Retry))
    } else if matches!(error, StoreError::InvalidSessionId { .. }) {
        bad_input!("--session: {error}")
    } else {
        anyhow::Error::new(error)
    }
}

/// What to do about a session that stands as `standing`, when `queueing` was refused.
pub(crate) fn advice(standing: &Standing, queueing: Queueing) -> &'static str {
    match (standing, queueing) {
        (Standing::Absent, Queueing::Retry) => {
            "there is nothing to retry: queue it without --retry"
        }
        (Standing::Absent, Queueing::New) => "try again",
        (Standing::Failed { .. }, _) => {
            "to run it again from its log, add --retry (with the scenario file fixed, if the scenario was wrong)"
        }
        (
            Standing::Unqueued {
                ended: false,
                holder: None,
                ..
            },
            _,
        ) => "to resume it from its log through the queue, add --retry",
        (Standing::Waiting { .. } | Standing::Running { .. }, _) => {
            "a worker drives it already: wait for it (`toolrail sessions --store …` shows it), or give another --session for a new session"
        }
        (
            Standing::Unqueued {
                holder: Some(_), ..
            },
            _,
        ) => "wait for that run to end, or give another --session for a new session",
        (Standing::Done { .. } | Standing::Unqueued { ended: true, .. }, _) => {
            "a finished session is not run again: give another --session for a new session"
        }
    }
}
