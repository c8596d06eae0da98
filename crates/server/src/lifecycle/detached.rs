//! Lifecycle work in a task of its own, in the caller's span (a request's lines, the
//! task's included, carry its `request_id` and `box_id`).

use std::future::Future;

use berth_protocol::BoxId;

use crate::error::OpError;

/// Runs `work` in its own task and waits for it.
pub(crate) async fn detached<T, F>(id: &BoxId, work: F) -> Result<T, OpError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, OpError>> + Send + 'static,
{
    tokio::spawn(tracing::Instrument::in_current_span(work))
        .await
        .map_err(|source| OpError::TaskPanicked {
            id: id.clone(),
            source,
        })?
}

/// [`tokio::task::spawn_blocking`], the work running in the caller's span.
pub(crate) fn blocking<T, F>(work: F) -> tokio::task::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(work))
}
