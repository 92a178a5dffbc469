//! The work queue: sessions put there for workers, claimed with `FOR UPDATE SKIP LOCKED`,
//! and finished by their holder.

use super::*;

/// A session a worker claimed from the queue: its lease, and what it is to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The lease the claim took; [`PostgresStore::finish`] ends it with the work.
    pub lease: Lease,
    /// What the enqueuer put there (a scenario, a prompt and settings).
    pub payload: String,
    /// How many times it was claimed before (0 for a first claim; more after takeovers).
    pub earlier_claims: i32,
}

/// How a worker ends a claimed session: what the queue row says afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// Every turn ran and matched its scenario: `done`.
    Done,
    /// The session's own fault — a payload that is not a scenario, a session that cannot
    /// be built, expectations missed: `failed`, with why (`toolrail enqueue --retry`
    /// queues it again).
    Failed(String),
}

impl PostgresStore {
    /// Puts session `id` in the queue with `payload`, waiting for a worker. Refused with
    /// [`StoreError::Known`], naming where it stands, when the store knows the id already:
    /// queued before (in any state), or holding events (a run outside the queue wrote
    /// them) — a session is queued once; [`PostgresStore::retry`] queues a failed one again.
    pub fn enqueue(&self, id: &SessionId, payload: &str) -> Result<(), StoreError> {
        check_session_id(id)?;
        off_runtime(|| {
            self.with_client(|client| {
                let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
                let standing = standing_of(&mut transaction, id.as_str(), RowLock::Update)
                    .map_err(|error| self.failed(&error))?;
                if standing != Standing::Absent {
                    return Err(StoreError::Known {
                        session: id.as_str().to_owned(),
                        standing,
                    });
                }
                let queued = transaction
                    .execute(
                        "INSERT INTO work_queue (session, payload) VALUES ($1, $2)
                         ON CONFLICT DO NOTHING",
                        &[&id.as_str(), &payload],
                    )
                    .map_err(|error| self.failed(&error))?;
                if queued == 0 {
                    // Another enqueuer's row landed between the check and the insert.
                    return Err(StoreError::Known {
                        session: id.as_str().to_owned(),
                        standing: Standing::Waiting {
                            events: 0,
                            reason: None,
                        },
                    });
                }
                transaction.commit().map_err(|error| self.failed(&error))
            })
        })
    }

    /// Queues session `id` again with `payload`: a failed session, or one a run outside the
    /// queue left with a turn open and nobody driving it. The worker that claims it resumes
    /// it from its log — recovery first, then the turns still to run — it does not start
    /// over. Returns where it stood; [`StoreError::NotRetryable`] for any other session
    /// (waiting, running, done, or not in the store), naming where it stands.
    pub fn retry(&self, id: &SessionId, payload: &str) -> Result<Standing, StoreError> {
        check_session_id(id)?;
        off_runtime(|| {
            self.with_client(|client| {
                let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
                let standing = standing_of(&mut transaction, id.as_str(), RowLock::Update)
                    .map_err(|error| self.failed(&error))?;
                if !standing.retryable() {
                    return Err(StoreError::NotRetryable {
                        session: id.as_str().to_owned(),
                        standing,
                    });
                }
                let reason = match &standing {
                    Standing::Failed { reason, .. } => format!("retried after it failed: {reason}"),
                    Standing::Absent
                    | Standing::Waiting { .. }
                    | Standing::Running { .. }
                    | Standing::Done { .. }
                    | Standing::Unqueued { .. } => {
                        "queued after a run outside the queue left it open".to_owned()
                    }
                };
                // A retried session goes to the back of the queue, as a new request would.
                transaction
                    .execute(
                        "INSERT INTO work_queue (session, payload, reason) VALUES ($1, $2, $3)
                         ON CONFLICT (session) DO UPDATE
                         SET payload = EXCLUDED.payload, reason = EXCLUDED.reason,
                             state = 'waiting', updated_at = clock_timestamp()",
                        &[&id.as_str(), &payload, &reason],
                    )
                    .map_err(|error| self.failed(&error))?;
                transaction.commit().map_err(|error| self.failed(&error))?;
                Ok(standing)
            })
        })
    }

