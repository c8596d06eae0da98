//! The command lines of one boot: QEMU's argv (a `microvm` with ACPI, virtio-mmio disks
//! found by serial, the guest channel's virtio-serial port, QMP) and the guest kernel's
//! command line.
//!
//! Pure functions of their inputs, so the exact argv is unit-tested.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use berth_protocol::vm::CHANNEL_PORT_NAME;

use crate::vm::VmPaths;

/// How QEMU runs the guest's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization (`/dev/kvm` that can run a guest).
    Kvm,
    /// QEMU's binary translator, one host thread per vCPU: slow, works everywhere.
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// The `-accel` value. TCG's translation cache is capped at 16 MiB: QEMU's default (up
    /// to 1 GiB, in 2 MiB huge pages) held 53 MiB per VM after one boot, and 16 MiB
    /// measured no slower to boot (the cache refills from what the guest runs now).
    fn qemu_arg(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg,thread=multi,tb-size=16",
        }
    }

    /// The `-cpu` value: the host's own CPU under KVM, every emulated feature under TCG.
    fn cpu(self) -> &'static str {
        match self {
            Accel::Kvm => "host",
            Accel::Tcg => "max",
        }
    }
}

/// One virtio-blk disk. berth-init tells disks apart by `serial` (never by `vdX` order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// The virtio serial, also the drive id: `berth-root`, `berth-vol`, `berth-layer-<n>`,
    /// `berth-config` (at most 20 bytes: virtio-blk's serial field).
    pub serial: String,
    pub path: PathBuf,
    pub read_only: bool,
}

/// Everything that differs between two boots' QEMU command lines.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub accel: Accel,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub kernel: &'a Path,
    pub initramfs: &'a Path,
    pub kernel_cmdline: &'a str,
    pub disks: &'a [Disk],
    pub paths: &'a VmPaths,
}

/// QEMU's `-sandbox` value (every option QEMU 7.2 has).
pub const SANDBOX: &str = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// QEMU's arguments (without the program) for one boot.
pub fn qemu_args(launch: &Launch<'_>) -> Vec<OsString> {
    let p = launch.paths;
    let mib = launch.memory_mib;
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |parts: &[&OsStr]| args.extend(parts.iter().map(|s| s.to_os_string()));
    push(&[
        "-M".as_ref(),
        "microvm,acpi=on".as_ref(),
        "-accel".as_ref(),
        launch.accel.qemu_arg().as_ref(),
        "-cpu".as_ref(),
        launch.accel.cpu().as_ref(),
        "-smp".as_ref(),
        launch.vcpus.to_string().as_ref(),
        "-m".as_ref(),
        format!("{mib}M").as_ref(),
        "-nodefaults".as_ref(),
        "-no-user-config".as_ref(),
        "-display".as_ref(),
        "none".as_ref(),
        // A guest reboot (berth-init's power-off, or a panic with panic=-1) ends QEMU.
        "-no-reboot".as_ref(),
        // QEMU's own seccomp filter, every optional part denied: no obsolete system calls,
        // no set*id, no fork or exec, no scheduler or affinity changes.
        "-sandbox".as_ref(),
        SANDBOX.as_ref(),
    ]);
    push(&[
        "-chardev".as_ref(),
        &opt("file,id=console,append=on,path=", &p.console_log()),
        "-serial".as_ref(),
        "chardev:console".as_ref(),
    ]);
    push(&[
        "-kernel".as_ref(),
        launch.kernel.as_os_str(),
        "-initrd".as_ref(),
        launch.initramfs.as_os_str(),
        "-append".as_ref(),
        launch.kernel_cmdline.as_ref(),
    ]);
    // The guest's RAM in a memfd of its own, so its mappings carry a name and the host can
    // tell guest RAM from QEMU's own memory (benches/src/vm/memory.rs). Private: nothing
    // else maps it.
    push(&[
        "-object".as_ref(),
        format!("memory-backend-memfd,id=mem,size={mib}M").as_ref(),
        "-machine".as_ref(),
        "memory-backend=mem".as_ref(),
    ]);
    // The guest channel: one virtio-serial port (QEMU migrates it, unlike vhost-user-vsock)
    // whose host end is the channel bridge's socket; the bridge listens before QEMU starts.
    push(&[
        "-chardev".as_ref(),
        &opt("socket,id=channel,path=", &p.serial_socket()),
        "-device".as_ref(),
        "virtio-serial-device,max_ports=2".as_ref(),
        "-device".as_ref(),
        format!("virtserialport,chardev=channel,name={CHANNEL_PORT_NAME}").as_ref(),
    ]);
    for disk in launch.disks {
        // A full host disk under the sparse volume stops the VM (`werror=enospc`), which
        // `disk_full.rs` sees and ends with a clear reason; the guest's ext4 would
        // otherwise swallow the error by going read-only. Other I/O errors go to the guest.
        let mut drive = OsString::from(format!(
            "id={},format=raw,if=none,werror=enospc,rerror=report,",
            disk.serial
        ));
        if disk.read_only {
            drive.push("readonly=on,");
        }
        drive.push(opt("file=", &disk.path));
        push(&[
            "-drive".as_ref(),
            &drive,
            "-device".as_ref(),
            format!("virtio-blk-device,drive={0},serial={0}", disk.serial).as_ref(),
        ]);
    }
    let mut qmp = opt("unix:", &p.qmp_socket());
    qmp.push(",server=on,wait=off");
    push(&["-qmp".as_ref(), &qmp]);
    // A second QMP server only for watching events: the first stays free for requests.
    let mut events = opt("unix:", &p.qmp_events_socket());
    events.push(",server=on,wait=off");
    push(&["-qmp".as_ref(), &events]);
    args
}

