//! Saving a stopped VM to a file and loading it into a QEMU started with `-incoming
//! defer`, through QMP migration with `mapped-ram` (QEMU ≥ 9.0): each RAM page has a fixed
//! place in the file and pages the guest never wrote are not written, so the file is
//! sparse and a save or load is one pass over the touched RAM.
//!
//! The file is named in a structured `channels` argument, not a `file:` URI, so a comma in
//! the data dir cannot change its meaning.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::qmp::{Qmp, QmpError};

/// How often the migration's status is read while it runs.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(transparent)]
    Qmp(#[from] QmpError),
    #[error("QEMU's migration {status}: {reason}")]
    Failed { status: String, reason: String },
    #[error("QEMU's migration did not finish within {after_ms} ms")]
    Timeout { after_ms: u64 },
}

#[derive(Debug, Deserialize)]
struct MigrationInfo {
    /// Absent before any migration began.
    status: Option<String>,
    #[serde(rename = "error-desc")]
    error_desc: Option<String>,
}

/// Saves the (stopped) VM into `file`, which QEMU creates.
pub async fn save(qmp: &mut Qmp, file: &Path, deadline: Duration) -> Result<(), MigrationError> {
    enable_mapped_ram(qmp).await?;
    qmp.execute_with("migrate", serde_json::json!({ "channels": channels(file) }))
        .await?;
    wait_completed(qmp, deadline).await
}

/// Loads `file` into a QEMU started with `-S -incoming defer`; the VM stays stopped.
pub async fn load(qmp: &mut Qmp, file: &Path, deadline: Duration) -> Result<(), MigrationError> {
    enable_mapped_ram(qmp).await?;
    qmp.execute_with(
        "migrate-incoming",
        serde_json::json!({ "channels": channels(file) }),
    )
    .await?;
    wait_completed(qmp, deadline).await
}

async fn enable_mapped_ram(qmp: &mut Qmp) -> Result<(), QmpError> {
    qmp.execute_with(
        "migrate-set-capabilities",
        serde_json::json!({
            "capabilities": [{ "capability": "mapped-ram", "state": true }]
        }),
    )
    .await
    .map(drop)
}

fn channels(file: &Path) -> serde_json::Value {
    serde_json::json!([{
        "channel-type": "main",
        "addr": { "transport": "file", "filename": file, "offset": 0 }
    }])
}

async fn wait_completed(qmp: &mut Qmp, deadline: Duration) -> Result<(), MigrationError> {
    let started = Instant::now();
    loop {
        let value = qmp.execute("query-migrate").await?;
        let info: MigrationInfo =
            serde_json::from_value(value).map_err(|source| QmpError::Malformed {
                command: "query-migrate",
                source,
            })?;
        match info.status.as_deref() {
            Some("completed") => return Ok(()),
            Some(status @ ("failed" | "cancelled")) => {
                return Err(MigrationError::Failed {
                    status: status.into(),
                    reason: info.error_desc.unwrap_or_else(|| "no reason given".into()),
                })
            }
            _ => {}
        }
        if started.elapsed() >= deadline {
            return Err(MigrationError::Timeout {
                after_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
