//! Numbered schema migrations, embedded in the binary and applied in order, each inside a
//! transaction, recorded in `schema_migrations`.

use rusqlite::{params, Connection};

use crate::error::{sql, StoreError};

/// `(version, sql)`, in order. Never edit a shipped migration: add the next number.
const MIGRATIONS: &[(u32, &str)] = &[
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

/// Applies every migration newer than the database's; returns the version reached.
pub(crate) fn apply(conn: &mut Connection) -> Result<u32, StoreError> {
    apply_until(conn, u32::MAX)
}

/// [`apply`], stopping after version `last`: a test's database as an older berth left it.
pub(crate) fn apply_until(conn: &mut Connection, last: u32) -> Result<u32, StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version     INTEGER PRIMARY KEY,
             applied_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
         );",
    )
    .map_err(sql("create schema_migrations"))?;
    let current: u32 = conn
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |row| row.get(0),
        )
        .map_err(sql("read the schema version"))?;
    let mut reached = current;
    for &(version, script) in MIGRATIONS
        .iter()
        .filter(|(v, _)| *v > current && *v <= last)
    {
        let failed = |source| StoreError::Migration { version, source };
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

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_numbered_in_order() {
        for (i, (version, _)) in super::MIGRATIONS.iter().enumerate() {
            assert_eq!(*version as usize, i + 1);
        }
    }
}
