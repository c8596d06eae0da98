//! How a VM's boot ended, for `Runtime::wait_exit` of both VM backends.
//!
//! The VMM's pidfd says *that* it ended; why is pieced together from small files in the VM
//! dir (`VmPaths::exit_files`), written by whoever saw it happen: the VMM's wait
//! status (`vmm.exit`, by whoever reaped it: only the parent can, so a VMM an earlier
//! daemon started has none), a stop berth asked for (`stop-requested`), a full host disk
//! (`disk-full`, with the reason), and this boot's part of the console, where the guest
//! kernel says it panicked or powered off. They outlive the boot, so a caller that comes
//! late still learns how it ended, and go when the next boot begins.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::process::vmm::{self, VmProcess};
pub(crate) use crate::process::vmm::{read_status, VmmStatus};
use crate::vm::VmPaths;
use crate::{BoxExit, RuntimeError};

/// How long the VMM's own reaper may take to record its status once it has exited.
const RECORD_WAIT: Duration = Duration::from_secs(2);
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
const MAX_BACKOFF: Duration = Duration::from_millis(50);
/// The most of this boot's console read to classify its end.
const CONSOLE_WINDOW: u64 = 64 * 1024;
/// Console lines a reason quotes.
const REASON_LINES: usize = 20;
/// What the guest kernel prints when berth-init powers it off (`reboot(RB_POWER_OFF)`;
/// `pr_emerg`, so `quiet` does not hide it).
const POWER_OFF_MARK: &str = "reboot: Power down";
const PANIC_MARK: &str = "Kernel panic";

/// At the start of a boot, before the VMM runs: forgets how the last boot ended and notes
/// where this boot's console output begins (returned too, for the wait for the agent).
pub(crate) fn begin_boot(paths: &VmPaths) -> Result<u64, RuntimeError> {
    for file in paths.exit_files() {
        crate::fs::remove_if_exists(&file)?;
    }
    let start = std::fs::metadata(paths.console_log()).map_or(0, |m| m.len());
    let file = paths.console_start();
    std::fs::write(&file, format!("{start}\n")).map_err(crate::error::io("write", &file))?;
    Ok(start)
}

/// berth is stopping this boot: however the VMM now ends, the boot ended cleanly.
pub(crate) fn mark_stop(paths: &VmPaths) {
    let file = paths.stop_requested();
    if let Err(e) = std::fs::write(&file, b"") {
        tracing::warn!(path = %file.display(), error = %e, "cannot record a requested stop");
    }
}

/// The boot ends because the host's disk is full; `reason` is what the user reads.
pub(crate) fn mark_disk_full(paths: &VmPaths, reason: &str) -> Result<(), RuntimeError> {
    let file = paths.disk_full();
    std::fs::write(&file, reason).map_err(crate::error::io("write", &file))
}

/// After `vmm` has exited: reaps it if it is ours, and when it was our child (`ours`,
/// checked while it ran) waits briefly for its status to be recorded by whichever task
/// reaped it first.
pub(crate) async fn settle(vmm: &VmProcess, ours: bool, paths: &VmPaths) {
    vmm.reap_into(&paths.vmm_exit());
    if ours {
        wait_for_record(paths).await;
    }
}

/// When the VMM of `pid_file` is no longer found alive: if its boot was not cleaned up
/// yet (the pid file is there) and its status is not recorded, it has only just exited
/// (or an earlier daemon's VMM was reaped by the host's init): reaps it if it is still
/// ours, then gives its reaper a moment to record the status.
pub(crate) async fn settle_gone(pid_file: &Path, paths: &VmPaths) {
    if !pid_file.exists() || read_status(&paths.vmm_exit()).is_some() {
        return;
    }
    vmm::reap_exited_into(pid_file, &paths.vmm_exit());
    wait_for_record(paths).await;
}

