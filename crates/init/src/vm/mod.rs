//! What only a VM's PID 1 does, between the `mount` phase and the shared phases:
//!
//! - `kernel`: not a step but a measurement, the kernel's uptime when `berth-init`
//!   started (from `/proc/uptime`), so `GET /v1/info` shows kernel → init → disks → ready;
//! - `modules` ([`modules`]): the virtio drivers, from the initramfs;
//! - `disks` ([`discover`], [`plan`], [`mounts`]): the config disk, the rootfs, volume and
//!   layers by virtio serial, the run directory ([`run_dir`]), the hostname, then the
//!   switch onto the new root;
//! - `limits` ([`cgroup`]): the box's cgroup with its process limit (in a sandbox the
//!   host delegates the container's cgroup and berth-init makes the same `box` child).
//!
//! After that the box looks like a sandbox from the inside (same paths, same run
//! directory files), and the shared phases run unchanged; only the channels differ: the
//! serial channel's port ([`serial_port`], QEMU) or vsock (Firecracker) instead of the run
//! directory's Unix sockets, chosen once in [`crate::channel::VmChannel`].

mod block;
mod cgroup;
mod config_disk;
mod discover;
mod modules;
mod mounts;
mod plan;
mod run_dir;
pub mod serial_port;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::boot::BootRecord;

pub use self::cgroup::BoxCgroup;
pub use self::mounts::release_volume;

/// How long the `disks` phase waits for the config disk and the disks it names. Probing
/// takes milliseconds; the bound turns a missing drive into a clear boot failure.
const DISK_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum VmBootError {
    #[error(transparent)]
    Modules(#[from] modules::ModulesError),
    #[error("disks phase")]
    Discover(#[from] discover::DiscoverError),
    #[error("disks phase")]
    Mounts(#[from] mounts::MountsError),
    #[error("modules phase: cannot read the kernel release")]
    Release(#[source] std::io::Error),
}

/// Runs the VM-only phases; `run_dir` is where the run directory is made (under `/run`,
/// which moves into the new root). Returns the box's cgroup, which every process started
/// for the box joins (`None`: the kernel could not make it, and the box has no limit).
pub fn boot(record: &mut BootRecord, run_dir: &Path) -> Result<Option<BoxCgroup>, VmBootError> {
    record_kernel(record);
    // Ctrl-Alt-Del then sends PID 1 a SIGINT (a graceful stop) instead of resetting the VM
    // with the volume mounted. Best effort: nothing depends on it.
    let _ = nix::sys::reboot::set_cad_enabled(false);
    record.phase("modules", || {
        let release = modules::kernel_release().map_err(VmBootError::Release)?;
        let dir = Path::new("/lib/modules").join(release);
        // /proc is mounted by now; without it, no module gets command-line parameters.
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        let done = modules::load_all(&dir, Path::new("/sys/module"), &cmdline)?;
        if !done.loaded.is_empty() {
            eprintln!("berth-init: loaded {}", done.loaded.join(" "));
        }
        Ok::<_, VmBootError>(())
    })?;
    let pids_max = record.phase("disks", || {
        let found = discover::wait(Path::new("/sys/block"), Path::new("/dev"), DISK_WAIT)?;
        mounts::assemble(&found.plan, &found.nodes, &found.config, run_dir)?;
        mounts::set_hostname(&found.config.hostname)?;
        mounts::switch_root()?;
        Ok::<_, VmBootError>(found.config.pids_max)
    })?;
    // After the switch: the read-only view goes on the new root's /sys.
    let cgroup = record.phase("limits", || {
        Ok::<_, VmBootError>(cgroup::start(run_dir, pids_max))
    })?;
    Ok(cgroup)
}

/// Records the kernel's share of the boot as the first phase: its uptime now, less the
/// time `berth-init` has run so far. Skipped if `/proc/uptime` is unreadable.
fn record_kernel(record: &mut BootRecord) {
    let Ok(text) = std::fs::read_to_string("/proc/uptime") else {
        return;
    };
    if let Some(uptime) = parse_uptime(&text) {
        let ours = Instant::now().saturating_duration_since(record.started);
        record.record_first("kernel", uptime.saturating_sub(ours));
    }
}

/// The first field of `/proc/uptime`: `"1.73 0.52\n"` → 1.73 s. Parsed by hand: float
/// parsing would add its tables to the binary for this one number.
fn parse_uptime(text: &str) -> Option<Duration> {
    let field = text.split_whitespace().next()?;
    let (secs, frac) = field.split_once('.').unwrap_or((field, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || !(frac.is_empty() || digits(frac)) {
        return None;
    }
    let centis: u32 = match frac.len() {
        0 => 0,
        1 => frac.parse::<u32>().ok()? * 10,
        _ => frac.get(..2)?.parse().ok()?,
    };
    Some(Duration::from_secs(secs.parse().ok()?) + Duration::from_millis(u64::from(centis) * 10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_protocol::guest::Environment;

    #[test]
    fn the_kernel_phase_comes_first() {
        assert_eq!(
            parse_uptime("1.73 0.52\n"),
            Some(Duration::from_millis(1730))
        );
        assert_eq!(parse_uptime(""), None);
        assert_eq!(parse_uptime("-1 0"), None);
        assert_eq!(parse_uptime("12 0"), Some(Duration::from_secs(12)));
        assert_eq!(parse_uptime("0.5 0"), Some(Duration::from_millis(500)));
        assert_eq!(parse_uptime("1.x 0"), None);
        let mut record = BootRecord::new(Environment::Vm);
        record.phase("mount", || Ok::<_, ()>(())).unwrap();
        record_kernel(&mut record);
        let names: Vec<_> = record.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["kernel", "mount"]);
        assert!(record.phases[0].duration_us > 0);
    }
}