    /// Claims the oldest session waiting for work — or one whose worker's lease ran out (a
    /// takeover) — for `owner`, with its lease. Claimers skip rows another claimer has
    /// locked (`FOR UPDATE SKIP LOCKED`), so no session is claimed twice at once and no
    /// claimer waits for another. `None` when nothing waits.
    pub fn claim(&self, owner: &str, ttl: Duration) -> Result<Option<Claimed>, StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
                // Taking a lapsed lease waits for a group its old holder is writing; not
                // for longer than this (the claim fails and is tried again).
                transaction
                    .batch_execute("SET LOCAL lock_timeout = '2s'")
                    .map_err(|error| self.failed(&error))?;
                // The candidate is locked first, then checked again by a statement of its own:
                // under READ COMMITTED a locked row that another claimer has just taken is
                // re-read, but the lease it joined is not, so the first query alone would let a
                // fresh claim look like a lapsed one and hand the session out twice.
                let mut passed: Vec<String> = Vec::new();
                let found = loop {
                    if passed.len() > 32 {
                        break None;
                    }
                    let row = transaction
                        .query_opt(
                            "SELECT q.session FROM work_queue q
                             LEFT JOIN leases l ON l.session = q.session
                             WHERE (q.state = 'waiting'
                                 OR (q.state = 'running'
                                     AND (l.expires_at IS NULL OR l.expires_at < clock_timestamp())))
                               AND NOT (q.session = ANY($1))
                             ORDER BY q.updated_at
                             LIMIT 1
                             FOR UPDATE OF q SKIP LOCKED",
                            &[&passed],
                        )
                        .map_err(|error| self.failed(&error))?;
                    let Some(row) = row else {
                        break None;
                    };
                    let session: String = row.get(0);
                    let current = transaction
                        .query_one(
                            "SELECT q.payload, q.claims, q.state = 'waiting'
                                 OR (q.state = 'running' AND (l.expires_at IS NULL
                                     OR l.expires_at < clock_timestamp()))
                             FROM work_queue q LEFT JOIN leases l ON l.session = q.session
                             WHERE q.session = $1",
                            &[&session],
                        )
                        .map_err(|error| self.failed(&error))?;
                    if current.get::<_, bool>(2) {
                        let granted = grant_lease(&mut transaction, &session, owner, ttl)
                            .map_err(|error| self.failed(&error))?;
                        if let Some(token) = granted {
                            let (payload, claims) = (current.get(0), current.get(1));
                            break Some((session, payload, claims, token));
                        }
                    }
                    passed.push(session);
                };
                let Some((session, payload, claims, token)) = found else {
                    // Ended here, so the connection goes back to the idle ones clean.
                    transaction.rollback().map_err(|error| self.failed(&error))?;
                    return Ok(None);
                };
                transaction
                    .execute(
                        "UPDATE work_queue SET state = 'running', worker = $2, claims = claims + 1,
                             reason = NULL, updated_at = clock_timestamp()
                         WHERE session = $1",
                        &[&session, &owner],
                    )
                    .map_err(|error| self.failed(&error))?;
                transaction.commit().map_err(|error| self.failed(&error))?;
                Ok(Some(Claimed {
                    lease: Lease {
                        session: SessionId::new(session),
                        owner: owner.to_owned(),
                        token,
                        ttl,
                    },
                    payload,
                    earlier_claims: claims,
                }))
            })
        })
    }

    /// Marks a claimed session finished — `done`, or `failed` with its reason — and gives
    /// its lease up, only while the lease is still this worker's: a worker that was taken
    /// over finishes nothing ([`StoreError::Fenced`]).
    pub fn finish(&self, lease: &Lease, finish: &Finish) -> Result<(), StoreError> {
        let (state, reason) = match finish {
            Finish::Done => ("done", None),
            Finish::Failed(reason) => ("failed", Some(reason.as_str())),
        };
        self.end_claim(
            lease,
            "UPDATE work_queue SET state = $2, reason = $3, updated_at = clock_timestamp()
             WHERE session = $1",
            state,
            reason,
        )
    }

    /// Gives a claimed session back unfinished, with why: it waits in the queue again, and
    /// the next claim — this worker's or another's — resumes it from its log, recovery
    /// first. What a worker does when the store failed under a session (a dropped
    /// connection, a restart): the session is not at fault. Only while the lease is still
    /// this worker's ([`StoreError::Fenced`] otherwise). A session driven outside the queue
    /// only has its lease ended. It keeps the time of its last claim as its place in the
    /// queue: after the sessions queued before that claim, before those queued since.
    pub fn release_claim(&self, lease: &Lease, why: &str) -> Result<(), StoreError> {
        self.end_claim(
            lease,
            "UPDATE work_queue SET state = $2, reason = $3
             WHERE session = $1 AND state = 'running'",
            "waiting",
            Some(why),
        )
    }

    /// Sets the queue row of `lease`'s session with `update` (`$1` session, `$2` state, `$3`
    /// reason) and ends the lease, in one transaction, while the lease holds.
    fn end_claim(
        &self,
        lease: &Lease,
        update: &str,
        state: &str,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
                // The queue row first, then the lease: the order a claim takes them in, so
                // a claim and a finish of the same session cannot deadlock.
                transaction
                    .execute(
                        "SELECT 1 FROM work_queue WHERE session = $1 FOR UPDATE",
                        &[&lease.session.as_str()],
                    )
                    .map_err(|error| self.failed(&error))?;
                let held = lease_token(&mut transaction, lease.session.as_str(), RowLock::Update)
                    .map_err(|error| self.failed(&error))?;
                if held != Some(lease.token) {
                    return Err(self.fenced(lease));
                }
                transaction
                    .execute(update, &[&lease.session.as_str(), &state, &reason])
                    .map_err(|error| self.failed(&error))?;
                expire_lease(&mut transaction, lease).map_err(|error| self.failed(&error))?;
                transaction.commit().map_err(|error| self.failed(&error))
            })
        })
    }
}
