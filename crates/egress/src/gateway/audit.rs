//! The audit log: one JSON line per decision. A deny is written at once; an allow is written
//! when the connection ends, so it can carry the byte counts and the duration.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// Where audit lines go. `record` must not block for long: it runs on the connection task.
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
}

/// Appends each record to `<dir>/<box>.jsonl` and flushes it: the log must survive a crash
/// of the gateway right after the decision. Files are opened once per box and kept.
pub struct JsonlDirSink {
    dir: PathBuf,
    files: Mutex<std::collections::HashMap<BoxId, File>>,
}

impl JsonlDirSink {
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, AuditError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| AuditError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        Ok(JsonlDirSink {
            dir,
            files: Mutex::new(Default::default()),
        })
    }

    /// The log file of `box_id` (what `GET /v1/boxes/{id}/egress` will read).
    pub fn path_for(&self, box_id: &BoxId) -> PathBuf {
        log_path(&self.dir, box_id)
    }

    /// Closes the box's log file (it reopens on the next record): call when the box is
    /// deleted, so the handle of a deleted file is not kept forever.
    pub fn close(&self, box_id: &BoxId) {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(box_id);
    }
}

fn log_path(dir: &Path, box_id: &BoxId) -> PathBuf {
    // A BoxId is `bx_` + base32, so it is a safe file name.
    dir.join(format!("{}.jsonl", box_id.as_str()))
}

impl AuditSink for JsonlDirSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(record).map_err(AuditError::Encode)?;
        line.push(b'\n');
        let path = self.path_for(&record.box_id);
        // A poisoned lock only means another writer panicked mid-write; the map is still
        // usable, and losing the audit log would be worse.
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let file = match files.entry(record.box_id.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|source| AuditError::Open {
                        path: path.clone(),
                        source,
                    })?;
                v.insert(f)
            }
        };
        // One write call per line: with O_APPEND, lines never interleave.
        file.write_all(&line)
            .and_then(|()| file.flush())
            .map_err(|source| AuditError::Write { path, source })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::DenyReason;

    fn record(box_id: &BoxId) -> AuditRecord {
        AuditRecord {
            box_id: box_id.clone(),
            time: "2026-01-01T00:00:00Z".into(),
            target: Some("api.example.test".into()),
            port: Some(443),
            via: Some(Via::Direct),
            resolved: None,
            decision: Verdict::Deny,
            reason: Some(DenyReason::NotAllowed.code()),
            refused: vec![],
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            intercept: false,
            credential: None,
            withheld: None,
        }
    }

    #[test]
    fn jsonl_sink_appends_one_line_per_record() {
        let dir = tempfile::tempdir().unwrap();
        let sink = JsonlDirSink::new(dir.path().join("audit")).unwrap();
        let id = BoxId::from_random([1; 20]);
        sink.record(&record(&id)).unwrap();
        sink.record(&record(&id)).unwrap();
        let text = std::fs::read_to_string(sink.path_for(&id)).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["box"], id.as_str());
        assert_eq!(lines[0]["decision"], "deny");
        assert_eq!(lines[0]["reason"], "not_allowed");
        assert_eq!(lines[0]["via"], "direct");
        assert!(lines[0]["resolved"].is_null());
        assert!(lines[0].get("refused").is_none());
    }
}
