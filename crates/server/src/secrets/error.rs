//! Errors of the secret store. None of them carries a secret's value.

use std::path::PathBuf;

use berth_protocol::TenantId;
use berth_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("invalid secret name {name:?}: {rule}")]
    InvalidName { name: String, rule: &'static str },

    /// The value breaks a rule; the value itself is never part of the error.
    #[error("invalid secret value: {rule}")]
    InvalidValue { rule: &'static str },

    #[error("no secret named {name:?}")]
    NotFound { name: String },

    #[error("cannot {action} the secret store key file {}", path.display())]
    KeyFile {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the secret store key file {} is not a regular file", path.display())]
    KeyNotRegular { path: PathBuf },

    #[error("the secret store key file {} is readable or writable by group or others (mode {mode:04o}): run `chmod 600 {}`", path.display(), path.display())]
    KeyMode { path: PathBuf, mode: u32 },

    #[error("the secret store key file {} holds {len} bytes, not 32: it is not a berth key (restore the right file)", path.display())]
    KeyLength { path: PathBuf, len: u64 },

    /// Rows exist that another key sealed (or the key file is gone): starting would make
    /// every secret unreadable, so the daemon refuses.
    #[error("secrets in {} were encrypted with another key (key id {stored}, this key is {current}): restore the key file {} (or point `[secrets] key_file` in berth.toml at it); if that key is lost, so are the secrets: delete them (`sqlite3 {} 'DELETE FROM secrets'`) and set them again", db.display(), key.display(), db.display())]
    KeyMismatch {
        db: PathBuf,
        key: PathBuf,
        stored: String,
        current: String,
    },

    #[error("secrets in {} were encrypted with key id {stored}, but the key file {} is missing: restore it (or point `[secrets] key_file` in berth.toml at it); if that key is lost, so are the secrets: delete them (`sqlite3 {} 'DELETE FROM secrets'`) and set them again", db.display(), key.display(), db.display())]
    KeyMissing {
        db: PathBuf,
        key: PathBuf,
        stored: String,
    },

    /// The row does not open with this key and its own tenant and name: it was altered,
    /// or copied from another row.
    #[error("secret {name:?} of tenant {tenant} does not decrypt: its row was altered or moved")]
    Tampered { tenant: TenantId, name: String },

    #[error("secret {name:?} of tenant {tenant} was sealed with key id {stored}, not this key ({current})")]
    ForeignKey {
        tenant: TenantId,
        name: String,
        stored: String,
        current: String,
    },

    #[error("the cipher failed to {action}")]
    Crypto { action: &'static str },

    #[error("the OS random source failed")]
    Random(#[source] getrandom::Error),

    #[error("the store failed")]
    Store(#[from] StoreError),
}
