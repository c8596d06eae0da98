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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    #[error("QEMU's migration stream went past {limit} bytes, more than the guest's RAM and its device state")]
    TooLarge { limit: u64 },
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
/// jailed QEMU may connect. At most `max_bytes` are written: a stream past that (the
/// guest's RAM and room for device state) fails the save rather than fill the host's
/// disk. Returns the bytes written.
pub async fn save(
    qmp: &mut Qmp,
    socket: &Path,
    owner: (u32, u32),
    file: &Path,
    deadline: Duration,
    max_bytes: u64,
) -> Result<u64, MigrationError> {
    let listener = UnixListener::bind(socket).map_err(io("cannot listen on", socket))?;
    std::os::unix::fs::chown(socket, Some(owner.0), Some(owner.1))
        .map_err(io("cannot hand to QEMU", socket))?;
    let mut out = tokio::fs::File::create(file)
        .await
        .map_err(io("cannot create", file))?;
    let copy = async {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(io("accept failed on", socket))?;
        // One byte past the limit tells a stream that ends there from one that goes on.
        let mut stream = stream.take(max_bytes + 1);
        let bytes = tokio::io::copy(&mut stream, &mut out)
            .await
            .map_err(io("cannot write", file))?;
        if bytes > max_bytes {
            return Err(MigrationError::TooLarge { limit: max_bytes });
        }
        out.sync_all().await.map_err(io("cannot sync", file))?;
        Ok(bytes)
    };
    let migrate = async {
        let uri = format!("unix:{}", socket.display());
        qmp.execute_with("migrate", serde_json::json!({ "uri": uri }))
            .await?;
        wait_completed(qmp, deadline).await
    };
    // The first to fail ends both: a refused `migrate` never connects to the copy.
    let both = async { tokio::try_join!(copy, migrate) };
    let (bytes, ()) = tokio::time::timeout(deadline, both)
        .await
        .map_err(|_| timeout(deadline))??;
    Ok(bytes)
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

#[cfg(test)]
mod tests {
    use super::super::fake_qmp::FakeQmp;
    use super::*;

    /// Whatever QEMU sends, the file stops at the limit (the guest's RAM and room for
    /// device state): a VMM cannot fill the host's disk through a snapshot.
    #[tokio::test]
    async fn a_stream_past_its_limit_fails_the_save_and_the_file_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("migration.sock");
        let file = dir.path().join("state");
        let fake = FakeQmp::endless(dir.path(), &socket);
        let mut qmp = Qmp::connect(&fake.socket).await.unwrap();
        let owner = (current_uid(), current_gid());
        let limit = 4 << 20;
        let saved = save(
            &mut qmp,
            &socket,
            owner,
            &file,
            Duration::from_secs(2),
            limit,
        )
        .await;
        assert!(
            matches!(saved, Err(MigrationError::TooLarge { limit: l }) if l == limit),
            "{saved:?}"
        );
        // The one byte past the limit is what shows the stream goes on.
        let written = std::fs::metadata(&file).unwrap().len();
        assert!(
            written <= limit + 1,
            "{written} bytes written past a limit of {limit}"
        );
    }

    fn current_uid() -> u32 {
        // SAFETY: getuid(2) cannot fail.
        unsafe { libc::getuid() }
    }

    fn current_gid() -> u32 {
        // SAFETY: getgid(2) cannot fail.
        unsafe { libc::getgid() }
    }
}
