//! Choosing the accelerator by running a guest.
//!
//! Opening `/dev/kvm` proves little: a nested KVM may open fine and then fail on the first
//! real guest ("emulation failure", or QEMU aborting on an MSR it cannot set). So the probe
//! boots the box kernel itself under `-accel kvm` without an initramfs: a working KVM runs
//! it to its "cannot mount root" panic, which `panic=-1` + `-no-reboot` turn into QEMU's
//! clean exit, in well under a second. Anything else (an error exit, no panic on the
//! console, no exit within the deadline) means TCG.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::cmdline::Accel;

/// How long a KVM guest gets to reach its panic.
const PROBE_DEADLINE: Duration = Duration::from_secs(10);
/// What the kernel prints when it gives up on the missing root (and only a guest that ran
/// that far prints it).
const PANIC_MARK: &str = "Kernel panic";

/// The accelerator to use, and why (for `describe`, logs and `GET /v1/runtimes`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AccelChoice {
    pub accel: Accel,
    pub reason: String,
}

/// Which accelerator a box should get: forced by config, or probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccelMode {
    /// KVM when a probe guest runs under it, else TCG.
    #[default]
    Auto,
    Kvm,
    Tcg,
}

/// Probes KVM by booting `kernel` under it.
pub async fn probe(qemu: &Path, kernel: &Path) -> AccelChoice {
    let tcg = |reason: String| AccelChoice {
        accel: Accel::Tcg,
        reason,
    };
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return tcg(format!("/dev/kvm cannot be opened ({e})"));
    }
    let mut child = match tokio::process::Command::new(qemu)
        .args(["-M", "microvm,acpi=on", "-accel", "kvm", "-cpu", "host"])
        .args(["-smp", "1", "-m", "128M", "-nodefaults", "-no-user-config"])
        .args(["-display", "none", "-no-reboot", "-serial", "stdio"])
        // QEMU's own seccomp filter, as for every box (the probe runs no guest disk).
        .args(["-sandbox", super::cmdline::SANDBOX])
        .arg("-kernel")
        .arg(kernel)
        .args([
            "-append",
            "console=ttyS0 panic=-1 reboot=t tsc=reliable lpj=5000000 quiet",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            return tcg(format!(
                "cannot run {} for the KVM probe ({e})",
                qemu.display()
            ))
        }
    };
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let run = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let read_out = async {
            if let Some(s) = stdout.as_mut() {
                let _ = s.read_to_end(&mut out).await;
            }
        };
        let read_err = async {
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut err).await;
            }
        };
        let ((), (), status) = tokio::join!(read_out, read_err, child.wait());
        (status, out, err)
    };
    let started = std::time::Instant::now();
    match tokio::time::timeout(PROBE_DEADLINE, run).await {
        Err(_) => tcg(format!(
            "a KVM guest did not reach its probe panic within {} s",
            PROBE_DEADLINE.as_secs()
        )),
        Ok((Err(e), _, _)) => tcg(format!("waiting for the KVM probe failed ({e})")),
        Ok((Ok(status), out, err)) => {
            let console = String::from_utf8_lossy(&out);
            if status.success() && console.contains(PANIC_MARK) {
                AccelChoice {
                    accel: Accel::Kvm,
                    reason: format!(
                        "a KVM guest booted (probe took {} ms)",
                        started.elapsed().as_millis()
                    ),
                }
            } else {
                let err = String::from_utf8_lossy(&err);
                let last = err
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                tcg(format!("KVM cannot run a guest here ({status}: {last})"))
            }
        }
    }
}
