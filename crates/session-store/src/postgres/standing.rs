//! Where a session stands: its place in the work queue, and for a session driven outside
//! the queue (`toolrail run --store`, `toolrail resume`) what its log and lease say — what
//! enqueueing checks before it queues anything, and what its refusals name; and every
//! session listed so, as `toolrail sessions` shows them.

use super::*;

/// Where one session of a PostgreSQL store stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The store knows no such session: no queue row, no event.
    Absent,
    /// In the queue, waiting for a worker; a session that holds events already (given back
    /// by a worker, or retried) is resumed from them, recovery first.
    Waiting {
        /// Events its log holds.
        events: u64,
        /// Why it waits again, when it was claimed before: the worker that gave it back and
        /// why, or the failure it is retried after.
        reason: Option<String>,
    },
    /// Claimed by a worker.
    Running {
        /// The worker that claimed it last.
        worker: String,
        /// Whether that worker's lease still runs; once it ran out, the next claim takes
        /// the session over and resumes it.
        leased: bool,
        /// Events its log holds.
        events: u64,
    },
    /// Finished: every turn ran, and the run matched what its scenario expected.
    Done {
        /// Events its log holds.
        events: u64,
    },
    /// Failed for a reason of its own: its scenario or configuration is wrong.
    Failed {
        /// What was wrong, as the worker said it.
        reason: String,
        /// Events its log holds.
        events: u64,
    },
    /// Not in the queue: events written by a run outside it.
    Unqueued {
        /// Events its log holds.
        events: u64,
        /// Whether its last event ends a turn (nothing was left open).
        ended: bool,
        /// Who holds a live lease on it, if anyone does (a run driving it now).
        holder: Option<String>,
    },
}

impl Standing {
    /// Whether [`PostgresStore::retry`] queues it again: a failed session, or one a run
    /// outside the queue left with a turn open and nobody driving it.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Failed { .. } => true,
            Self::Unqueued {
                ended: false,
                holder: None,
                ..
            } => true,
            Self::Absent
            | Self::Waiting { .. }
            | Self::Running { .. }
            | Self::Done { .. }
            | Self::Unqueued { .. } => false,
        }
    }

    /// How many events the session's log holds.
    pub fn events(&self) -> u64 {
        match self {
            Self::Absent => 0,
            Self::Waiting { events, .. }
            | Self::Running { events, .. }
            | Self::Done { events }
            | Self::Failed { events, .. }
            | Self::Unqueued { events, .. } => *events,
        }
    }
}

impl std::fmt::Display for Standing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absent => f.write_str("not in the store (no queue entry, no events)"),
            Self::Waiting { events: 0, .. } => f.write_str("queued, waiting for a worker"),
            Self::Waiting { events, reason } => {
                write!(
                    f,
                    "queued, waiting for a worker to resume it from its {events} events"
                )?;
                match reason {
                    Some(reason) => write!(f, " ({reason})"),
                    None => Ok(()),
                }
            }
            Self::Running {
                worker,
                leased: true,
                ..
            } => write!(f, "running: worker `{worker}` holds its lease"),
            Self::Running {
                worker,
                leased: false,
                ..
            } => write!(
                f,
                "running, but its worker `{worker}` stopped renewing its lease: the next worker takes it over and resumes it"
            ),
            Self::Done { .. } => f.write_str("done: every turn ran"),
            Self::Failed { reason, .. } => write!(f, "failed: {reason}"),
            Self::Unqueued {
                holder: Some(holder),
                events,
                ..
            } => write!(
                f,
                "not queued, and `{holder}` is driving it now ({events} events so far)"
            ),
            Self::Unqueued {
                events,
                ended: true,
                holder: None,
            } => write!(
                f,
                "not queued: its {events} events come from a run outside the queue, and its last turn ended"
            ),
            Self::Unqueued {
                events,
                ended: false,
                holder: None,
            } => write!(
                f,
                "not queued: its {events} events come from a run outside the queue that stopped with a turn open"
            ),
        }
    }
}

impl PostgresStore {
    /// Where session `id` stands: in the queue, or, for a session driven outside it, what
    /// its log and lease say.
    pub fn standing(&self, id: &SessionId) -> Result<Standing, StoreError> {
        check_session_id(id)?;
        off_runtime(|| {
            self.with_client(|client| {
                standing_of(client, id.as_str(), RowLock::None).map_err(|error| self.failed(&error))
            })
        })
    }
}

