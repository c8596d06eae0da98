//! The cgroup a VM's host processes (QEMU and its channel bridge, or Firecracker) run in: `berth/<box id>`,
//! the name the sandbox's boxes use, in the `cpu`, `memory` and `pids` hierarchies on
//! cgroup v1 or in the unified tree on v2. The VMM processes join it themselves between
//! fork and exec (`jail.rs`), and it is removed once they are gone.
//!
//! Limits: the box's `cpus` as a CPU quota of a 100 ms period (a fractional vCPU limit is
//! enforced: `cpus = 0.5` is 50 ms of CPU per 100 ms for all the VM's threads together),
//! memory as the guest's RAM plus [`OVERHEAD_MIB`] for the VMMs themselves, and
//! [`PIDS_MAX`] tasks (QEMU's threads and the bridge's).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_protocol::BoxId;

use crate::error::io;
use crate::{Limits, RuntimeError};

const ROOT: &str = "/sys/fs/cgroup";
const PERIOD_US: u64 = 100_000;
/// What the VMMs take beyond the guest's RAM: measured at ~70 MiB for QEMU (TCG with its
/// 16 MiB translation cache, block and serial buffers) plus a few MiB for the channel
/// bridge after a boot and a busy exec; the rest is margin for page cache of the disk images,
/// which the kernel reclaims before it would OOM-kill.
pub(crate) const OVERHEAD_MIB: u64 = 192;
/// Tasks for QEMU (vCPU, I/O, RCU and up to 64 block worker threads) and the channel
/// bridge, with room to spare; a guest cannot make QEMU spawn more.
pub(crate) const PIDS_MAX: u64 = 256;
/// How long removing waits for the last task to leave (an exit is not instant).
const REMOVE_WAIT: Duration = Duration::from_secs(5);

/// The box's cgroup dirs, one per v1 hierarchy (or the one v2 dir).
#[derive(Debug, Clone)]
pub(crate) struct VmCgroup {
    dirs: Vec<PathBuf>,
}

pub(crate) fn relative(id: &BoxId) -> PathBuf {
    Path::new("berth").join(id.as_str())
}

pub(crate) fn is_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

/// The v1 hierarchy holding `controller` (`cpu` may be mounted as `cpu,cpuacct`).
pub(crate) fn v1_mount(controller: &str) -> Option<PathBuf> {
    let direct = Path::new(ROOT).join(controller);
    if direct.is_dir() {
        return Some(direct);
    }
    std::fs::read_dir(ROOT)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.split(',').any(|c| c == controller))
        })
}

fn write(path: &Path, value: &str) -> Result<(), RuntimeError> {
    std::fs::write(path, value).map_err(io("write the cgroup file", path))
}

fn cpu_quota_us(cpus: f64) -> u64 {
    let quota = if cpus.is_finite() && cpus > 0.0 {
        (cpus * PERIOD_US as f64).round() as u64
    } else {
        PERIOD_US
    };
    // The kernel's floor is 1 ms.
    quota.max(1_000)
}

fn memory_bytes(limits: &Limits) -> u64 {
    limits
        .memory_mib
        .saturating_add(OVERHEAD_MIB)
        .saturating_mul(1 << 20)
}

/// Bytes of memory charged now to the box's `berth/<id>` cgroup (cgroup2 `memory.current`,
/// v1 `memory.usage_in_bytes`); `None` when it does not exist (nothing of the box runs).
/// The sandbox's containers live at the same path, so this measures them too.
pub(crate) fn memory_used(id: &BoxId) -> Result<Option<u64>, RuntimeError> {
    let rel = relative(id);
    let file = if is_v2() {
        Path::new(ROOT).join(rel).join("memory.current")
    } else {
        match v1_mount("memory") {
            Some(mount) => mount.join(rel).join("memory.usage_in_bytes"),
            None => return Ok(None),
        }
    };
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", &file)(e)),
    }
}

impl VmCgroup {
    /// The box's cgroup dirs on this host (whether or not they exist).
    pub(crate) fn of(id: &BoxId) -> VmCgroup {
        let rel = relative(id);
        let dirs = if is_v2() {
            vec![Path::new(ROOT).join(&rel)]
        } else {
            ["cpu", "memory", "pids"]
                .iter()
                .filter_map(|c| v1_mount(c))
                .map(|mount| mount.join(&rel))
                .collect()
        };
        VmCgroup { dirs }
    }