/// `prefix` followed by `path` with QEMU's option escaping: a `,` in a value is written
/// `,,` (otherwise a data dir named `a,b` would inject an option).
fn opt(prefix: &str, path: &Path) -> OsString {
    let mut out = prefix.as_bytes().to_vec();
    for &b in path.as_os_str().as_bytes() {
        out.push(b);
        if b == b',' {
            out.push(b',');
        }
    }
    OsString::from_vec(out)
}

/// The guest kernel's command line. Nothing secret goes here: `/proc/cmdline` is
/// world-readable in the guest.
///
/// `tsc_early_khz` (the host's TSC rate) keeps TCG guests from hanging while calibrating
/// the TSC; `panic=-1` + `-no-reboot` turn a kernel panic into QEMU's exit.
pub fn kernel_cmdline(tsc_khz: Option<u64>) -> String {
    let mut line = String::from("console=ttyS0 panic=-1 quiet reboot=t tsc=reliable");
    if let Some(khz) = tsc_khz {
        line.push_str(&format!(" tsc_early_khz={khz}"));
    }
    line.push_str(" lpj=5000000 rdinit=/berth-init");
    line
}

/// The host CPU's clock in kHz, from the first `cpu MHz` line of `/proc/cpuinfo`.
pub fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_khz(&info)
}

fn parse_cpu_khz(cpuinfo: &str) -> Option<u64> {
    let line = cpuinfo.lines().find(|l| l.starts_with("cpu MHz"))?;
    let mhz: f64 = line.split_once(':')?.1.trim().parse().ok()?;
    (mhz.is_finite() && mhz > 0.0).then(|| (mhz * 1000.0).round() as u64)
}

