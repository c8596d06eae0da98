//! Saving a stopped VM to a file and loading it back, through QEMU's migration over a Unix
//! socket in the box's run dir (QEMU 7.2 has no `file:` migration, and `exec:` is what
//! `-sandbox spawn=deny` forbids). The daemon is the socket's other end and the only writer
//! and reader of the file, which stays root's: the jailed QEMU never opens it.
//!
//! Saving: the daemon listens, QMP `migrate` makes QEMU connect and send its stream, which
//! the daemon copies to the file until QEMU reports the migration completed. Loading: QEMU
//! was started with `-incoming unix:<socket>` and listens; the daemon connects and sends
//! the file; once it is in, the guest is continued (the stream says it was stopped, as it
//! was when saved, so QEMU leaves it paused).
//!
//! The stream format writes an all-zero page as a flag, so a file holds about what the
//! guest has touched.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use super::qmp::{Qmp, QmpError, RunState};

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
    #[error("the migration stream {action} {path}")]
    Io {
        action: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("QEMU ended the incoming migration in state {0:?} instead of running the guest")]
    NotRunning(RunState),
}

#[derive(Debug, Deserialize)]
struct MigrationInfo {
    /// Absent before any migration began.
    status: Option<String>,
    #[serde(rename = "error-desc")]
    error_desc: Option<String>,
}

/// Saves the (stopped) VM into `file` through `socket`, whose owner becomes `owner` so the
/// jailed QEMU may connect. Returns the bytes written.
pub async fn save(
    qmp: &mut Qmp,
    socket: &Path,
    owner: (u32, u32),
    file: &Path,
    deadline: Duration,
) -> Result<u64, MigrationError> {
    let listener = UnixListener::bind(socket).map_err(io("cannot listen on", socket))?;
    std::os::unix::fs::chown(socket, Some(owner.0), Some(owner.1))
        .map_err(io("cannot hand to QEMU", socket))?;
    let mut out = tokio::fs::File::create(file)
        .await
        .map_err(io("cannot create", file))?;
    let (socket_path, file_path) = (socket.to_path_buf(), file.to_path_buf());
    let copy = tokio::spawn(async move {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(io("accept failed on", &socket_path))?;
        let bytes = tokio::io::copy(&mut stream, &mut out)
            .await
            .map_err(io("cannot write", &file_path))?;
        out.sync_all()
            .await
            .map_err(io("cannot sync", &file_path))?;
        Ok::<_, MigrationError>(bytes)
    });
    // Aborted on every way out: a refused `migrate` never connects, and the copy would
    // wait for it forever.
    let mut copy = AbortOnDrop(copy);
    let uri = format!("unix:{}", socket.display());
    qmp.execute_with("migrate", serde_json::json!({ "uri": uri }))
        .await?;
    wait_completed(qmp, deadline).await?;
    match tokio::time::timeout(deadline, &mut copy.0).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(join)) => Err(MigrationError::Io {
            action: "copy task failed for",
            path: file.to_path_buf(),
            source: std::io::Error::other(join),
        }),
        Err(_) => Err(timeout(deadline)),
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `file` to a QEMU started with `-incoming unix:<socket>`, waits until it is
/// loaded and continues the guest. `socket` must exist (QEMU listens on it).
pub async fn load(
    qmp: &mut Qmp,
    socket: &Path,
    file: &Path,
    deadline: Duration,
) -> Result<(), MigrationError> {
    let started = Instant::now();
    let send = async {
        let mut input = tokio::fs::File::open(file)
            .await
            .map_err(io("cannot open", file))?;
        let mut stream = UnixStream::connect(socket)
            .await
            .map_err(io("cannot connect to", socket))?;
        tokio::io::copy(&mut input, &mut stream)
            .await
            .map_err(io("cannot send", file))?;
        stream.shutdown().await.map_err(io("cannot end", socket))?;
        Ok::<_, MigrationError>(())
    };
    tokio::time::timeout(deadline, send)
        .await
        .map_err(|_| timeout(deadline))??;
    loop {
        match qmp.query_status().await? {
            RunState::Running => return Ok(()),
            RunState::Paused => return Ok(qmp.cont().await?),
            RunState::InMigrate => {}
            other => return Err(MigrationError::NotRunning(other)),
        }
        if started.elapsed() >= deadline {
            return Err(timeout(deadline));
        }
        tokio::time::sleep(POLL).await;
    }
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
            return Err(timeout(deadline));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Maps an I/O error on the stream's socket or file to what was being done with `path`.
fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MigrationError {
    let path = path.to_path_buf();
    move |source| MigrationError::Io {
        action,
        path,
        source,
    }
}

fn timeout(deadline: Duration) -> MigrationError {
    MigrationError::Timeout {
        after_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
    }
}
