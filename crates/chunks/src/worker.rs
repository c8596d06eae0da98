//! Blocking work (file I/O, hashing, zstd) off the async threads.

use crate::ChunkError;

/// Runs `work` on tokio's blocking pool; `action` names it if the thread fails.
pub(crate) async fn blocking<T: Send + 'static>(
    action: &'static str,
    work: impl FnOnce() -> Result<T, ChunkError> + Send + 'static,
) -> Result<T, ChunkError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|source| ChunkError::Worker { action, source })?
}
