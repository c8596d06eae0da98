//! Errors of the runtime backends.

use std::path::{Path, PathBuf};

use crate::guest_client::GuestError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The backend cannot do this at all (e.g. pause on a backend without a freezer).
    #[error("the {backend} runtime does not support {operation}")]
    Unsupported {
        backend: &'static str,
        operation: &'static str,
    },

    /// The box is not in a state that allows the operation.
    #[error("box {id} is {actual}, it must be {expected} to {operation}")]
    WrongState {
        id: String,
        operation: &'static str,
        expected: &'static str,
        actual: &'static str,
    },

    /// The spec asks for something no box may have (e.g. a layer over `/proc`); nothing was
    /// started.
    #[error("invalid box spec: {what}: {reason}")]
    InvalidSpec {
        /// Which part, e.g. `layer 0 (/srv/harness -> /opt/harness)`.
        what: String,
        reason: crate::layer::LayerError,
    },

    /// An egress host name that cannot be pinned in `/etc/hosts`; nothing was started.
    #[error("invalid box spec: egress host {host:?} is not a plain host name")]
    InvalidEgressHost { host: String },

    /// Something the backend needs is missing from the host (a binary, a kernel feature).
    #[error("{what} is missing: {hint}")]
    Missing { what: String, hint: String },

    #[error("{action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The OCI runtime (or VMM) failed; `stderr` holds what it said.
    #[error("{program} {operation} failed ({status}): {stderr}")]
    Backend {
        program: String,
        operation: &'static str,
        status: String,
        stderr: String,
    },

    /// The box started but its agent did not become ready in time.
    #[error("box {id}: berth-init did not answer within {waited_ms} ms{}", last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    NotReady {
        id: String,
        waited_ms: u64,
        last_error: Option<String>,
    },

    /// A box's snapshot cannot load into the VMM it would start now (another VMM version,
    /// or other memory, vCPUs or disks); it should boot cold instead.
    #[error("the snapshot no longer fits this box: {what}")]
    SnapshotMismatch { what: String },

    #[error("guest channel")]
    Guest(#[from] GuestError),
}

/// `error: cause: cause …`: an error and its whole source chain on one line, for logs and
/// for the reasons a user reads (one definition for every berth crate on the host).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// `map_err(io("create", path))`: an I/O error as [`RuntimeError::Io`] naming what was
/// being done to which path.
pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let path = path.to_path_buf();
    move |source| RuntimeError::Io {
        action,
        path,
        source,
    }
}

/// [`RuntimeError::WrongState`]: box `id` is `actual` where `operation` needs `expected`.
pub(crate) fn wrong_state(
    id: &berth_protocol::BoxId,
    operation: &'static str,
    expected: &'static str,
    actual: crate::RuntimeStatus,
) -> RuntimeError {
    let actual = match actual {
        crate::RuntimeStatus::Stopped => "stopped",
        crate::RuntimeStatus::Running => "running",
        crate::RuntimeStatus::Paused => "paused",
    };
    RuntimeError::WrongState {
        id: id.to_string(),
        operation,
        expected,
        actual,
    }
}
