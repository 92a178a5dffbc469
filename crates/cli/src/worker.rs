//! `toolrail worker --store postgres://…`: workers that drain a PostgreSQL store's queue —
//! each claims a waiting session (or one whose worker died), drives its scenario under a
//! renewed lease, and finishes it; a line per session says how it ended. Also the stored
//! form of `toolrail run`: one session driven here, or put in the queue for the workers.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use toolrail_runtime::fleet::{Driven, Outcome, Report, Worker, WorkerConfig};
use toolrail_session_log::SessionId;
use toolrail_session_store::{Durability, PostgresStore, Standing};

use crate::enqueue::{self, Queueing, stamped_id};
use crate::session::summary_of;
use crate::{bad_input, runs_dir};

/// A lease owner name no other process uses: host, process and a random part (process ids
/// repeat across containers).
fn owner_name(role: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default();
    let random = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.subsec_nanos())
        .unwrap_or_default();
    format!("{role}-{host}-{}-{random:08x}", std::process::id())
}

#[derive(clap::Args)]
pub(crate) struct WorkerArgs {
    /// The store: `postgres://user@host:port/database`.
    #[arg(long)]
    store: String,
    /// How many workers this process runs, each with a thread, a runtime and a lease owner
    /// name of its own.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// The lease owner's name (each worker adds `-N`); default: `<host>-<pid>-<random>`.
    /// Never give two running workers the same name: a lease is granted again to its owner.
    #[arg(long)]
    owner: Option<String>,
    /// How long a lease lasts unrenewed, in milliseconds; a dead worker's sessions are taken
    /// over this long after it stopped renewing.
    #[arg(long, default_value_t = 10_000)]
    lease_ms: u64,
    /// Where sessions' workspaces and outputs go (`<dir>/<session>`). A worker that takes a
    /// session over continues in the folder its first worker used: workers that may take
    /// over each other's sessions must share it.
    #[arg(long)]
    work_dir: PathBuf,
    /// Stop once the queue has been empty this long (default: run until killed).
    #[arg(long)]
    idle_exit_ms: Option<u64>,
}

/// Connects to a `postgres://` store, or says what to give instead.
pub(crate) fn connect(url: &str) -> Result<PostgresStore> {
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Err(bad_input!(
            "--store: give a postgres:// URL (JSONL sessions are files: use --session-dir)"
        ));
    }
    PostgresStore::connect(url, Durability::Strict).map_err(|error| bad_input!("{error}"))
}

pub(crate) fn run(args: WorkerArgs) -> Result<()> {
    if args.workers == 0 {
        return Err(bad_input!("--workers 0: give at least 1"));
    }
    if args.lease_ms < 30 {
        return Err(bad_input!(
            "--lease-ms {}: give at least 30 (renewal runs every third of it)",
            args.lease_ms
        ));
    }
    let store = connect(&args.store)?;
    let work_dir = crate::absolute_dir("--work-dir", &args.work_dir)?;
    std::fs::create_dir_all(&work_dir)
        .map_err(|error| bad_input!("--work-dir {}: {error}", work_dir.display()))?;
    let owner = args.owner.unwrap_or_else(|| owner_name("worker"));
    let threads: Vec<_> = (1..=args.workers)
        .map(|number| {
            let config = WorkerConfig {
                owner: if args.workers == 1 {
                    owner.clone()
                } else {
                    format!("{owner}-{number}")
                },
                lease: Duration::from_millis(args.lease_ms),
                work_dir: work_dir.clone(),
                poll: Duration::from_millis(50),
                idle_exit: args.idle_exit_ms.map(Duration::from_millis),
            };
            let store = store.clone();
            std::thread::Builder::new()
                .name(config.owner.clone())
                .spawn(move || work(store, config))
        })
        .collect::<Result<_, _>>()?;
    let mut total = Tally::default();
    let mut failure = None;
    for thread in threads {
        match thread.join() {
            Ok(Ok(tally)) => total.add(&tally),
            Ok(Err(error)) => failure = Some(error),
            Err(_) => failure = Some(anyhow::anyhow!("a worker thread panicked")),
        }
    }
    println!(
        "workers drove {} sessions: {} done, {} failed, {} given back after a store failure, {} taken over by other workers",
        total.driven, total.done, total.failed, total.released, total.taken_over
    );
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

#[derive(Default)]
struct Tally {
    driven: usize,
    done: usize,
    failed: usize,
    released: usize,
    taken_over: usize,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.driven += other.driven;
        self.done += other.done;
        self.failed += other.failed;
        self.released += other.released;
        self.taken_over += other.taken_over;
    }

    fn count(&mut self, driven: &Driven) {
        self.driven += 1;
        match &driven.outcome {
            Outcome::Finished { mismatches, .. } if mismatches.is_empty() => self.done += 1,
            Outcome::Finished { .. } | Outcome::Failed { .. } => self.failed += 1,
            Outcome::Released { .. } => self.released += 1,
            Outcome::TakenOver { .. } => self.taken_over += 1,
        }
    }
}

