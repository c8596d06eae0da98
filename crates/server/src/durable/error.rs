//! Why a durable copy could not be taken, uploaded or restored.

use std::path::PathBuf;

use berth_chunks::ChunkError;

#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("cannot open the chunk store of [storage] url")]
    Open(#[source] ChunkError),

    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Chunks(#[from] ChunkError),

    #[error(transparent)]
    Store(#[from] berth_store::StoreError),
}
