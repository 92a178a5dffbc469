//! A session's writer connection: one transaction per group, inserted only while its
//! lease holds.

use super::*;

/// One session's writer connection: one transaction per group.
pub(super) struct PostgresSession {
    /// Taken back to the idle connections when the log closes.
    pub(super) client: Option<Client>,
    /// Where the connection goes when the log closes, if no group failed on it.
    pub(super) idle: Arc<Idle>,
    pub(super) healthy: bool,
    pub(super) session: String,
    pub(super) durability: Durability,
    /// The lease token every group checks, for a leased log.
    pub(super) fence: Option<i64>,
}

/// What refuses a group: the database, or a lease that is no longer this log's.
enum GroupError {
    Database(postgres::Error),
    Encoding(String),
    Fenced { holder: i64 },
}

impl PostgresSession {
    /// One group, in as few round trips as it allows: a group with no large value and no
    /// flush to ask for (in strict mode the connection flushes every commit anyway) is one
    /// statement — its own transaction — that checks the lease under a share lock and
    /// inserts every event; otherwise a transaction stores the large values first, and a
    /// non-strict log's sync group asks for the flush.
    fn write_group(&mut self, group: &Group<'_>, sync: bool) -> Result<(), GroupError> {
        let mut seqs: Vec<i64> = Vec::with_capacity(group.lines.len());
        let mut lines: Vec<&str> = Vec::with_capacity(group.lines.len());
        for (seq, line) in group.lines() {
            lines.push(
                std::str::from_utf8(line)
                    .map_err(|error| GroupError::Encoding(error.to_string()))?,
            );
            seqs.push(i64::try_from(seq).map_err(|error| GroupError::Encoding(error.to_string()))?);
        }
        // Strict mode's connection waits for every commit's flush already.
        let flushed = !sync || self.durability == Durability::Strict;
        let simple = flushed && group.blobs.is_empty() && !group.is_empty();
        let Some(client) = self.client.as_mut() else {
            return Err(GroupError::Encoding("the log is closed".to_owned()));
        };
        if simple {
            let inserted = client
                .execute(INSERT_GROUP, &[&self.session, &seqs, &lines, &self.fence])
                .map_err(GroupError::Database)?;
            return check_inserted(client, &self.session, inserted, group.lines.len());
        }
        let mut transaction = client.transaction().map_err(GroupError::Database)?;
        if sync && self.durability != Durability::Strict {
            transaction
                .batch_execute("SET LOCAL synchronous_commit = on")
                .map_err(GroupError::Database)?;
        }
        for (digest, bytes) in group.blobs {
            transaction
                .execute(
                    "INSERT INTO blobs (digest, bytes) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[digest, bytes],
                )
                .map_err(GroupError::Database)?;
        }
        if group.is_empty() {
            // A barrier of a leased log says the lease still holds, as every group does.
            if let Some(token) = self.fence {
                let held = lease_token(&mut transaction, &self.session, RowLock::Share)
                    .map_err(GroupError::Database)?;
                if held != Some(token) {
                    return Err(GroupError::Fenced {
                        holder: held.unwrap_or(0),
                    });
                }
            }
            // A commit that wrote nothing waits for nothing: a mark makes one to flush.
            transaction
                .batch_execute("INSERT INTO sync_marks (n) VALUES (1); DELETE FROM sync_marks")
                .map_err(GroupError::Database)?;
        } else {
            let inserted = transaction
                .execute(INSERT_GROUP, &[&self.session, &seqs, &lines, &self.fence])
                .map_err(GroupError::Database)?;
            // Dropping the transaction rolls the large values back with the refused group.
            check_inserted(&mut transaction, &self.session, inserted, group.lines.len())?;
        }
        transaction.commit().map_err(GroupError::Database)
    }
}

/// A leased group inserts nothing once the lease is another's: then say whose it is.
fn check_inserted(
    client: &mut impl postgres::GenericClient,
    session: &str,
    inserted: u64,
    expected: usize,
) -> Result<(), GroupError> {
    if inserted == expected as u64 {
        return Ok(());
    }
    let holder = lease_token(client, session, RowLock::None).map_err(GroupError::Database)?;
    Err(GroupError::Fenced {
        holder: holder.unwrap_or(0),
    })
}

/// Inserts a group's events (`$2` seqs, `$3` lines) for session `$1`; with a lease token
/// `$4`, only while the session's lease still carries it — checked under a share lock on
/// the lease row, which a takeover must wait for, so no group lands after a takeover.
const INSERT_GROUP: &str = "
    INSERT INTO events (session, seq, line, lease_token)
    SELECT $1, g.seq, g.line, $4 FROM unnest($2::bigint[], $3::text[]) AS g(seq, line)
    WHERE $4::bigint IS NULL
       OR EXISTS (SELECT 1 FROM leases WHERE session = $1 AND token = $4 FOR SHARE)";

impl Medium for PostgresSession {
    fn commit(&mut self, group: &Group<'_>, sync: bool) -> Result<(), SinkError> {
        self.write_group(group, sync).map_err(|error| {
            self.healthy = false;
            match error {
                GroupError::Database(error) => SinkError::Refused(format!(
                    "writing session `{}` to PostgreSQL failed: {error}",
                    self.session
                )),
                GroupError::Encoding(why) => SinkError::Refused(format!(
                    "writing session `{}` to PostgreSQL failed: {why}",
                    self.session
                )),
                // Typed, so whoever drives the session can tell a takeover from a failure.
                GroupError::Fenced { holder } => SinkError::TakenOver {
                    session: self.session.clone(),
                    holder,
                    held: self.fence.unwrap_or_default(),
                },
            }
        })
    }

    fn close(&mut self) {
        let Some(mut client) = self.client.take() else {
            return;
        };
        // The settings this log made are undone before another call gets the connection.
        if self.healthy && !client.is_closed() && client.batch_execute("RESET ALL").is_ok() {
            self.idle.put(client);
        }
    }
}
