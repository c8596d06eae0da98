//! berth's durable state in SQLite: tenants, API keys (hashed), boxes, their messages and
//! their event logs, and secrets (sealed by the daemon; the store never sees a plaintext).
//!
//! Every commit is fsync'd (`synchronous=FULL`, WAL). The API is synchronous: writes go
//! through one connection behind a `std::sync::Mutex` (`conn()`), reads through a small
//! pool of read-only connections (`read()`) that WAL lets run beside a write, so a read
//! never waits for another box's commit and its fsync. Every call is one short statement
//! or one small transaction (well under a millisecond plus one fsync), so the daemon calls
//! it directly from async code: no lock is held across an `.await`, and a thread pool hop
//! per call (`spawn_blocking`) would cost about as much as the call itself.

mod api_keys;
mod box_outcomes;
mod box_record;
mod box_rows;
mod box_settings;
mod box_state;
mod boxes;
mod e2b_sandboxes;
mod error;
mod events;
mod messages;
mod migrations;
mod port_links;
pub mod push_subscriptions;
mod quota;
mod read_pool;
mod secrets;
mod sleep;
mod state;
mod tenants;
mod wakeups;
mod warm_pool;
mod web_sessions;
pub mod webhooks;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use read_pool::{ReadConn, ReadPool};
use rusqlite::Connection;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub use api_keys::{ApiKeyMeta, NewApiKey};
pub use box_outcomes::{BootPhase, LastBoot, PhaseSource, TransitionFailure, BOOT_EVENT};
pub use box_record::{BoxLimits, BoxRecord};
pub use box_settings::BoxChange;
pub use boxes::{Admission, NewBox};
pub use e2b_sandboxes::{E2bIdempotency, E2bInsert, E2bSandbox};
pub use error::StoreError;
pub use events::{
    Appended, EventGap, EventListener, EventPage, EventRecord, EventRetention, PageLimit, Pruned,
    STATE_EVENT,
};
pub use messages::{
    InvalidMessageId, MessageId, MessageRecord, MessageState, Posted, MAX_MESSAGE_ID_CHARS,
};
pub use port_links::{NewLinkSession, NewPortLink, PortLink};
pub use quota::{Quota, QuotaChange, QuotaExceeded, QuotaLimit, TemplateDisk, Usage};
pub use secrets::{PutSecret, SealedSecret, SecretMeta};
pub use sleep::{SleepOrderError, SleepSettings};
pub use state::{check_transition, BoxState, InvalidTransition, UnknownState};
pub use tenants::{Principal, Tenant, TenantInfo, DEFAULT_TENANT};
pub use wakeups::{
    AddedWakeup, NewWakeup, SlotFinished, SlotOutcome, SlotReached, Wakeup, WakeupKind,
    WakeupLimits, WakeupOrigin,
};
pub use warm_pool::{warm_pool_tenant, Claim, WARM_POOL_TENANT};
pub use web_sessions::{
    NewPairing, NewWebSession, SessionOrigin, WebSession, MAX_WEB_SESSIONS_PER_TENANT,
};

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "berth.db";

pub struct Store {
    /// The one write connection.
    conn: Mutex<Connection>,
    /// Read-only connections for reads that need not see the caller's own uncommitted
    /// writes (all reads outside a write transaction).
    readers: ReadPool,
    /// Told after each commit that appended events.
    listeners: RwLock<Vec<Arc<dyn EventListener>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        private_files(path).map_err(|source| StoreError::Permissions {
            path: path.to_owned(),
            source,
        })?;
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(open_err)?;
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        migrations::apply(&mut conn)?;
        let readers = ReadPool::open(path)?;
        Ok(Store {
            conn: Mutex::new(conn),
            readers,
            listeners: RwLock::new(Vec::new()),
        })
    }

    /// A read-only connection from the pool: for every read outside a write transaction.
    fn read(&self) -> ReadConn<'_> {
        self.readers.get()
    }

    /// The write connection: for writes, and reads inside a write transaction.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-applied transaction behind
        // (rusqlite rolls back on drop), so a poisoned lock is still usable.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Creates the database file `0600` if missing and narrows it and its `-wal` and `-shm`
/// to `0600` if they exist (SQLite creates the WAL and shared-memory files with the
/// database file's mode): API key hashes, sealed secrets and boot tokens live there.
fn private_files(db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(db)?;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

fn now() -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now)
}

fn format_time(t: OffsetDateTime) -> Result<String, StoreError> {
    t.format(&Rfc3339).map_err(StoreError::Format)
}

fn parse_time(column: &'static str, s: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|source| StoreError::CorruptTime { column, source })
}

fn random<const N: usize>() -> Result<[u8; N], StoreError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(StoreError::Random)?;
    Ok(bytes)
}

use berth_basics::hex;

#[cfg(test)]
mod box_outcomes_tests;
#[cfg(test)]
mod box_settings_tests;
#[cfg(test)]
mod e2b_sandboxes_tests;
#[cfg(test)]
mod event_retention_tests;
#[cfg(test)]
mod ingress_tests;
#[cfg(test)]
mod key_revocation_tests;
#[cfg(test)]
mod port_links_tests;
#[cfg(test)]
mod push_subscriptions_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod read_latency_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wakeups_tests;
#[cfg(test)]
mod warm_pool_tests;
#[cfg(test)]
mod web_sessions_tests;
#[cfg(test)]
mod webhooks_tests;
