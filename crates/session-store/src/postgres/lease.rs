//! Leases: a worker that drives a session holds its lease — owner, fencing token, expiry in
//! the database's clock; every append of a leased log is checked against it.

use super::*;

/// A worker's hold on a session: while its token is the session's, its appends go through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The session the lease is for.
    pub session: SessionId,
    /// The worker's name, as given to [`PostgresStore::acquire`] or
    /// [`PostgresStore::claim`]; one per worker process.
    pub owner: String,
    /// Larger for every new holder; appends carry it.
    pub token: i64,
    /// How long the lease runs from each grant or renewal, by the database's clock.
    pub ttl: Duration,
}

impl PostgresStore {
    /// Takes the lease of session `id` for `owner`, for `ttl`: granted when nobody holds
    /// it, when its holder's lease expired (a takeover: the token grows), or when `owner`
    /// holds it already — with a new token, which fences any log opened under the old one:
    /// give every worker process an owner name of its own, and keep a lease with `renew`.
    /// Refused, naming the holder, while another holder's lease runs.
    pub fn acquire(&self, id: &SessionId, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        off_runtime(|| self.acquire_here(id, owner, ttl))
    }

    pub(super) fn acquire_here(
        &self,
        id: &SessionId,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        check_session_id(id)?;
        self.with_client(|client| {
            // A holder paused inside a group holds the lease row; a takeover waits for it at
            // most this long (the writer's own idle limit ends such a group soon after).
            let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
            transaction
                .batch_execute("SET LOCAL lock_timeout = '2s'")
                .map_err(|error| self.failed(&error))?;
            let granted = grant_lease(&mut transaction, id.as_str(), owner, ttl)
                .map_err(|error| self.failed(&error))?;
            transaction.commit().map_err(|error| self.failed(&error))?;
            match granted {
                Some(token) => Ok(Lease {
                    session: id.clone(),
                    owner: owner.to_owned(),
                    token,
                    ttl,
                }),
                None => {
                    let holder = client
                        .query_opt(
                            "SELECT owner, GREATEST(0, EXTRACT(EPOCH FROM expires_at - now()))::float8
                             FROM leases WHERE session = $1",
                            &[&id.as_str()],
                        )
                        .map_err(|error| self.failed(&error))?;
                    let (holder, left): (String, f64) =
                        holder.map_or_else(|| ("?".to_owned(), 0.0), |row| (row.get(0), row.get(1)));
                    Err(StoreError::Leased {
                        session: id.as_str().to_owned(),
                        owner: holder,
                        seconds_left: left,
                    })
                }
            }
        })
    }

    /// `Err(Leased)` when someone holds a live lease on session `id`.
    pub(super) fn refuse_if_leased(&self, id: &SessionId) -> Result<(), StoreError> {
        self.with_client(|client| {
            let held = client
                .query_opt(
                    "SELECT owner, EXTRACT(EPOCH FROM expires_at - now())::float8
                     FROM leases WHERE session = $1 AND expires_at > now()",
                    &[&id.as_str()],
                )
                .map_err(|error| self.failed(&error))?;
            match held {
                None => Ok(()),
                Some(row) => Err(StoreError::Leased {
                    session: id.as_str().to_owned(),
                    owner: row.get(0),
                    seconds_left: row.get(1),
                }),
            }
        })
    }

    /// Extends `lease` by its ttl; `Err` when it is no longer the session's (taken over).
    pub fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        off_runtime(|| self.renew_here(lease))
    }

    pub(super) fn renew_here(&self, lease: &Lease) -> Result<(), StoreError> {
        self.with_client(|client| {
            let millis = i64::try_from(lease.ttl.as_millis()).unwrap_or(i64::MAX);
            // A renewal that cannot finish within a third of the lease is of no use: it is
            // given up, and tried again, well before the lease runs out.
            let mut transaction = client.transaction().map_err(|error| self.failed(&error))?;
            transaction
                .batch_execute(&format!(
                    "SET LOCAL statement_timeout = {}",
                    (millis / 3).max(1)
                ))
                .map_err(|error| self.failed(&error))?;
            let renewed = transaction
                .execute(
                    "UPDATE leases SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
                     WHERE session = $1 AND token = $2",
                    &[&lease.session.as_str(), &lease.token, &millis],
                )
                .map_err(|error| self.failed(&error))?;
            if renewed == 1 {
                transaction.commit().map_err(|error| self.failed(&error))
            } else {
                Err(self.fenced(lease))
            }
        })
    }

    /// Gives the lease up (its session may be taken at once).
    pub fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        off_runtime(|| self.release_here(lease))
    }

    pub(super) fn release_here(&self, lease: &Lease) -> Result<(), StoreError> {
        self.with_client(|client| {
            expire_lease(client, lease)
                .map_err(|error| self.failed(&error))
                .map(drop)
        })
    }

    pub(super) fn fenced(&self, lease: &Lease) -> StoreError {
        StoreError::Fenced {
            session: lease.session.as_str().to_owned(),
            token: lease.token,
        }
    }

    /// Creates session `start` under `lease` (which must be for it).
    pub fn create_leased(
        &self,
        start: SessionStart,
        lease: &Lease,
    ) -> Result<PostgresLog, StoreError> {
        self.create_with(start, Some(lease.token))
    }

    /// Opens session `id` under `lease`: every append checks the lease is still held.
    pub fn open_leased(&self, lease: &Lease) -> Result<Opened<PostgresLog>, StoreError> {
        self.open_with(&lease.session, Some(lease.token))
    }
}

/// Grants the lease of `session` to `owner` for `ttl` when nobody holds it, its holder's
/// lease ran out, or `owner` holds it already; the token grows with every grant. `None`
/// while another holder's lease runs.
pub(super) fn grant_lease(
    client: &mut impl postgres::GenericClient,
    session: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Option<i64>, postgres::Error> {
    let millis = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    Ok(client
        .query_opt(
            "INSERT INTO leases (session, owner, token, expires_at)
             VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 millisecond')
             ON CONFLICT (session) DO UPDATE
             SET owner = EXCLUDED.owner, token = leases.token + 1,
                 expires_at = EXCLUDED.expires_at
             WHERE leases.expires_at < clock_timestamp() OR leases.owner = EXCLUDED.owner
             RETURNING token",
            &[&session, &owner, &millis],
        )?
        .map(|row| row.get(0)))
}

/// How a transaction holds the lease row it reads.
#[derive(Clone, Copy)]
pub(super) enum RowLock {
    /// Against a takeover until the transaction ends (a group being written).
    Share,
    /// To change it (finishing).
    Update,
    /// Only to read it (naming the holder of a lease that refused a group).
    None,
}

/// The token of `session`'s lease, its row locked as `lock` says for the rest of the
/// transaction.
pub(super) fn lease_token(
    client: &mut impl postgres::GenericClient,
    session: &str,
    lock: RowLock,
) -> Result<Option<i64>, postgres::Error> {
    let query = match lock {
        RowLock::Share => "SELECT token FROM leases WHERE session = $1 FOR SHARE",
        RowLock::Update => "SELECT token FROM leases WHERE session = $1 FOR UPDATE",
        RowLock::None => "SELECT token FROM leases WHERE session = $1",
    };
    Ok(client.query_opt(query, &[&session])?.map(|row| row.get(0)))
}

/// Ends `lease` at once, if its token still holds the session.
pub(super) fn expire_lease(
    client: &mut impl postgres::GenericClient,
    lease: &Lease,
) -> Result<u64, postgres::Error> {
    client.execute(
        "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second'
         WHERE session = $1 AND token = $2",
        &[&lease.session.as_str(), &lease.token],
    )
}