/// Where `session` stands, its queue row locked as `lock` says for the rest of the
/// transaction (a row that is not there yet is not locked: enqueueing inserts it with `ON
/// CONFLICT`).
pub(super) fn standing_of(
    client: &mut impl postgres::GenericClient,
    session: &str,
    lock: RowLock,
) -> Result<Standing, postgres::Error> {
    let query = match lock {
        RowLock::Share => {
            "SELECT state, reason, worker FROM work_queue WHERE session = $1 FOR SHARE"
        }
        RowLock::Update => {
            "SELECT state, reason, worker FROM work_queue WHERE session = $1 FOR UPDATE"
        }
        RowLock::None => "SELECT state, reason, worker FROM work_queue WHERE session = $1",
    };
    let queued = client.query_opt(query, &[&session])?;
    let log = client.query_one(
        "SELECT (SELECT COALESCE(max(seq), 0) FROM events WHERE session = $1),
                (SELECT line::json->>'kind' FROM events WHERE session = $1
                 ORDER BY seq DESC LIMIT 1),
                l.owner, COALESCE(l.expires_at > now(), false)
         FROM (SELECT 1) AS one LEFT JOIN leases l ON l.session = $1",
        &[&session],
    )?;
    let events = u64::try_from(log.get::<_, i64>(0)).unwrap_or_default();
    let last_kind: Option<String> = log.get(1);
    let owner: Option<String> = log.get(2);
    let leased: bool = log.get(3);
    let Some(row) = queued else {
        if events == 0 {
            return Ok(Standing::Absent);
        }
        return Ok(Standing::Unqueued {
            events,
            ended: last_kind.as_deref() == Some("turn/end"),
            holder: owner.filter(|_| leased),
        });
    };
    let state: String = row.get(0);
    let reason: Option<String> = row.get(1);
    let worker: Option<String> = row.get(2);
    Ok(match state.as_str() {
        "running" => Standing::Running {
            worker: worker.or(owner).unwrap_or_else(|| "?".to_owned()),
            leased,
            events,
        },
        "done" => Standing::Done { events },
        "failed" => Standing::Failed {
            reason: reason.unwrap_or_else(|| "no reason was recorded".to_owned()),
            events,
        },
        // `waiting`, and any state a newer toolrail might write: a worker would claim it.
        _ => Standing::Waiting { events, reason },
    })
}

/// One session as `toolrail sessions` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    /// The session's id.
    pub session: String,
    /// How many events it has (its last `seq`); 0 for a session still waiting in the queue.
    pub events: u64,
    /// The kind of its last event (`turn/end`, `tool/result`, …).
    pub last_kind: String,
    /// How its last turn ended, if it did.
    pub ended: Option<String>,
    /// The lease holder, and whether the lease still runs.
    pub owner: Option<String>,
    /// Whether the lease of `owner` has not expired yet.
    pub leased: bool,
    /// Where it stands in the work queue (`waiting`, `running`, `done`, `failed`), if it was
    /// put there.
    pub queue: Option<String>,
    /// Why it failed, or why it waits again (a worker gave it back unfinished, or it was
    /// retried), as the queue keeps it.
    pub reason: Option<String>,
    /// How many times workers claimed it (more than 1 after a takeover or a give-back).
    pub claims: i32,
}

impl PostgresStore {
    /// Every session in the database, by name, with its lease.
    pub fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        off_runtime(|| {
            self.with_client(|client| {
                let rows = client
                    .query(
                        // Queued sessions have no events yet, and are sessions all the same.
                        "SELECT s.session, COALESCE(e.seq, 0), e.line, l.owner,
                                COALESCE(l.expires_at > now(), false), q.state, q.reason,
                                COALESCE(q.claims, 0)
                         FROM (SELECT session FROM events UNION SELECT session FROM work_queue) s
                         LEFT JOIN LATERAL (SELECT seq, line FROM events
                                            WHERE session = s.session
                                            ORDER BY seq DESC LIMIT 1) e ON true
                         LEFT JOIN leases l ON l.session = s.session
                         LEFT JOIN work_queue q ON q.session = s.session
                         ORDER BY s.session",
                        &[],
                    )
                    .map_err(|error| self.failed(&error))?;
                Ok(rows
                    .iter()
                    .map(|row| {
                        let line: Option<String> = row.get(2);
                        let last: Option<Event> =
                            line.and_then(|line| serde_json::from_str(&line).ok());
                        let last_kind = last.as_ref().map_or_else(
                            || "(none)".to_owned(),
                            |event| event.data.kind().to_owned(),
                        );
                        let ended = last.as_ref().and_then(|event| {
                            let toolrail_session_log::EventData::TurnEnd(end) = &event.data else {
                                return None;
                            };
                            serde_json::to_value(end.kind)
                                .ok()
                                .and_then(|kind| kind.as_str().map(str::to_owned))
                        });
                        SessionSummary {
                            session: row.get(0),
                            events: u64::try_from(row.get::<_, i64>(1)).unwrap_or_default(),
                            last_kind,
                            ended,
                            owner: row.get(3),
                            leased: row.get(4),
                            queue: row.get(5),
                            reason: row.get(6),
                            claims: row.get(7),
                        }
                    })
                    .collect())
            })
        })
    }
}
