//! Numbered schema migrations, embedded in the binary and applied in order, each inside a
//! transaction, recorded in `schema_migrations`. Each exists twice, once per database
//! (`migrations/NNNN_*.sql` for SQLite, `migrations/postgres/NNNN_*.sql`), with the same
//! number and the same resulting schema, so a version means the same thing on both.

use rusqlite::{params, Connection};

use crate::db::{DbError, Postgres};
use crate::error::{sql, StoreError};

/// `(version, sql)`, in order. Never edit a shipped migration: add the next number.
const SQLITE: &[(u32, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_messages_events.sql")),
    (3, include_str!("../migrations/0003_secrets.sql")),
    (4, include_str!("../migrations/0004_box_egress.sql")),
    (5, include_str!("../migrations/0005_box_runtime.sql")),
    (
        6,
        include_str!("../migrations/0006_tenant_quotas_and_keys.sql"),
    ),
    (7, include_str!("../migrations/0007_event_retention.sql")),
    (8, include_str!("../migrations/0008_box_record.sql")),
    (9, include_str!("../migrations/0009_port_links.sql")),
    (10, include_str!("../migrations/0010_web_sessions.sql")),
    (
        11,
        include_str!("../migrations/0011_push_subscriptions.sql"),
    ),
    (12, include_str!("../migrations/0012_wakeups.sql")),
    (13, include_str!("../migrations/0013_warm_pool.sql")),
    (14, include_str!("../migrations/0014_sleep_ladder.sql")),
    (
        15,
        include_str!("../migrations/0015_web_session_origin.sql"),
    ),
    (16, include_str!("../migrations/0016_wakeup_box_slots.sql")),
    (17, include_str!("../migrations/0017_box_transitions.sql")),
    (18, include_str!("../migrations/0018_e2b_sandboxes.sql")),
    (19, include_str!("../migrations/0019_webhooks.sql")),
    (
        20,
        include_str!("../migrations/0020_message_events_after.sql"),
    ),
    (21, include_str!("../migrations/0021_cluster.sql")),
    (22, include_str!("../migrations/0022_join_tokens.sql")),
    (23, include_str!("../migrations/0023_node_usage.sql")),
    (24, include_str!("../migrations/0024_durable_copies.sql")),
];

/// The same migrations in PostgreSQL's dialect: the same numbers, the same schema.
const POSTGRES: &[(u32, &str)] = &[
    (1, include_str!("../migrations/postgres/0001_init.sql")),
    (
        2,
        include_str!("../migrations/postgres/0002_messages_events.sql"),
    ),
    (3, include_str!("../migrations/postgres/0003_secrets.sql")),
    (
        4,
        include_str!("../migrations/postgres/0004_box_egress.sql"),
    ),
    (
        5,
        include_str!("../migrations/postgres/0005_box_runtime.sql"),
    ),
    (
        6,
        include_str!("../migrations/postgres/0006_tenant_quotas_and_keys.sql"),
    ),
    (
        7,
        include_str!("../migrations/postgres/0007_event_retention.sql"),
    ),
    (
        8,
        include_str!("../migrations/postgres/0008_box_record.sql"),
    ),
    (
        9,
        include_str!("../migrations/postgres/0009_port_links.sql"),
    ),
    (
        10,
        include_str!("../migrations/postgres/0010_web_sessions.sql"),
    ),
    (
        11,
        include_str!("../migrations/postgres/0011_push_subscriptions.sql"),
    ),
    (12, include_str!("../migrations/postgres/0012_wakeups.sql")),
    (
        13,
        include_str!("../migrations/postgres/0013_warm_pool.sql"),
    ),
    (
        14,
        include_str!("../migrations/postgres/0014_sleep_ladder.sql"),
    ),
    (
        15,
        include_str!("../migrations/postgres/0015_web_session_origin.sql"),
    ),
    (
        16,
        include_str!("../migrations/postgres/0016_wakeup_box_slots.sql"),
    ),
    (
        17,
        include_str!("../migrations/postgres/0017_box_transitions.sql"),
    ),
    (
        18,
        include_str!("../migrations/postgres/0018_e2b_sandboxes.sql"),
    ),
    (19, include_str!("../migrations/postgres/0019_webhooks.sql")),
    (
        20,
        include_str!("../migrations/postgres/0020_message_events_after.sql"),
    ),
    (21, include_str!("../migrations/postgres/0021_cluster.sql")),
    (
        22,
        include_str!("../migrations/postgres/0022_join_tokens.sql"),
    ),
    (
        23,
        include_str!("../migrations/postgres/0023_node_usage.sql"),
    ),
    (
        24,
        include_str!("../migrations/postgres/0024_durable_copies.sql"),
    ),
];

/// Migrations that rebuild a table other tables reference: they run with foreign keys off
/// (SQLite ignores the pragma inside a transaction, and with keys on, dropping the old
/// table would cascade into every row that names it), then the keys are checked.
const REBUILDS: &[u32] = &[14];

fn apply_one(
    conn: &mut Connection,
    version: u32,
    script: &str,
    rebuild: bool,
) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction()?;
    tx.execute_batch(script)?;
    if rebuild {
        // Inside the transaction: a dangling reference rolls the whole rebuild back.
        let dangling: i64 =
            tx.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |row| {
                row.get(0)
            })?;
        if dangling > 0 {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY),
                Some(format!("{dangling} rows name a row that is gone")),
            ));
        }
    }
    tx.execute(
        "INSERT INTO schema_migrations (version) VALUES (?1)",
        params![version],
    )?;
    tx.commit()
}

