//! Typed operations, one per verb. They take a [`Ctx`] and typed input and know nothing
//! about HTTP.
//!
//! Lifecycle operations (start, stop, delete) run in a task of their own, so a client that
//! disconnects cannot cut a start or stop half-way; the caller just stops waiting.

pub mod box_create;
pub mod box_delete;
pub mod box_disk;
pub mod box_find;
pub mod box_move;
pub mod box_rootfs;
pub mod box_start;
pub mod box_stop;
pub mod box_update;
pub mod events_read;
pub mod exec;
pub mod files;
pub mod files_archive;
pub mod files_watch;
pub mod message_list;
pub mod message_post;
pub mod port_connect;
pub mod port_links;
pub mod port_proxy;
pub mod process;
pub mod reconcile;
pub mod secrets;
pub mod tenant_create;
pub mod tenant_keys;
pub mod tenant_update;
pub mod terminal;
pub mod wakeups;
pub mod web_sessions;

use std::future::Future;

use berth_protocol::BoxId;

use crate::error::OpError;

/// Runs `work` in its own task and waits for it.
async fn detached<T, F>(id: &BoxId, work: F) -> Result<T, OpError>
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
