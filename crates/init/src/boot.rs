//! Boot phases of PID 1: `mount` → (in a VM: `modules` → `disks`, see [`crate::vm`]) →
//! `seal` → `volume` → `serve`, each timed and each with
//! a typed error. A failing phase prints one line to stderr (the box's console log) and
//! `berth-init` exits non-zero.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_protocol::guest::{BootPhase, Environment};
use nix::mount::{mount, MsFlags};

/// What the agent knows about this boot, served by `GET /v1/info`.
#[derive(Debug)]
pub struct BootRecord {
    pub boot_id: String,
    pub started: Instant,
    pub environment: Environment,
    pub phases: Vec<BootPhase>,
}

impl BootRecord {
    pub fn new(environment: Environment) -> Self {
        BootRecord {
            boot_id: random_hex::<16>(),
            started: Instant::now(),
            environment,
            phases: Vec::new(),
        }
    }

    /// Runs one phase and records its duration (also when it fails).
    pub fn phase<T, E>(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let start = Instant::now();
        let result = f();
        self.record(name, start);
        result
    }

    pub fn record(&mut self, name: &'static str, start: Instant) {
        let duration_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.phases.push(BootPhase {
            name: name.to_owned(),
            duration_us,
        });
    }

    /// Records a phase that happened before any other (the kernel's boot in a VM).
    pub fn record_first(&mut self, name: &'static str, duration: Duration) {
        let duration_us = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.phases.insert(
            0,
            BootPhase {
                name: name.to_owned(),
                duration_us,
            },
        );
    }
}

/// Random bytes from the kernel, hex encoded. Falls back to time and pid if the
/// random source is unavailable (it never is after the `mount` phase).
pub fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    // SAFETY: getrandom writes at most `N` bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), N, 0) };
    if n != N as isize {
        let seed = Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id());
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (seed >> ((i % 16) * 8)) as u8;
        }
    }
    berth_basics::hex(&bytes)
}

/// Where the agent finds itself. A VM's PID 1 is all of: process 1, with no `/proc` yet
/// (nothing mounts it before init), on the initramfs root (a ramfs or tmpfs: `rdinit=`
/// runs init straight from it). A sandbox's init is process 1 of its pid namespace, but the
/// OCI runtime always mounts `/proc` before it starts, and its root is the bundle's
/// rootfs. Anything short of all three is a sandbox (or a test): the VM path mounts,
/// moves roots and deletes initramfs files, so it must never run by mistake.
pub fn detect_environment() -> Environment {
    classify(
        std::process::id(),
        Path::new("/proc/self").exists(),
        root_is_initramfs(),
    )
}

fn classify(pid: u32, proc_mounted: bool, initramfs_root: bool) -> Environment {
    if pid == 1 && !proc_mounted && initramfs_root {
        Environment::Vm
    } else {
        Environment::Sandbox
    }
}

/// Whether `/` is a ramfs or tmpfs, as the kernel's initramfs root is.
pub fn root_is_initramfs() -> bool {
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statfs.
    if unsafe { libc::statfs(c"/".as_ptr(), &raw mut st) } != 0 {
        return false;
    }
    // `RAMFS_MAGIC` from linux/magic.h (libc has only the tmpfs one). The field's integer
    // type differs between libc targets.
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    #[allow(clippy::useless_conversion)]
    let (magic, tmpfs) = (i64::from(st.f_type), i64::from(libc::TMPFS_MAGIC));
    magic == RAMFS_MAGIC || magic == tmpfs
}

#[derive(Debug, thiserror::Error)]
#[error("mount phase: cannot mount {fstype} on {target}")]
pub struct MountError {
    fstype: &'static str,
    target: PathBuf,
    #[source]
    source: nix::Error,
}

/// The `mount` phase: the pseudo filesystems a VM needs. Nothing to do in a sandbox.
pub fn mount_phase(env: Environment) -> Result<(), MountError> {
    if env != Environment::Vm {
        return Ok(());
    }
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let table: [(&'static str, &str, MsFlags, Option<&str>); 7] = [
        ("proc", "/proc", nosuid, None),
        ("sysfs", "/sys", nosuid, None),
        ("devtmpfs", "/dev", MsFlags::MS_NOSUID, Some("mode=0755")),
        (
            "devpts",
            "/dev/pts",
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=0620,ptmxmode=0666"),
        ),
        (
            "tmpfs",
            "/dev/shm",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        ),
        (
            "tmpfs",
            "/tmp",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        ),
        (
            "tmpfs",
            "/run",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        ),
    ];
    for (fstype, target, flags, data) in table {
        let _ = std::fs::create_dir_all(target);
        mount(Some(fstype), target, Some(fstype), flags, data).map_err(|source| MountError {
            fstype,
            target: target.into(),
            source,
        })?;
    }
    Ok(())
}

/// How PID 1 ends after everything is stopped and synced: a VM powers off (PID 1 exiting
/// would panic its kernel); a sandbox's init just exits and the OCI runtime reaps it.
pub fn power_off(env: Environment) -> ! {
    if env == Environment::Vm && std::process::id() == 1 {
        let _ = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_POWER_OFF);
    }
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_recorded_in_order_even_when_they_fail() {
        let mut boot = BootRecord::new(Environment::Sandbox);
        boot.phase("mount", || Ok::<_, ()>(())).unwrap();
        assert!(boot.phase("seal", || Err::<(), _>("no")).is_err());
        let names: Vec<_> = boot.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["mount", "seal"]);
        assert_eq!(boot.boot_id.len(), 32);
        assert_ne!(boot.boot_id, BootRecord::new(Environment::Sandbox).boot_id);
    }

    #[test]
    fn a_process_with_proc_is_in_a_sandbox() {
        assert_eq!(detect_environment(), Environment::Sandbox);
        mount_phase(Environment::Sandbox).unwrap();
    }

    #[test]
    fn only_pid_1_without_proc_on_an_initramfs_is_a_vm() {
        assert_eq!(classify(1, false, true), Environment::Vm);
        // A sandbox's init: /proc is there (whatever its root is).
        assert_eq!(classify(1, true, true), Environment::Sandbox);
        assert_eq!(classify(1, true, false), Environment::Sandbox);
        // No /proc but a disk root (a bundle without /proc): still not a VM.
        assert_eq!(classify(1, false, false), Environment::Sandbox);
        // Not process 1: a test or a tool run by hand.
        assert_eq!(classify(7, false, true), Environment::Sandbox);
    }

    #[test]
    fn the_kernel_phase_is_recorded_first() {
        let mut boot = BootRecord::new(Environment::Vm);
        boot.phase("mount", || Ok::<_, ()>(())).unwrap();
        boot.record_first("kernel", Duration::from_millis(1700));
        assert_eq!(boot.phases[0].name, "kernel");
        assert_eq!(boot.phases[0].duration_us, 1_700_000);
        assert_eq!(boot.phases[1].name, "mount");
    }
}
