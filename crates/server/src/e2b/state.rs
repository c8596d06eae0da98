//! What the E2B API keeps for the daemon's life, held by `Ctx`. A leaf: it names only the
//! types it holds, never the context that holds it.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::Notify;

use super::access_key::{AccessTokens, KeyError};
use super::envd::filesystem::watcher_registry::Watchers;
use super::envd::process::pty_inputs::PtyInputs;

/// What the E2B API keeps for the daemon's life: the access-token key, and the doorbell of
/// the lifetime task.
pub struct E2b {
    tokens: AccessTokens,
    /// Rings when a sandbox's deadline moved: the lifetime task looks again.
    deadlines: Notify,
    /// The input side of each PTY that a `Start` or `Connect` stream holds now.
    pub(crate) pty_inputs: Arc<PtyInputs>,
    /// The polled watchers (`CreateWatcher`) of every sandbox.
    pub(crate) watchers: Arc<Watchers>,
}

impl std::fmt::Debug for E2b {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2b").finish_non_exhaustive()
    }
}

impl E2b {
    /// Loads (or makes, at the first start) the access-token key in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Arc<E2b>, KeyError> {
        Ok(Arc::new(E2b {
            tokens: AccessTokens::open(data_dir)?,
            deadlines: Notify::new(),
            pty_inputs: Arc::default(),
            watchers: Arc::default(),
        }))
    }

    pub fn tokens(&self) -> &AccessTokens {
        &self.tokens
    }

    /// Tells the lifetime task that a deadline was set, moved or disarmed.
    pub fn deadline_moved(&self) {
        self.deadlines.notify_one();
    }

    pub(crate) fn deadlines(&self) -> &Notify {
        &self.deadlines
    }
}
