//! Errors of the store.

use berth_protocol::BoxId;

use crate::db::{DbError, Retry};
use crate::state::{InvalidTransition, UnknownState};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the database at {location}")]
    Open {
        /// The SQLite file, or the Postgres URL (which never holds the password).
        location: String,
        #[source]
        source: DbError,
    },

    #[error("cannot make the database files at {} private (0600)", path.display())]
    Permissions {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("database migration {version} failed")]
    Migration {
        version: u32,
        #[source]
        source: DbError,
    },

    /// The database's schema is newer than this berth knows (a newer berth migrated it).
    #[error("the database is at schema version {found}, newer than this berth's {known}; run the newer berth")]
    SchemaTooNew { found: u32, known: u32 },

    /// A query failed; `action` says what the store was doing.
    #[error("database error while trying to {action}")]
    Database {
        action: &'static str,
        #[source]
        source: DbError,
    },

    /// The tenant already has a box of this name.
    #[error("a box named {name:?} already exists")]
    NameTaken { name: String },

    /// A message id (idempotency key) already names a message with other content.
    #[error("message id {id} was already used for a message with different content")]
    IdempotencyConflict { id: crate::MessageId },

    #[error("corrupt message state {value:?}")]
    CorruptMessageState { value: String },

    #[error("corrupt value {value:?} in {column}")]
    CorruptValue { column: &'static str, value: String },

    /// `opened_with` unknown, or `api_key` without the key's id.
    #[error("web session {id} has a corrupt origin {value:?} in web_sessions.opened_with")]
    CorruptSessionOrigin { id: String, value: String },

    #[error("corrupt JSON in {column}")]
    CorruptJson {
        column: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("box {id} does not exist")]
    BoxNotFound { id: BoxId },

    /// An expunge of a node whose lease still runs.
    #[error("node {name} is alive (its lease runs {lease_left_ms} ms more): drain it instead (berth node drain {name}); expunge is for a node that is gone")]
    NodeAlive { name: String, lease_left_ms: i64 },

    /// A start of a box that has a run open on another node.
    #[error("box {id} is running on node {node}: a box never runs in two places; stop it there first (or wait for its node's failover)")]
    RunsElsewhere { id: BoxId, node: String },

    /// Someone else changed the box since the caller read it.
    #[error("box {id} changed concurrently (expected generation {expected}, found {actual})")]
    StaleGeneration {
        id: BoxId,
        expected: u64,
        actual: u64,
    },

    /// The call needs a stopped (or failed) box.
    #[error("box {id} is {state}; stop it first")]
    NotStopped { id: BoxId, state: crate::BoxState },

    #[error("box {id}: illegal state change")]
    Transition {
        id: BoxId,
        #[source]
        source: InvalidTransition,
    },

    /// A stored value does not parse (a bug, or a database edited by hand).
    #[error("corrupt value in {column}")]
    CorruptState {
        column: &'static str,
        #[source]
        source: UnknownState,
    },

    #[error("corrupt id in {column}")]
    CorruptId {
        column: &'static str,
        #[source]
        source: berth_protocol::IdError,
    },

    #[error("corrupt timestamp in {column}")]
    CorruptTime {
        column: &'static str,
        #[source]
        source: time::error::Parse,
    },

    #[error("cannot format a timestamp")]
    Format(#[source] time::error::Format),

    #[error("the OS random source failed")]
    Random(#[source] getrandom::Error),

    /// The call would take the tenant past a limit of its quota.
    #[error(transparent)]
    QuotaExceeded(#[from] crate::QuotaExceeded),

    /// Every id slot (uid range) below the limit is held by a box.
    #[error(
        "every one of the {limit} id slots (host uid ranges) is held by a box; delete a box first"
    )]
    NoIdSlot { limit: u32 },

    #[error("no tenant {reference:?}")]
    TenantNotFound { reference: String },

    #[error("tenant {tenant} has no API key {key_id}")]
    KeyNotFound {
        tenant: berth_protocol::TenantId,
        key_id: String,
    },

    #[error("box {box_id} already has {max} live share links; revoke one first")]
    TooManyPortLinks {
        box_id: berth_protocol::BoxId,
        max: usize,
    },

    #[error("box {box_id} has no share link {link_id}")]
    PortLinkNotFound {
        box_id: berth_protocol::BoxId,
        link_id: String,
    },

    /// The lease's term moved on: another holder took it, so this one may not write.
    #[error("the lease {name:?} is no longer held at term {term}")]
    LeaseLost { name: String, term: u64 },

    #[error("no node {reference:?}")]
    NodeNotFound { reference: String },

    /// The node's row names another boot of it: a process that outlived its own restart.
    #[error("node {node} is registered with boot {registered}, not {presented}")]
    NodeBootMismatch {
        node: String,
        registered: String,
        presented: String,
    },

    /// Work for a node whose lease ran out would never be done.
    #[error("node {node} has not renewed its lease for {lapsed_ms} ms: it is gone")]
    NodeGone { node: String, lapsed_ms: i64 },

    /// No live, active node offers the runtime with the labels asked for.
    #[error("no node can take the box: none is live, active, offers runtime {runtime} and carries the labels {labels:?}")]
    NoNode {
        runtime: String,
        labels: std::collections::BTreeMap<String, String>,
    },

    /// The box has an op queued or under way; one at a time.
    #[error("box {box_id} already has an operation in progress")]
    OpInProgress { box_id: BoxId },

    #[error("no operation {id}")]
    OpNotFound { id: u64 },

    /// Revoking it would leave the daemon with no admin key.
    #[error("API key {key_id} is the last admin key; add another admin key first")]
    LastAdminKey { key_id: String },

    /// A join token that does not admit a node. The reason never says which half of a
    /// token was wrong: that would tell a guesser when it had found an id.
    #[error("the join token was refused ({reason}); make a new one with `berth cluster token`")]
    JoinTokenRefused { reason: &'static str },
}

impl StoreError {
    /// Whether the write failed for want of disk space (SQLite's `SQLITE_FULL`): the
    /// transaction was rolled back whole, and the same call works once space is freed.
    pub fn is_disk_full(&self) -> bool {
        self.db_error().is_some_and(DbError::is_disk_full)
    }

    fn db_error(&self) -> Option<&DbError> {
        match self {
            StoreError::Database { source, .. }
            | StoreError::Open { source, .. }
            | StoreError::Migration { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A database error outside any named step (a commit).
impl From<DbError> for StoreError {
    fn from(source: DbError) -> StoreError {
        StoreError::Database {
            action: "commit a transaction",
            source,
        }
    }
}

impl Retry for StoreError {
    fn is_conflict(&self) -> bool {
        self.db_error().is_some_and(DbError::is_conflict)
    }
}

/// Shorthand for mapping a database error with what the store was doing.
pub(crate) fn sql(action: &'static str) -> impl FnOnce(DbError) -> StoreError {
    move |source| StoreError::Database { action, source }
}
