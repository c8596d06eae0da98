//! berth's durable state: tenants, API keys (hashed), boxes, their messages and
//! their event logs, and secrets (sealed by the daemon; the store never sees a plaintext),
//! in SQLite (one file, the embedded default) or PostgreSQL (shared by many hosts).
//!
//! Every query is written once against [`db::Conn`] and runs on either database; the
//! numbered migrations exist in both dialects with the same numbers, and one conformance
//! suite runs on both. The API is synchronous: every call is one short statement or one
//! small transaction (under a millisecond plus a commit), so the daemon calls it directly
//! from async code: no lock is held across an `.await`, and a thread pool hop per call
//! (`spawn_blocking`) would cost about as much as the call itself.

// First: its `conformance!` macro is visible to every module declared after it.
#[cfg(test)]
#[macro_use]
mod test_db;

mod api_keys;
mod box_outcomes;
mod box_record;
mod box_rows;
mod box_runs;
mod box_settings;
mod box_state;
mod boxes;
mod db;
mod durable;
mod e2b_sandboxes;
mod error;
mod events;
mod failover;
mod join_tokens;
mod leases;
mod messages;
mod migrations;
mod nodes;
mod ops;
mod placement;
mod port_links;
pub mod push_subscriptions;
mod quota;
mod secrets;
mod sleep;
mod state;
mod tenants;
mod wakeups;
mod warm_pool;
mod web_sessions;
pub mod webhooks;

use std::path::Path;
use std::sync::{Arc, RwLock};

use db::Db;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub use api_keys::{ApiKeyMeta, NewApiKey};
pub use box_outcomes::{BootPhase, LastBoot, PhaseSource, TransitionFailure, BOOT_EVENT};
pub use box_record::{BoxLimits, BoxRecord};
pub use box_settings::BoxChange;
pub use boxes::{Admission, NewBox};
pub use db::{DbError, PostgresOptions, StoreStats};
pub use durable::{DurableCopy, VolumeRestored, VOLUME_RESTORED_EVENT};
pub use e2b_sandboxes::{E2bIdempotency, E2bInsert, E2bSandbox};
pub use error::StoreError;
pub use events::{
    Appended, EventGap, EventListener, EventPage, EventRecord, EventRetention, PageLimit, Pruned,
    STATE_EVENT,
};
pub use failover::LostNode;
pub use join_tokens::JoinTokenInfo;
pub use leases::{Fence, Lease};
pub use messages::{
    InvalidMessageId, MessageId, MessageRecord, MessageState, Posted, MAX_MESSAGE_ID_CHARS,
};
pub use nodes::{NodeRecord, NodeRegistration, NodeRoute, NodeState, NodeUsage, Registered};
pub use ops::{Op, OpBell, OpQueue, OpState, OPS_CHANNEL};
pub use placement::{runtime_label, Placed, Placement, CREATE_OP};
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
    db: Db,
    /// Nodes in this process waiting for ops (rung here on SQLite; by LISTEN on Postgres).
    op_bells: ops::Bells,
    /// Told after each commit that appended events.
    listeners: RwLock<Vec<Arc<dyn EventListener>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path` and applies pending
    /// migrations.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        private_files(path).map_err(|source| StoreError::Permissions {
            path: path.to_owned(),
            source,
        })?;
        let open_err = |source: rusqlite::Error| StoreError::Open {
            location: path.display().to_string(),
            source: source.into(),
        };
        let db = db::Sqlite::open(path, open_err, |conn| {
            migrations::apply_sqlite(conn, u32::MAX).map(drop)
        })?;
        Ok(Store::with(Db::sqlite(db)))
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user@host:port/db`) and
    /// applies pending migrations (one process at a time: the others wait). The password,
    /// when the server asks for one, is `password`, never part of a URL a user typed.
    pub fn connect(
        url: &str,
        password: Option<&str>,
        options: &PostgresOptions,
    ) -> Result<Store, StoreError> {
        let location = db::redacted_url(url);
        let open_err = |source| StoreError::Open {
            location: location.clone(),
            source,
        };
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| open_err(DbError::Postgres(e)))?;
        if let Some(password) = password {
            config.password(password);
        }
        config.application_name("berth");
        let db = db::Postgres::connect(config, options).map_err(open_err)?;
        migrations::apply_postgres(&db, u32::MAX)?;
        Ok(Store::with(Db::postgres(db)))
    }

    fn with(db: Db) -> Store {
        Store {
            db,
            op_bells: ops::Bells::default(),
            listeners: RwLock::new(Vec::new()),
        }
    }

    /// How long the store's calls have taken since it opened (for `/metrics`).
    pub fn stats(&self) -> StoreStats {
        self.db.stats()
    }

    /// Which database this store runs on: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.db.dialect() {
            db::Dialect::Sqlite => "sqlite",
            db::Dialect::Postgres => "postgres",
        }
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
mod cluster_tests;
#[cfg(test)]
mod durable_tests;
#[cfg(test)]
mod e2b_sandboxes_tests;
#[cfg(test)]
mod event_retention_tests;
#[cfg(test)]
mod failover_tests;
#[cfg(test)]
mod ingress_tests;
#[cfg(test)]
mod join_tokens_tests;
#[cfg(test)]
mod key_revocation_tests;
#[cfg(test)]
mod placement_tests;
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
