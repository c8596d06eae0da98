//! Lifecycle work in a task of its own.

use std::future::Future;

use berth_protocol::BoxId;

use crate::error::OpError;

/// Runs `work` in its own task and waits for it.
pub(crate) async fn detached<T, F>(id: &BoxId, work: F) -> Result<T, OpError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, OpError>> + Send + 'static,
{
    tokio::spawn(work)
        .await
        .map_err(|source| OpError::TaskPanicked {
            id: id.clone(),
            source,
        })?
}
