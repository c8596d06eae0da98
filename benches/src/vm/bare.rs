//! The floor of a VM boot: QEMU with the box's machine (microvm with ACPI, the same
//! accelerator, CPU model, memfd guest RAM, serial console to a file) and the box's kernel
//! and kernel command line, but an initramfs holding only a static `/init` that powers
//! the guest off at once. No disks, no vsock, no berth-init: what is left is QEMU's start,
//! the kernel's boot and its power-off.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_runtime::qemu::Accel;

use super::super::daemon::BenchResult;

/// The trivial init: powers off, or with `-- idle` on the kernel command line (init's
/// first argument) waits forever, for the memory figures.
const INIT_C: &str = r#"#include <string.h>
#include <sys/reboot.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "idle") == 0)
        for (;;) pause();
    reboot(RB_POWER_OFF);
    return 0;
}
"#;

/// The guest RAM of every figure's VM.
pub const MEMORY_MIB: u64 = 256;

pub struct BareGuest {
    qemu: PathBuf,
    kernel: PathBuf,
    initramfs: PathBuf,
    console: PathBuf,
    accel: Accel,
    cmdline: String,
}

impl BareGuest {
    /// Compiles the init with `gcc -static` and packs it into an initramfs in `dir`.
    pub fn build(dir: &Path, qemu: &Path, kernel: &Path, accel: Accel) -> BenchResult<Self> {
        std::fs::create_dir_all(dir)?;
        let source = dir.join("init.c");
        let binary = dir.join("init");
        std::fs::write(&source, INIT_C)?;
        let status = Command::new("gcc")
            .args(["-static", "-Os", "-o"])
            .arg(&binary)
            .arg(&source)
            .status()?;
        if !status.success() {
            return Err(format!("gcc -static failed ({status}): is libc6-dev installed?").into());
        }
        let initramfs = dir.join("bare.cpio");
        let mut cpio = berth_image::CpioWriter::new(std::fs::File::create(&initramfs)?);
        cpio.dir("dev", 0o755)?;
        cpio.char_device("dev/console", 0o600, 5, 1)?;
        cpio.file("init", 0o755, &std::fs::read(&binary)?)?;
        cpio.finish()?;
        let cmdline = berth_runtime::qemu::kernel_cmdline(host_tsc_khz())
            .replace("rdinit=/berth-init", "rdinit=/init");
        Ok(BareGuest {
            qemu: qemu.to_path_buf(),
            kernel: kernel.to_path_buf(),
            initramfs,
            console: dir.join("console.log"),
            accel,
            cmdline,
        })
    }

    /// QEMU's arguments, mirroring the qemu backend's (`crates/runtime/src/qemu/cmdline.rs`)
    /// minus its disks, vsock and QMP.
    fn args(&self, idle: bool, tb_size_mib: Option<u32>) -> Vec<OsString> {
        let (accel, cpu) = match self.accel {
            Accel::Kvm => ("kvm".to_owned(), "host"),
            Accel::Tcg => {
                let tb = tb_size_mib
                    .map(|m| format!(",tb-size={m}"))
                    .unwrap_or_default();
                (format!("tcg,thread=multi{tb}"), "max")
            }
        };
        let mib = MEMORY_MIB;
        let mut cmdline = self.cmdline.clone();
        if idle {
            // After `--` the kernel hands every word to init (`idle` alone is a kernel
            // parameter).
            cmdline.push_str(" -- idle");
        }
        let mut console = OsString::from("file,id=console,path=");
        console.push(&self.console);
        [
            "-M".into(),
            "microvm,acpi=on".into(),
            "-accel".into(),
            accel.into(),
            "-cpu".into(),
            cpu.into(),
            "-smp".into(),
            "1".into(),
            "-m".into(),
            format!("{mib}M").into(),
            "-nodefaults".into(),
            "-no-user-config".into(),
            "-display".into(),
            "none".into(),
            "-no-reboot".into(),
            "-chardev".into(),
            console,
            "-serial".into(),
            "chardev:console".into(),
            "-kernel".into(),
            self.kernel.clone().into(),
            "-initrd".into(),
            self.initramfs.clone().into(),
            "-append".into(),
            cmdline.into(),
            "-object".into(),
            format!("memory-backend-memfd,id=mem,size={mib}M,share=on").into(),
            "-machine".into(),
            "memory-backend=mem".into(),
        ]
        .into()
    }

    /// One boot, from QEMU's spawn to its exit; fails unless the guest powered off.
    pub fn boot_once(&self) -> BenchResult<Duration> {
        let t0 = Instant::now();
        let status = Command::new(&self.qemu)
            .args(self.args(false, None))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()?;
        let took = t0.elapsed();
        let console = std::fs::read_to_string(&self.console).unwrap_or_default();
        // A kernel panic also ends QEMU (panic=-1, -no-reboot): only a power-off counts.
        if !status.success() || !console.contains("Power down") || console.contains("panic") {
            return Err(format!("the bare guest did not power off ({status}):\n{console}").into());
        }
        std::fs::remove_file(&self.console)?;
        Ok(took)
    }

    /// A bare guest that stays up (its init waits), for the memory figures.
    pub fn spawn_idle(&self, tb_size_mib: Option<u32>) -> BenchResult<IdleGuest> {
        let child = Command::new(&self.qemu)
            .args(self.args(true, tb_size_mib))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(IdleGuest { child })
    }
}

/// A running bare guest, killed on drop.
pub struct IdleGuest {
    pub child: Child,
}

impl Drop for IdleGuest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The host CPU's clock in kHz, as the qemu backend passes it (`tsc_early_khz`).
fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("cpu MHz"))?;
    let mhz: f64 = line.split_once(':')?.1.trim().parse().ok()?;
    (mhz.is_finite() && mhz > 0.0).then(|| (mhz * 1000.0).round() as u64)
}