async fn wait_for_record(paths: &VmPaths) {
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    while read_status(&paths.vmm_exit()).is_none() && started.elapsed() < RECORD_WAIT {
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// How the last boot ended, from what its files say. `vmm` names the VMM for the user
/// (`QEMU`, `Firecracker`); `vmm_log` is where it printed its own errors.
pub(crate) fn classify(paths: &VmPaths, vmm: &str, vmm_log: &Path) -> BoxExit {
    if let Ok(reason) = std::fs::read_to_string(paths.disk_full()) {
        return BoxExit::Crashed(reason.trim().to_owned());
    }
    if paths.stop_requested().exists() {
        return BoxExit::Clean;
    }
    // No boot began (or its files are gone with the box): nothing ran that could crash.
    let Some(start) = std::fs::read_to_string(paths.console_start())
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        return BoxExit::Clean;
    };
    let console = console_since(&paths.console_log(), start);
    if console.contains(PANIC_MARK) {
        return BoxExit::Crashed(format!(
            "the guest kernel panicked: {}",
            quote(&console_tail(&console))
        ));
    }
    let powered_off = console.contains(POWER_OFF_MARK);
    match read_status(&paths.vmm_exit()) {
        Some(VmmStatus::Killed(signal)) => BoxExit::Crashed(format!(
            "{vmm} was killed by signal {signal} ({})",
            signal_name(signal)
        )),
        Some(VmmStatus::Exited(0)) | None if powered_off => BoxExit::Clean,
        Some(VmmStatus::Exited(0)) => BoxExit::Crashed(format!(
            "the guest reset without powering off ({vmm} exited with status 0); console: {}",
            quote(&console_tail(&console))
        )),
        Some(VmmStatus::Exited(code)) => BoxExit::Crashed(format!(
            "{vmm} exited with status {code}: {}",
            quote(&vmm::log_tail(vmm_log))
        )),
        None => BoxExit::Crashed(format!(
            "{vmm} exited; its exit status is unknown (it was not this daemon's child: started before a restart?); console: {}",
            quote(&console_tail(&console))
        )),
    }
}

/// The console from byte `start` on (from the top if the log was cut since), at most its
/// last [`CONSOLE_WINDOW`] bytes.
fn console_since(console: &Path, start: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(console) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = if start > len { 0 } else { start };
    let from = start.max(len.saturating_sub(CONSOLE_WINDOW));
    if file.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last lines of `console` without kernel stack traces.
fn console_tail(console: &str) -> String {
    let kept: Vec<&str> = console
        .lines()
        .filter(|l| !l.trim().is_empty() && !vmm::is_trace_noise(l))
        .collect();
    kept[kept.len().saturating_sub(REASON_LINES)..].join("\n")
}

fn quote(text: &str) -> String {
    if text.trim().is_empty() {
        "(nothing)".into()
    } else {
        format!("\n{text}")
    }
}

fn signal_name(signal: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(signal).map_or("unknown signal", |s| s.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::vmm::write_status;

    fn boot(dir: &Path, earlier: &str) -> VmPaths {
        let paths = VmPaths::at(dir);
        std::fs::create_dir_all(paths.vm_dir()).unwrap();
        std::fs::write(paths.console_log(), earlier).unwrap();
        // Files of an earlier boot that must not count for this one.
        mark_stop(&paths);
        write_status(&paths.vmm_exit(), VmmStatus::Exited(0)).unwrap();
        begin_boot(&paths).unwrap();
        paths
    }

    fn console(paths: &VmPaths, text: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(paths.console_log())
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn classify_qemu(paths: &VmPaths) -> BoxExit {
        classify(paths, "QEMU", &paths.qemu_log())
    }

    #[test]
    fn statuses_round_trip_and_garbage_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vmm.exit");
        for status in [VmmStatus::Exited(3), VmmStatus::Killed(9)] {
            write_status(&file, status).unwrap();
            assert_eq!(read_status(&file), Some(status));
        }
        std::fs::write(&file, "died 9").unwrap();
        assert_eq!(read_status(&file), None);
    }

    #[test]
    fn a_kill_names_the_signal_and_a_panic_quotes_only_this_boots_console() {
        let dir = tempfile::tempdir().unwrap();
        let paths = boot(dir.path(), "[ 1.0] Kernel panic - in an earlier boot\n");
        console(&paths, "berth-init: ready\n");
        write_status(&paths.vmm_exit(), VmmStatus::Killed(9)).unwrap();
        assert_eq!(
            classify_qemu(&paths),
            BoxExit::Crashed("QEMU was killed by signal 9 (SIGKILL)".into())
        );
        console(
            &paths,
            "[ 9.1] sysrq: Trigger a crash\n[ 9.1] Kernel panic - not syncing: sysrq triggered crash\n[ 9.1]  dump_stack+0x1/0x2\n",
        );
        write_status(&paths.vmm_exit(), VmmStatus::Exited(0)).unwrap();
        let BoxExit::Crashed(reason) = classify_qemu(&paths) else {
            panic!("a panic read as clean")
        };
        assert!(reason.starts_with("the guest kernel panicked:"), "{reason}");
        assert!(reason.contains("sysrq triggered crash"), "{reason}");
        assert!(
            !reason.contains("earlier boot") && !reason.contains("dump_stack"),
            "{reason}"
        );
    }

    #[test]
    fn a_power_off_is_clean_a_reset_or_an_error_exit_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let paths = boot(dir.path(), "");
        // Never ended: no status, no power-off line.
        assert!(matches!(classify_qemu(&paths), BoxExit::Crashed(r) if r.contains("unknown")));
        write_status(&paths.vmm_exit(), VmmStatus::Exited(0)).unwrap();
        assert!(
            matches!(classify_qemu(&paths), BoxExit::Crashed(r) if r.contains("reset without powering off"))
        );
        std::fs::write(paths.qemu_log(), "qemu: could not open disk\n").unwrap();
        write_status(&paths.vmm_exit(), VmmStatus::Exited(1)).unwrap();
        assert!(
            matches!(classify_qemu(&paths), BoxExit::Crashed(r) if r.contains("status 1") && r.contains("could not open disk"))
        );
        console(&paths, "[ 5.0] reboot: Power down\n");
        write_status(&paths.vmm_exit(), VmmStatus::Exited(0)).unwrap();
        assert_eq!(classify_qemu(&paths), BoxExit::Clean);
        // Not our child (status unknown), but the guest said it powered off.
        std::fs::remove_file(paths.vmm_exit()).unwrap();
        assert_eq!(classify_qemu(&paths), BoxExit::Clean);
    }

    #[test]
    fn a_stop_is_clean_a_full_disk_wins_and_no_boot_is_clean() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(classify_qemu(&VmPaths::at(dir.path())), BoxExit::Clean);
        let paths = boot(dir.path(), "");
        write_status(&paths.vmm_exit(), VmmStatus::Killed(9)).unwrap();
        mark_stop(&paths);
        assert_eq!(classify_qemu(&paths), BoxExit::Clean);
        mark_disk_full(&paths, "the host's disk is full: x\n").unwrap();
        assert_eq!(
            classify_qemu(&paths),
            BoxExit::Crashed("the host's disk is full: x".into())
        );
    }
}
