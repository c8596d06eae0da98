//! Blocking work (mounts, mkfs, a cgroup freeze) off the async workers, in the caller's
//! span: the daemon serves each request in a span of its own (its `request_id`, the box's
//! `box_id`), and a line the work logs must carry them like any other.

use tokio::task::JoinHandle;

/// [`tokio::task::spawn_blocking`], the work running in the current span.
pub(crate) fn spawn_blocking<T, F>(work: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(work))
}
