//! Pausing a box through its container cgroup's freezer, as `runc pause` and `runc resume`
//! do, without exec'ing the OCI runtime twice (`state`, then `pause`): a resume is one
//! write, which is what makes a paused box wake in a few milliseconds. runc reads the
//! same freezer to say a container is `paused`, so its view stays true.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_protocol::BoxId;

use crate::vm::cgroup::{is_v2, relative, v1_mount};
use crate::RuntimeError;

/// How long a freeze may take to reach every process (a process in a blocking kernel call
/// is frozen when it returns) before the pause is reported as failed.
const FREEZE_DEADLINE: Duration = Duration::from_secs(10);
const FREEZE_POLL: Duration = Duration::from_millis(1);

/// Where the box's freezer is: cgroup2's `cgroup.freeze`, or v1's `freezer.state`.
enum Freezer {
    V2 { dir: PathBuf },
    V1 { state: PathBuf },
}

impl Freezer {
    fn of(id: &BoxId) -> Option<Freezer> {
        let freezer = if is_v2() {
            Freezer::V2 {
                dir: PathBuf::from("/sys/fs/cgroup").join(relative(id)),
            }
        } else {
            Freezer::V1 {
                state: v1_mount("freezer")?
                    .join(relative(id))
                    .join("freezer.state"),
            }
        };
        freezer.exists().then_some(freezer)
    }

    fn exists(&self) -> bool {
        match self {
            Freezer::V2 { dir } => dir.join("cgroup.freeze").exists(),
            Freezer::V1 { state } => state.exists(),
        }
    }

    fn set(&self, frozen: bool) -> Result<(), RuntimeError> {
        let (path, value) = match self {
            Freezer::V2 { dir } => (dir.join("cgroup.freeze"), if frozen { "1" } else { "0" }),
            Freezer::V1 { state } => (state.clone(), if frozen { "FROZEN" } else { "THAWED" }),
        };
        std::fs::write(&path, value).map_err(|source| RuntimeError::Io {
            action: "write the freezer of",
            path,
            source,
        })
    }

    /// Whether every process of the cgroup is frozen now.
    fn frozen(&self) -> Result<bool, RuntimeError> {
        let (path, frozen) = match self {
            Freezer::V2 { dir } => (dir.join("cgroup.events"), "frozen 1"),
            Freezer::V1 { state } => (state.clone(), "FROZEN"),
        };
        let text = std::fs::read_to_string(&path).map_err(|source| RuntimeError::Io {
            action: "read the freezer of",
            path,
            source,
        })?;
        Ok(text.lines().any(|line| line.trim() == frozen))
    }
}

/// Freezes every process of the box and waits until they all are. `Ok(false)` when the
/// box has no freezer here (the caller falls back to the OCI runtime).
pub fn freeze(id: &BoxId) -> Result<bool, RuntimeError> {
    let Some(freezer) = Freezer::of(id) else {
        return Ok(false);
    };
    freezer.set(true)?;
    let began = Instant::now();
    while !freezer.frozen()? {
        if began.elapsed() > FREEZE_DEADLINE {
            freezer.set(false)?;
            return Err(RuntimeError::Backend {
                program: "the cgroup freezer".into(),
                operation: "pause",
                status: format!("not frozen after {} s", FREEZE_DEADLINE.as_secs()),
                stderr: format!("box {id}: its processes did not all freeze; it was thawed again"),
            });
        }
        std::thread::sleep(FREEZE_POLL);
    }
    Ok(true)
}

/// Thaws the box. `Ok(false)` when it has no freezer here.
pub fn thaw(id: &BoxId) -> Result<bool, RuntimeError> {
    let Some(freezer) = Freezer::of(id) else {
        return Ok(false);
    };
    freezer.set(false)?;
    Ok(true)
}

/// Whether the box's processes are frozen; `None` when it has no freezer here.
pub fn frozen(id: &BoxId) -> Result<Option<bool>, RuntimeError> {
    Freezer::of(id).map(|f| f.frozen()).transpose()
}