/// One worker on a runtime of its own, until the queue stays empty.
fn work(store: PostgresStore, config: WorkerConfig) -> Result<Tally> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let owner = config.owner.clone();
    let worker = Worker::new(store, config);
    let mut tally = Tally::default();
    runtime.block_on(worker.run(|event| match event {
        Report::Driven(driven) => {
            tally.count(driven);
            report(&owner, driven);
        }
        Report::StoreFailed(error) => {
            eprintln!("{owner}: the store failed; trying again: {error}");
        }
    }))?;
    Ok(tally)
}

/// The line that says how a session ended; a lost lease goes to stderr, as an error would.
pub(crate) fn report(owner: &str, driven: &Driven) {
    let session = &driven.session;
    let token = driven.token;
    match &driven.outcome {
        Outcome::Finished {
            turn_ends,
            mismatches,
            earlier_events,
        } => {
            let ends: Vec<String> = turn_ends
                .iter()
                .map(|kind| {
                    serde_json::to_value(kind)
                        .ok()
                        .and_then(|kind| kind.as_str().map(str::to_owned))
                        .unwrap_or_default()
                })
                .collect();
            let resumed = if *earlier_events > 0 {
                format!(", resumed after {earlier_events} events")
            } else {
                String::new()
            };
            println!(
                "{owner}: session {session} (token {token}) finished: turns {}{resumed}",
                ends.join(", ")
            );
            for mismatch in mismatches {
                eprintln!("{owner}: session {session}: expected otherwise: {mismatch}");
            }
        }
        Outcome::Failed { why } => {
            eprintln!("{owner}: session {session} (token {token}) failed: {why}");
        }
        Outcome::Released { why } => eprintln!(
            "{owner}: session {session} (token {token}) was given back unfinished, to be resumed from its log by the next claim: {why}"
        ),
        Outcome::TakenOver { why } => eprintln!(
            "{owner}: session {session} (token {token}) was taken over by another worker; stopped driving it: {why}"
        ),
    }
}

/// `toolrail run --store`: the scenario `payload` as session `id`, queued for the workers
/// (`enqueue`) or driven here under a lease of this process.
pub(crate) fn run_stored(
    url: &str,
    id: Option<String>,
    payload: &str,
    enqueue: bool,
) -> Result<()> {
    let store = connect(url)?;
    let id = SessionId::new(id.unwrap_or_else(|| stamped_id("run")));
    if enqueue {
        return crate::enqueue::enqueue(&store, &id, payload, Queueing::New);
    }
    // A run here starts a session of its own: one the store knows — queued for the workers,
    // or with events — is never driven beside them or continued from here.
    let standing = store.standing(&id).map_err(enqueue::refused)?;
    if standing != Standing::Absent {
        return Err(bad_input!(
            "session `{id}` exists already: it is {standing}; {}",
            enqueue::advice(&standing, Queueing::New)
        ));
    }
    let owner = owner_name("run");
    let lease_time = Duration::from_secs(10);
    let lease = store
        .acquire(&id, &owner, lease_time)
        .map_err(|error| bad_input!("{error}"))?;
    let worker = Worker::new(
        store.clone(),
        WorkerConfig {
            owner: owner.clone(),
            lease: lease_time,
            work_dir: runs_dir("run")?,
            poll: Duration::from_millis(50),
            idle_exit: None,
        },
    );
    let driven = crate::runtime()?.block_on(worker.drive_leased(lease, payload));
    report(&owner, &driven);
    let events = store.read(&id)?;
    println!("{}", summary_of(&events).line());
    println!("log: session {id} in the store");
    match driven.outcome {
        Outcome::Finished { mismatches, .. } if mismatches.is_empty() => Ok(()),
        Outcome::Finished { mismatches, .. } => anyhow::bail!(
            "the run differs from the scenario's expectations in {} ways",
            mismatches.len()
        ),
        Outcome::Released { why } => anyhow::bail!(
            "{why}; `toolrail enqueue --store … --session {id} --retry SCENARIO_FILE` queues it to be resumed from its log"
        ),
        Outcome::Failed { why } | Outcome::TakenOver { why } => anyhow::bail!("{why}"),
    }
}
