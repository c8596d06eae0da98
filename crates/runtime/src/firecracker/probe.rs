//! What Firecracker needs from the host, checked before the backend is offered: an
//! uncompressed ELF kernel, and a KVM that actually runs a guest.
//!
//! As with QEMU (`qemu/accel.rs`), opening `/dev/kvm` proves little, so the probe boots the
//! box kernel without an initramfs (`firecracker --no-api --config-file`): a working KVM
//! runs it to its "cannot mount root" panic, which `panic=1 reboot=k` turns into a reset
//! that ends Firecracker, in well under a second.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::api::{BootSource, MachineConfig};

const PROBE_DEADLINE: Duration = Duration::from_secs(10);
const PANIC_MARK: &str = "Kernel panic";
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];

/// Why `kernel` cannot be Firecracker's, if it cannot: on x86_64 Firecracker boots only an
/// uncompressed ELF `vmlinux`, not the bzImage distributions ship.
pub fn kernel_problem(kernel: &Path) -> Option<String> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    match std::fs::File::open(kernel).and_then(|mut f| f.read_exact(&mut magic)) {
        Err(e) => Some(format!("cannot read {} ({e})", kernel.display())),
        Ok(()) if magic == ELF_MAGIC => None,
        Ok(()) => Some(format!(
            "{} is not an ELF vmlinux (a bzImage?)",
            kernel.display()
        )),
    }
}

/// `Ok(reason)` when a KVM guest ran under `firecracker`; `Err(reason)` when not. The
/// probe's config file is written to `work_dir` and removed again.
pub async fn probe_kvm(
    firecracker: &Path,
    kernel: &Path,
    work_dir: &Path,
) -> Result<String, String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Err(format!("/dev/kvm cannot be opened ({e})"));
    }
    let config = serde_json::json!({
        "boot-source": BootSource {
            kernel_image_path: kernel.display().to_string(),
            initrd_path: None,
            boot_args: Some("console=ttyS0 reboot=k panic=1 pci=off".into()),
        },
        "machine-config": MachineConfig { vcpu_count: 1, mem_size_mib: 128, smt: false },
    });
    let config_path = work_dir.join("firecracker-kvm-probe.json");
    std::fs::write(&config_path, config.to_string())
        .map_err(|e| format!("cannot write {} ({e})", config_path.display()))?;
    let result = run_probe(firecracker, &config_path).await;
    let _ = std::fs::remove_file(&config_path);
    result
}

async fn run_probe(firecracker: &Path, config_path: &Path) -> Result<String, String> {
    let mut child = tokio::process::Command::new(firecracker)
        .arg("--no-api")
        .arg("--config-file")
        .arg(config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {} ({e})", firecracker.display()))?;
    let mut stdout = child.stdout.take();
    let started = Instant::now();
    let run = async {
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut out).await;
        }
        (child.wait().await, out)
    };
    match tokio::time::timeout(PROBE_DEADLINE, run).await {
        Err(_) => Err(format!(
            "a KVM guest did not reach its probe panic within {} s",
            PROBE_DEADLINE.as_secs()
        )),
        Ok((status, out)) => {
            let console = String::from_utf8_lossy(&out);
            if console.contains(PANIC_MARK) {
                Ok(format!(
                    "a KVM guest booted (probe took {} ms)",
                    started.elapsed().as_millis()
                ))
            } else {
                let last = console
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("it printed nothing");
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                Err(format!("KVM cannot run a guest here ({status}: {last})"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_elf_kernel_passes() {
        let dir = tempfile::tempdir().unwrap();
        let elf = dir.path().join("vmlinux");
        std::fs::write(&elf, b"\x7fELF\x02\x01\x01rest").unwrap();
        assert_eq!(kernel_problem(&elf), None);
        // A bzImage starts with a boot sector.
        let bz = dir.path().join("vmlinuz");
        std::fs::write(&bz, b"MZ\xea\x07rest").unwrap();
        assert!(kernel_problem(&bz).unwrap().contains("not an ELF vmlinux"));
        assert!(kernel_problem(&dir.path().join("none"))
            .unwrap()
            .starts_with("cannot read"));
    }

    #[tokio::test]
    async fn a_vmm_that_runs_no_guest_fails_the_probe() {
        let dir = tempfile::tempdir().unwrap();
        if std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_err()
        {
            // The probe must say /dev/kvm is the problem.
            let why = probe_kvm(Path::new("/bin/true"), Path::new("/none"), dir.path())
                .await
                .unwrap_err();
            assert!(why.starts_with("/dev/kvm"), "{why}");
            return;
        }
        // `/bin/true` exits at once without a guest console: not a working KVM.
        let why = probe_kvm(Path::new("/bin/true"), Path::new("/none"), dir.path())
            .await
            .unwrap_err();
        assert!(why.starts_with("KVM cannot run a guest"), "{why}");
        assert!(!dir.path().join("firecracker-kvm-probe.json").exists());
    }
}
