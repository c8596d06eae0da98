//! The audit log: one JSON line per decision. A deny is written at once; an allow is written
//! when the connection ends, so it can carry the byte counts and the duration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use berth_protocol::BoxId;
use serde::Serialize;

/// How the stream reached the gateway: through berth-init's CONNECT proxy (3128) or its
/// pinned 443 listener, which sends the ClientHello directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Connect,
    Direct,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

/// One line of `audit/<box>.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    #[serde(rename = "box")]
    pub box_id: BoxId,
    /// RFC 3339, UTC, when the decision was made (an allow: when the connection was opened).
    pub time: String,
    /// The SNI, or the CONNECT host when the ClientHello was never read; `None` when the box
    /// sent nothing that names a host.
    pub target: Option<String>,
    pub port: Option<u16>,
    pub via: Option<Via>,
    /// The vetted address that was (or would have been) dialled.
    pub resolved: Option<SocketAddr>,
    pub decision: Verdict,
    /// Why, for a deny (`not_allowed`, `forbidden_address:loopback`, …).
    pub reason: Option<String>,
    /// Addresses the name resolved to that were refused, with the reason for each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedAddress>,
    /// Bytes the box sent upstream (including the replayed ClientHello).
    pub bytes_up: u64,
    /// Bytes upstream sent back to the box.
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// The stream was TLS-intercepted (the host has a credential rule); the byte counts
    /// are then the upstream TLS connection's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub intercept: bool,
    /// The credential rule whose secret was set on the request (its name, never a value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// A rule whose placeholder the request carried but whose `methods`/`paths` it is
    /// outside of: the placeholder went upstream unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld: Option<WithheldRecord>,
    /// Why the gateway ended an allowed connection itself: `idle` (no byte either way for
    /// `[egress] idle_timeout_secs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<&'static str>,
}

/// `{"rule": "anthropic", "reason": "method" | "path" | "path_ambiguous"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WithheldRecord {
    pub rule: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedAddress {
    pub addr: std::net::IpAddr,
    pub reason: &'static str,
}

/// Where audit lines go. `record` must not block: it runs on the connection task (the
/// file sink, [`super::JsonlDirSink`], only queues the line).
pub trait AuditSink: Send + Sync {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError>;
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("creating audit directory {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening audit log {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing audit log {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding audit record")]
    Encode(#[source] serde_json::Error),
    #[error("the audit log writer has stopped")]
    WriterGone,
}

/// Keeps records in memory; for tests and for callers that forward them elsewhere.
#[derive(Default)]
pub struct MemorySink {
    records: Mutex<Vec<AuditRecord>>,
    notify: tokio::sync::Notify,
}

impl MemorySink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn records(&self) -> Vec<AuditRecord> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until at least `n` records exist and returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<AuditRecord> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let records = self.records();
            if records.len() >= n {
                return records;
            }
            notified.await;
        }
    }
}

impl AuditSink for MemorySink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
        self.notify.notify_waiters();
        Ok(())
    }
}
