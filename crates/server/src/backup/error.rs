//! Why a backup could not be written, or an archive not restored.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The archive is not a whole, unchanged berth backup; nothing was created.
    #[error("the backup is refused: {0}; nothing was created")]
    Invalid(String),

    /// The archive holds more than this host takes; nothing was created.
    #[error("the backup is refused: {what} is {size} bytes, more than the {max} this host takes; nothing was created")]
    TooLarge {
        what: &'static str,
        size: u64,
        max: u64,
    },

    /// The box runs on a runtime that can neither freeze its volume nor pause it.
    #[error("box {name} cannot be held still for its backup on its runtime; stop it (berth box stop {name}) and back it up then")]
    CannotHoldStill { name: String },

    /// What the restore's create would refuse at its end (a name taken, the tenant's quota),
    /// refused before the bulk of the archive is read: the store's own refusal.
    #[error(transparent)]
    Refused(Box<berth_store::StoreError>),

    /// An API replica keeps no volumes.
    #[error("a cluster cannot restore a backup yet (an API replica keeps no volumes, and a node takes boxes only from a replica): restore it on a single-host berth")]
    OnReplica,

    #[error(transparent)]
    DiskLow(crate::disk_space::DiskLow),

    /// The client went away while the archive streamed.
    #[error("the client stopped reading the backup")]
    ClientGone,

    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    History(#[from] berth_chunks::ChunkError),

    #[error("the backup's worker thread failed")]
    Worker(#[source] tokio::task::JoinError),
}

impl BackupError {
    pub(crate) fn invalid(why: impl Into<String>) -> BackupError {
        BackupError::Invalid(why.into())
    }

    pub(crate) fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> BackupError {
        let path = path.to_owned();
        move |source| BackupError::Io {
            action,
            path,
            source,
        }
    }
}