/// Applies every SQLite migration newer than the database's, up to `last` (a test's
/// database as an older berth left it); returns the version reached.
pub(crate) fn apply_sqlite(conn: &mut Connection, last: u32) -> Result<u32, StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version     INTEGER PRIMARY KEY,
             applied_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
         );",
    )
    .map_err(|e| sql("create schema_migrations")(e.into()))?;
    let current: u32 = conn
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |row| row.get(0),
        )
        .map_err(|e| sql("read the schema version")(e.into()))?;
    too_new(current, SQLITE)?;
    let mut reached = current;
    for &(version, script) in SQLITE.iter().filter(|(v, _)| *v > current && *v <= last) {
        let failed = |source: rusqlite::Error| StoreError::Migration {
            version,
            source: source.into(),
        };
        let rebuild = REBUILDS.contains(&version);
        if rebuild {
            conn.pragma_update(None, "foreign_keys", "OFF")
                .map_err(failed)?;
        }
        let applied = apply_one(conn, version, script, rebuild);
        if rebuild {
            conn.pragma_update(None, "foreign_keys", "ON")
                .map_err(failed)?;
        }
        applied.map_err(failed)?;
        reached = version;
    }
    Ok(reached)
}

/// A database a newer berth migrated is refused rather than half understood.
fn too_new(current: u32, known: &[(u32, &str)]) -> Result<(), StoreError> {
    let latest = known.last().map_or(0, |(v, _)| *v);
    if current > latest {
        return Err(StoreError::SchemaTooNew {
            found: current,
            known: latest,
        });
    }
    Ok(())
}

/// An arbitrary constant: the advisory lock that lets one process at a time migrate.
const MIGRATION_LOCK: i64 = 0x6265_7274_685f_6d69;

/// Applies every PostgreSQL migration newer than the database's, up to `last`. Processes
/// starting together (API replicas, nodes) take turns under an advisory lock, so each
/// migration runs once.
pub(crate) fn apply_postgres(db: &Postgres, last: u32) -> Result<u32, StoreError> {
    db.with_client(|session| {
        session
            .conn()
            .execute("SELECT pg_advisory_lock(?1)", crate::args![MIGRATION_LOCK])?;
        let applied = apply_postgres_locked(session, last);
        session.conn().execute(
            "SELECT pg_advisory_unlock(?1)",
            crate::args![MIGRATION_LOCK],
        )?;
        Ok(applied)
    })
    .map_err(sql("take the migration lock"))?
}

fn apply_postgres_locked(
    session: &mut crate::db::PgSession<'_>,
    last: u32,
) -> Result<u32, StoreError> {
    session
        .conn()
        .execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version     BIGINT PRIMARY KEY,
                 applied_at  TEXT NOT NULL
                     DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
             );",
        )
        .map_err(sql("create schema_migrations"))?;
    let current: u32 = session
        .conn()
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            crate::args![],
            |row| row.get(0),
        )
        .map_err(sql("read the schema version"))?;
    too_new(current, POSTGRES)?;
    let mut reached = current;
    for &(version, script) in POSTGRES.iter().filter(|(v, _)| *v > current && *v <= last) {
        session
            .transaction(|tx| {
                tx.execute_batch(script)?;
                tx.execute(
                    "INSERT INTO schema_migrations (version) VALUES (?1)",
                    crate::args![version],
                )?;
                Ok(())
            })
            .map_err(|source: DbError| StoreError::Migration { version, source })?;
        reached = version;
    }
    Ok(reached)
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_dialects_have_the_same_migrations_in_order() {
        for (i, (version, _)) in super::SQLITE.iter().enumerate() {
            assert_eq!(*version as usize, i + 1);
        }
        let numbers = |list: &[(u32, &str)]| list.iter().map(|(v, _)| *v).collect::<Vec<_>>();
        assert_eq!(numbers(super::SQLITE), numbers(super::POSTGRES));
    }
}
