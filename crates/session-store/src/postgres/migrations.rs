//! The schema: each migration once, in order, under an advisory lock so workers that connect
//! together migrate one at a time.

use super::*;

/// Each migration once, in order; the `toolrail_schema` table remembers how far a database
/// is. Appending a step is how the schema changes.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE events (
        session TEXT NOT NULL,
        seq BIGINT NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    );
    CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        bytes BYTEA NOT NULL
    );
    CREATE TABLE leases (
        session TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        token BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE sync_marks (n INTEGER);
",
    "
    CREATE TABLE work_queue (
        session TEXT PRIMARY KEY,
        payload TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'waiting',
        worker TEXT,
        claims INTEGER NOT NULL DEFAULT 0,
        updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX work_queue_waiting ON work_queue (updated_at) WHERE state = 'waiting';
",
    // Which lease wrote each event: the audit that shows no worker wrote after a takeover.
    "
    ALTER TABLE events ADD COLUMN lease_token BIGINT;
",
    // Why a session failed, or why its last worker gave it back unfinished: what
    // `toolrail sessions` shows beside the queue's state.
    "
    ALTER TABLE work_queue ADD COLUMN reason TEXT;
",
];

/// A key for `pg_advisory_lock`, so two workers connecting at once migrate one at a time.
const MIGRATION_LOCK: i64 = 0x746f_6f6c_7261_696c;

impl PostgresStore {
    pub(super) fn migrate(&self, client: &mut Client) -> Result<(), StoreError> {
        let fail = |error: postgres::Error| self.failed(&error);
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
            .map_err(fail)?;
        let migrated = (|| {
            client.batch_execute(
                "CREATE TABLE IF NOT EXISTS toolrail_schema (version INTEGER NOT NULL)",
            )?;
            let version: i32 = client
                .query_opt("SELECT version FROM toolrail_schema", &[])?
                .map_or(0, |row| row.get(0));
            if usize::try_from(version).unwrap_or(usize::MAX) > MIGRATIONS.len() {
                return Ok(Some(version));
            }
            for (number, step) in MIGRATIONS.iter().enumerate() {
                let target = i32::try_from(number + 1).unwrap_or(i32::MAX);
                if target <= version {
                    continue;
                }
                let mut transaction = client.transaction()?;
                transaction.batch_execute(step)?;
                transaction.execute("DELETE FROM toolrail_schema", &[])?;
                transaction.execute(
                    "INSERT INTO toolrail_schema (version) VALUES ($1)",
                    &[&target],
                )?;
                transaction.commit()?;
            }
            Ok::<_, postgres::Error>(None)
        })();
        let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
        if let Some(newer) = migrated.map_err(fail)? {
            return Err(StoreError::Database {
                path: PathBuf::from(&self.shown),
                message: format!(
                    "the database's schema is version {newer}, written by a newer toolrail (this one knows {}); upgrade toolrail",
                    MIGRATIONS.len()
                ),
            });
        }
        unlocked.map_err(fail).map(drop)
    }
}
