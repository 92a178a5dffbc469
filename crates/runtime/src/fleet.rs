//! Workers that share sessions through PostgreSQL: each claims a session waiting in the
//! queue (or one whose worker's lease ran out), drives its scenario under the lease —
//! renewed in the background, checked by every append — and finishes it. A session taken
//! over from a dead worker is recovered first (DESIGN §6) and continued from its log.
//!
//! Only the session's own faults mark it `failed` (a payload that is not a scenario, a
//! session that cannot be built, expectations missed). When the store fails under a
//! session — its log's connection dropped, a restart — the session is given back to the
//! queue unfinished, and the next claim resumes it the way a takeover does.
//!
//! Store calls block the calling thread for a round trip: run each worker on a runtime of
//! its own (`toolrail worker` gives each a thread).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolrail_session_log::{SessionId, event::TurnEndKind};
use toolrail_session_store::{Claimed, Finish, Lease, PostgresStore, StoreError};
use toolrail_tools_core::{CancellationToken, Tool};

use crate::scenario::{Fault, RunOptions, Scenario, ScenarioPlace};
use crate::store::Store;

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The lease owner's name: one per worker, never shared.
    pub owner: String,
    /// How long a lease lasts without renewal; it is renewed every third of it.
    pub lease: Duration,
    /// Each session's folder (workspace, spilled outputs) is `<work_dir>/<session>`.
    pub work_dir: PathBuf,
    /// How long to wait before asking the queue again when it was empty.
    pub poll: Duration,
    /// Stop once the queue has been empty this long (`None`: never).
    pub idle_exit: Option<Duration>,
}

/// How driving one session ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every turn ran; the session is `done` (or `failed` when it missed its expectations).
    Finished {
        /// How each turn this worker drove ended, in order (after a takeover, only the
        /// turns still to drive).
        turn_ends: Vec<TurnEndKind>,
        /// Every way the run differed from the scenario's `expect`; any makes the session
        /// `failed`.
        mismatches: Vec<String>,
        /// Events the session held when this worker took it (more than 0 after a takeover).
        earlier_events: usize,
    },
    /// The session is at fault — its payload is not a scenario, it could not be built, a
    /// turn failed for a reason of its own — and is marked `failed` with why.
    Failed {
        /// What went wrong.
        why: String,
    },
    /// The store failed under the session (its log's connection dropped, the database
    /// restarted or did not answer): the session is not at fault and is not marked failed.
    /// It was given back to the queue — or, when the store could not be reached to say so,
    /// left for its lease to run out — and the next claim, this worker's or another's,
    /// resumes it from its log, recovery first.
    Released {
        /// How the store failed, and how the session was given back.
        why: String,
    },
    /// Another worker holds the session now: this one stopped driving it (its calls were
    /// cancelled) and wrote nothing more to the log.
    TakenOver {
        /// How the lease was lost, as the store refused this worker.
        why: String,
    },
}