    /// Creates the box's cgroup with `limits` (a leftover of an earlier boot is reused).
    pub(crate) fn create(id: &BoxId, limits: &Limits) -> Result<VmCgroup, RuntimeError> {
        let cgroup = VmCgroup::of(id);
        let quota = cpu_quota_us(limits.cpus);
        let memory = memory_bytes(limits).to_string();
        let pids = PIDS_MAX.to_string();
        if is_v2() {
            let dir = &cgroup.dirs[0];
            // Controllers are enabled top-down in every ancestor's subtree_control.
            for parent in [Path::new(ROOT).to_path_buf(), Path::new(ROOT).join("berth")] {
                crate::fs::mkdir_all(&parent)?;
                write(&parent.join("cgroup.subtree_control"), "+cpu +memory +pids")?;
            }
            crate::fs::mkdir_all(dir)?;
            write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
            write(&dir.join("memory.max"), &memory)?;
            write(&dir.join("pids.max"), &pids)?;
            return Ok(cgroup);
        }
        if cgroup.dirs.len() != 3 {
            return Err(RuntimeError::Missing {
                what: "the cpu, memory and pids cgroup controllers".into(),
                hint: "mount cgroup v2 at /sys/fs/cgroup, or the v1 cpu, memory and pids hierarchies under it".into(),
            });
        }
        for dir in &cgroup.dirs {
            crate::fs::mkdir_all(dir)?;
        }
        let (cpu, mem, pid) = (&cgroup.dirs[0], &cgroup.dirs[1], &cgroup.dirs[2]);
        write(&cpu.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
        write(&cpu.join("cpu.cfs_quota_us"), &quota.to_string())?;
        write(&mem.join("memory.limit_in_bytes"), &memory)?;
        write(&pid.join("pids.max"), &pids)?;
        Ok(cgroup)
    }

    /// The `cgroup.procs` files a process writes itself into.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Removes the dirs once their last task has left (waits briefly: a killed process
    /// leaves its cgroup as it finishes exiting). Gone already is fine.
    pub(crate) fn remove(&self) -> Result<(), RuntimeError> {
        for dir in &self.dirs {
            let started = Instant::now();
            let mut backoff = Duration::from_millis(1);
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY)
                            && started.elapsed() < REMOVE_WAIT =>
                    {
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_millis(50));
                    }
                    Err(e) => return Err(io("remove the cgroup", dir)(e)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fractional_cpu_is_a_quota_and_memory_adds_the_overhead() {
        assert_eq!(
            [0.5, 1.0, 2.5, 0.0001, f64::NAN, -1.0].map(cpu_quota_us),
            [50_000, 100_000, 250_000, 1_000, 100_000, 100_000]
        );
        let limits = Limits {
            memory_mib: 256,
            ..Limits::default()
        };
        assert_eq!(memory_bytes(&limits), (256 + OVERHEAD_MIB) << 20);
    }

    #[test]
    fn a_box_cgroup_is_created_with_its_limits_and_removed() {
        if !nix::unistd::Uid::effective().is_root() {
            berth_testkit::skip("root", "a box cgroup needs root");
            return;
        }
        let id = BoxId::from_random([7; 20]);
        let limits = Limits {
            cpus: 0.5,
            memory_mib: 100,
            pids: 10,
        };
        let cgroup = VmCgroup::create(&id, &limits).unwrap();
        let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
        if is_v2() {
            assert_eq!(read(&cgroup.dirs[0], "cpu.max").trim(), "50000 100000");
        } else {
            assert_eq!(read(&cgroup.dirs[0], "cpu.cfs_quota_us").trim(), "50000");
            assert_eq!(
                read(&cgroup.dirs[1], "memory.limit_in_bytes").trim(),
                ((100 + OVERHEAD_MIB) << 20).to_string()
            );
            assert_eq!(
                read(&cgroup.dirs[2], "pids.max").trim(),
                PIDS_MAX.to_string()
            );
        }
        cgroup.remove().unwrap();
        assert!(cgroup.dirs.iter().all(|d| !d.exists()));
        cgroup.remove().unwrap();
    }
}
