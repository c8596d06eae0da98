//! Errors of the store.

use std::path::PathBuf;

use berth_protocol::BoxId;

use crate::state::{InvalidTransition, UnknownState};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the database at {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("cannot make the database files at {} private (0600)", path.display())]
    Permissions {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("database migration {version} failed")]
    Migration {
        version: u32,
        #[source]
        source: rusqlite::Error,
    },

    /// A query failed; `action` says what the store was doing.
    #[error("database error while trying to {action}")]
    Sqlite {
        action: &'static str,
        #[source]
        source: rusqlite::Error,
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

    /// Revoking it would leave the daemon with no admin key.
    #[error("API key {key_id} is the last admin key; add another admin key first")]
    LastAdminKey { key_id: String },
}

impl StoreError {
    /// Whether the write failed for want of disk space (SQLite's `SQLITE_FULL`): the
    /// transaction was rolled back whole, and the same call works once space is freed.
    pub fn is_disk_full(&self) -> bool {
        let source = match self {
            StoreError::Sqlite { source, .. }
            | StoreError::Open { source, .. }
            | StoreError::Migration { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DiskFull)
        )
    }
}

/// Shorthand for mapping a rusqlite error with what the store was doing.
pub(crate) fn sql(action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Sqlite { action, source }
}