/// vCPUs for a `cpus` limit: rounded up, at least one.
pub fn vcpus(cpus: f64) -> u32 {
    if cpus.is_finite() && cpus > 1.0 {
        cpus.ceil().min(u32::MAX as f64) as u32
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_exact_argv_of_a_box() {
        let paths = VmPaths::at(Path::new("/d/boxes/bx_1"));
        let disks = [
            Disk {
                serial: "berth-root".into(),
                path: "/d/images/rootfs/k.ext4".into(),
                read_only: true,
            },
            Disk {
                serial: "berth-vol".into(),
                path: paths.volume(),
                read_only: false,
            },
        ];
        let cmdline = kernel_cmdline(Some(2_596_124));
        let args = qemu_args(&Launch {
            accel: Accel::Tcg,
            vcpus: 2,
            memory_mib: 256,
            kernel: Path::new("/d/k/vmlinuz"),
            initramfs: Path::new("/d/i.cpio"),
            kernel_cmdline: &cmdline,
            disks: &disks,
            paths: &paths,
        });
        let want = [
            "-M", "microvm,acpi=on", "-accel", "tcg,thread=multi,tb-size=16", "-cpu", "max", "-smp", "2",
            "-m", "256M", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "-chardev", "file,id=console,append=on,path=/d/boxes/bx_1/vm/console.log",
            "-serial", "chardev:console",
            "-kernel", "/d/k/vmlinuz", "-initrd", "/d/i.cpio",
            "-append", "console=ttyS0 panic=-1 quiet reboot=t tsc=reliable tsc_early_khz=2596124 lpj=5000000 rdinit=/berth-init",
            "-object", "memory-backend-memfd,id=mem,size=256M",
            "-machine", "memory-backend=mem",
            "-chardev", "socket,id=channel,path=/d/boxes/bx_1/vm/run/serial.sock",
            "-device", "virtio-serial-device,max_ports=2",
            "-device", "virtserialport,chardev=channel,name=org.berth.channel",
            "-drive", "id=berth-root,format=raw,if=none,werror=enospc,rerror=report,readonly=on,file=/d/images/rootfs/k.ext4",
            "-device", "virtio-blk-device,drive=berth-root,serial=berth-root",
            "-drive", "id=berth-vol,format=raw,if=none,werror=enospc,rerror=report,file=/d/boxes/bx_1/volume.ext4",
            "-device", "virtio-blk-device,drive=berth-vol,serial=berth-vol",
            "-qmp", "unix:/d/boxes/bx_1/vm/run/qmp.sock,server=on,wait=off",
            "-qmp", "unix:/d/boxes/bx_1/vm/run/qmp-events.sock,server=on,wait=off",
        ];
        assert_eq!(strings(&args), want);
    }

    #[test]
    fn kvm_uses_the_host_cpu_and_commas_in_paths_are_escaped() {
        let paths = VmPaths::at(Path::new("/d,x=1/boxes/b"));
        let args = strings(&qemu_args(&Launch {
            accel: Accel::Kvm,
            vcpus: 1,
            memory_mib: 128,
            kernel: Path::new("/k"),
            initramfs: Path::new("/i"),
            kernel_cmdline: "x",
            disks: &[],
            paths: &paths,
        }));
        let pos = |flag: &str| args.iter().position(|a| a == flag).unwrap();
        assert_eq!(args[pos("-accel") + 1], "kvm");
        assert_eq!(args[pos("-cpu") + 1], "host");
        assert!(args.contains(&"socket,id=channel,path=/d,,x=1/boxes/b/vm/run/serial.sock".into()));
        assert_eq!(
            args[args.len() - 3],
            "unix:/d,,x=1/boxes/b/vm/run/qmp.sock,server=on,wait=off"
        );
    }

    #[test]
    fn kernel_cmdline_names_berth_init_and_no_secret_and_parses_cpuinfo() {
        assert_eq!(
            kernel_cmdline(None),
            "console=ttyS0 panic=-1 quiet reboot=t tsc=reliable lpj=5000000 rdinit=/berth-init"
        );
        let info = "processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2596.124\ncpu MHz\t: 1.0\n";
        assert_eq!(parse_cpu_khz(info), Some(2_596_124));
        assert_eq!(parse_cpu_khz("cpu MHz : nan\n"), None);
        assert_eq!(parse_cpu_khz("nothing"), None);
    }

    #[test]
    fn vcpus_round_up_and_never_drop_below_one() {
        assert_eq!(
            [0.0, 0.5, 1.0, 1.5, 2.0, f64::NAN, -3.0].map(vcpus),
            [1, 1, 1, 2, 2, 1, 1]
        );
    }
}