/// What a running worker reports.
#[derive(Debug)]
pub enum Report<'a> {
    /// A session it drove, and how that ended.
    Driven(&'a Driven),
    /// The store failed to answer; the worker tries again.
    StoreFailed(&'a StoreError),
}

/// One session a worker drove.
#[derive(Debug)]
pub struct Driven {
    /// The session's id, in the store and its queue.
    pub session: SessionId,
    /// The lease's fencing token.
    pub token: i64,
    /// Claims before this one (more than 0 after a takeover).
    pub earlier_claims: i32,
    /// How driving it ended.
    pub outcome: Outcome,
}

/// Makes the tools a session's scenario may name beside the catalog's, for a session's
/// folder (a test kit's probes write their markers there).
pub type ExtraTools = Arc<dyn Fn(&std::path::Path) -> Vec<Arc<dyn Tool>> + Send + Sync>;

/// A worker of the fleet.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use toolrail_runtime::fleet::{Worker, WorkerConfig};
/// use toolrail_session_store::{Durability, PostgresStore};
/// let store = PostgresStore::connect("postgres://toolrail@127.0.0.1/toolrail", Durability::Strict)?;
/// let worker = Worker::new(store, WorkerConfig {
///     owner: "worker-1".into(),
///     lease: Duration::from_secs(10),
///     work_dir: "/var/lib/toolrail/work".into(),
///     poll: Duration::from_millis(50),
///     idle_exit: Some(Duration::from_secs(5)),
/// });
/// let driven = worker.run(|report| println!("{report:?}")).await?;
/// # Ok(()) }
/// ```
pub struct Worker {
    store: PostgresStore,
    config: WorkerConfig,
    tools: Option<ExtraTools>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker of `store`'s queue; nothing is claimed until [`Worker::drive_next`] or
    /// [`Worker::run`].
    pub fn new(store: PostgresStore, config: WorkerConfig) -> Self {
        Self {
            store,
            config,
            tools: None,
        }
    }

    /// Tools every session's scenario may name beside the catalog's.
    pub fn with_tools(mut self, tools: ExtraTools) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Claims one session and drives it to its end; `None` when nothing waits.
    pub async fn drive_next(&self) -> Result<Option<Driven>, StoreError> {
        let claimed = self.store.claim(&self.config.owner, self.config.lease)?;
        match claimed {
            Some(claimed) => Ok(Some(self.drive(claimed).await)),
            None => Ok(None),
        }
    }

    /// Drives sessions until the queue stays empty for `idle_exit`, reporting each session
    /// and each store failure; returns how many it drove. A store that fails (a restart, a
    /// lock that timed out) is tried again with a growing pause, up to 5 s; a failure that
    /// outlasts `idle_exit` ends the run with it.
    pub async fn run(&self, mut report: impl FnMut(Report<'_>)) -> Result<usize, StoreError> {
        let mut driven = 0;
        let mut idle_since = Instant::now();
        let mut pause = self.config.poll;
        loop {
            let idle_too_long = || {
                self.config
                    .idle_exit
                    .is_some_and(|limit| idle_since.elapsed() >= limit)
            };
            match self.drive_next().await {
                Ok(Some(done)) => {
                    let released = matches!(done.outcome, Outcome::Released { .. });
                    report(Report::Driven(&done));
                    driven += 1;
                    idle_since = Instant::now();
                    if released {
                        // The store failed under that session: the next claim (most likely
                        // of the same session) waits as after any store failure, so a store
                        // that keeps failing is not claimed from in a tight loop.
                        pause = next_pause(pause);
                        tokio::time::sleep(pause).await;
                    } else {
                        pause = self.config.poll;
                    }
                }
                Ok(None) => {
                    if idle_too_long() {
                        return Ok(driven);
                    }
                    tokio::time::sleep(self.config.poll).await;
                }
                Err(error) => {
                    report(Report::StoreFailed(&error));
                    if idle_too_long() {
                        return Err(error);
                    }
                    pause = next_pause(pause);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    async fn drive(&self, claimed: Claimed) -> Driven {
        let Claimed {
            lease,
            payload,
            earlier_claims,
        } = claimed;
        let mut driven = self.drive_leased(lease, &payload).await;
        driven.earlier_claims = earlier_claims;
        driven
    }

    /// Drives the scenario `payload` under `lease`, a session this worker acquired itself
    /// (not from the queue): renewal, recovery and fencing as for a claimed one.
    pub async fn drive_leased(&self, lease: Lease, payload: &str) -> Driven {
        let outcome = self.outcome(&lease, payload).await;
        Driven {
            session: lease.session.clone(),
            token: lease.token,
            earlier_claims: 0,
            outcome,
        }
    }

    async fn outcome(&self, lease: &Lease, payload: &str) -> Outcome {
        let scenario = match Scenario::from_json(payload) {
            Ok(scenario) => scenario,
            Err(error) => return self.fail(lease, error.to_string()),
        };
        let cancel = CancellationToken::new();
        let renewing = match Renewal::start(self.store.clone(), lease.clone(), cancel.clone()) {
            Ok(renewing) => renewing,
            // The machine's fault (no thread to be had), not the session's.
            Err(error) => {
                return self.release(lease, format!("the lease renewal could not start: {error}"));
            }
        };
        let session_dir = self.config.work_dir.join(lease.session.as_str());
        let options = RunOptions {
            place: ScenarioPlace::Leased {
                store: Store::from_postgres(self.store.clone(), "postgres (the fleet's store)"),
                lease: lease.clone(),
            },
            cancel: Some(cancel),
            tools: self
                .tools
                .as_ref()
                .map(|tools| tools(&session_dir))
                .unwrap_or_default(),
            ..RunOptions::default()
        };
        let ran = scenario.run_with(&session_dir, options).await;
        if let Some(why) = renewing.stop().await {
            return Outcome::TakenOver { why };
        }
        let report = match ran {
            Ok(report) => report,
            Err(error) => {
                return match error.fault() {
                    Fault::Scenario => self.fail(lease, error.to_string()),
                    Fault::Store => self.release(
                        lease,
                        format!("the store failed under the session: {error}"),
                    ),
                    Fault::TakenOver => Outcome::TakenOver {
                        why: error.to_string(),
                    },
                };
            }
        };
        let finish = if report.mismatches.is_empty() {
            Finish::Done
        } else {
            Finish::Failed(format!(
                "the run differs from the scenario's expectations: {}",
                report.mismatches.join("; ")
            ))
        };
        match self.store.finish(lease, &finish) {
            Ok(()) => Outcome::Finished {
                turn_ends: report.turn_ends,
                mismatches: report.mismatches,
                earlier_events: report.earlier_events,
            },
            Err(error) => self.unfinished(
                lease,
                "every turn ran, but the session could not be marked finished".to_owned(),
                error,
            ),
        }
    }

    /// Marks the session failed with `why`, if its lease is still this worker's.
    fn fail(&self, lease: &Lease, why: String) -> Outcome {
        match self.store.finish(lease, &Finish::Failed(why.clone())) {
            Ok(()) => Outcome::Failed { why },
            Err(error) => self.unfinished(
                lease,
                format!("{why}; the failure could not be recorded"),
                error,
            ),
        }
    }

    /// What a refused `finish` leaves: a lease lost to another worker (which drives the
    /// session now), or a store that failed — the session is given back, to be finished
    /// by whoever claims it next.
    fn unfinished(&self, lease: &Lease, what: String, error: StoreError) -> Outcome {
        if error.is_lease_lost() {
            Outcome::TakenOver {
                why: format!("{what}: {error}"),
            }
        } else {
            self.release(lease, format!("{what}: {error}"))
        }
    }

    /// Gives the session back to the queue unfinished, if its lease is still this
    /// worker's; a store that cannot be reached leaves the lease to run out instead.
    fn release(&self, lease: &Lease, why: String) -> Outcome {
        match self.store.release_claim(lease, &why) {
            Ok(()) => Outcome::Released { why },
            Err(error) if error.is_lease_lost() => Outcome::TakenOver {
                why: format!("{why}; {error}"),
            },
            Err(error) => Outcome::Released {
                why: format!(
                    "{why}; it could not be given back ({error}), so its lease runs out within {:.1} s and the next claim takes it over",
                    lease.ttl.as_secs_f64()
                ),
            },
        }
    }
}

/// The pause before the next claim after the store failed: doubled, from 100 ms up to 5 s.
fn next_pause(pause: Duration) -> Duration {
    (pause * 2).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// How long the lease of a session resumed by hand lasts without renewal.
const RESUME_LEASE: Duration = Duration::from_secs(30);

/// Resumes session `id` of a PostgreSQL store under a lease of this process's: see
/// [`AgentBuilder::resume`](crate::AgentBuilder::resume).
pub(crate) async fn resume_leased(
    builder: crate::AgentBuilder,
    store: &Store,
    postgres: &PostgresStore,
    id: &SessionId,
) -> Result<crate::Resumed, crate::BuildError> {
    let owner = format!("resume-{}", std::process::id());
    let refused = |error: StoreError| crate::BuildError::Store(store.refused(error));
    let lease = postgres
        .acquire(id, &owner, RESUME_LEASE)
        .map_err(refused)?;
    let renewal = Renewal::start(postgres.clone(), lease.clone(), CancellationToken::new())
        .map_err(|error| {
            crate::BuildError::Session(format!("the lease renewal could not start: {error}"))
        })?;
    let held = HeldLease {
        renewal: Some(renewal),
        store: postgres.clone(),
        lease: lease.clone(),
    };
    let built = builder
        .build_in(crate::agent::Source::Leased {
            store: store.clone(),
            lease,
        })
        .await?;
    built.agent.keep(Box::new(held));
    Ok(crate::Resumed {
        agent: built.agent,
        recovery: built.recovery.unwrap_or_default(),
    })
}

/// A lease renewed while it lives, released when it is dropped.
struct HeldLease {
    renewal: Option<Renewal>,
    store: PostgresStore,
    lease: Lease,
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        drop(self.renewal.take());
        // Released, not left to run out: whoever comes next need not wait for it.
        let _ = self.store.release(&self.lease);
    }
}

/// Renews a lease every third of its life on a thread of its own (a renewal must not wait
/// behind the session's work), and cancels the session once the lease is lost.
struct Renewal {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<Option<String>>>,
}

impl Renewal {
    fn start(
        store: PostgresStore,
        lease: Lease,
        session: CancellationToken,
    ) -> std::io::Result<Self> {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let every = lease.ttl / 3;
        // After a failed renewal the next try comes sooner: two slow tries must not let a
        // live worker's lease run out.
        let retry = lease.ttl / 10;
        let thread = std::thread::Builder::new()
            .name(format!("lease {}", lease.session))
            .spawn(move || {
                let mut wait = every;
                loop {
                    let deadline = Instant::now() + wait;
                    while Instant::now() < deadline {
                        if stopped.is_cancelled() {
                            return None;
                        }
                        std::thread::sleep(Duration::from_millis(10).min(wait));
                    }
                    match store.renew(&lease) {
                        Ok(()) => wait = every,
                        Err(error) if error.is_lease_lost() => {
                            session.cancel();
                            return Some(error.to_string());
                        }
                        // A failed round trip is tried again soon; the appends' own fencing
                        // still guards the log meanwhile.
                        Err(_) => wait = retry,
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops renewing; says why the lease was lost, if it was.
    async fn stop(mut self) -> Option<String> {
        self.stop.cancel();
        let thread = self.thread.take()?;
        tokio::task::spawn_blocking(move || thread.join().ok().flatten())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
