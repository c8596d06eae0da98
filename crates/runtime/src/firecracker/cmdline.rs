//! Command lines: Firecracker's own, the jailer's around it, and the guest kernel's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use berth_protocol::BoxId;

/// The guest kernel's command line. `reboot=k`: a guest reboot (and, with `panic=1`, a
/// panic) resets through the i8042, which makes Firecracker exit. `pci=off`: Firecracker
/// has no PCI bus. The `i8042.*` flags skip probing for what Firecracker's minimal i8042
/// lacks (an aux port, a mux, PnP) while keeping the keyboard `SendCtrlAltDel` needs.
pub const BOOT_ARGS: &str = "console=ttyS0 reboot=k panic=1 pci=off \
     i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd \
     quiet tsc=reliable lpj=5000000 rdinit=/berth-init";

/// Firecracker's `--id` for a box: its id with `_` as `-` (Firecracker and the jailer take
/// alphanumerics and `-`, at most 64).
pub fn instance_id(id: &BoxId) -> String {
    id.as_str().replace('_', "-")
}

/// `firecracker --api-sock <socket> --id <id>`.
pub fn firecracker_args(api_socket: &Path, id: &BoxId) -> Vec<OsString> {
    vec![
        "--api-sock".into(),
        api_socket.into(),
        "--id".into(),
        instance_id(id).into(),
    ]
}

/// Running Firecracker under its jailer: chroot (`<chroot_base_dir>/<exec name>/<id>/root`,
/// staged by `jail.rs`), its own mount namespace and device nodes, the uid/gid drop (to
/// the box's own VMM uid and gid, `crate::vm::vmm_owner`: no other box's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailerConfig {
    pub jailer_bin: PathBuf,
    pub chroot_base_dir: PathBuf,
    /// 1 or 2: which cgroup hierarchy the jailer (and the cleanup) uses.
    pub cgroup_version: u8,
}

/// The jailer looked up on `PATH` unless `$BERTH_JAILER` names one.
pub const DEFAULT_JAILER: &str = "jailer";

impl JailerConfig {
    /// The default: the jailer from `$BERTH_JAILER` or `PATH` (the bare name when not
    /// found: `FirecrackerRuntime::new` then says it is missing), chroots under
    /// `<data>/jailer`, the host's cgroup version.
    pub fn new(data_dir: &Path) -> JailerConfig {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        JailerConfig {
            jailer_bin: crate::vm::find_program("BERTH_JAILER", DEFAULT_JAILER)
                .unwrap_or_else(|| DEFAULT_JAILER.into()),
            chroot_base_dir: data_dir.join("jailer"),
            cgroup_version: if v2 { 2 } else { 1 },
        }
    }

    /// `<chroot_base_dir>/<exec name>/<id>`: the jailer's directory for the box, removed
    /// whole after each boot.
    pub fn jail_dir(&self, firecracker_bin: &Path, id: &BoxId) -> PathBuf {
        self.chroot_base_dir
            .join(exec_name(firecracker_bin))
            .join(instance_id(id))
    }

    /// Where the jailer chroots the box's Firecracker (the files a boot uses are linked in
    /// here before it starts).
    pub fn chroot(&self, firecracker_bin: &Path, id: &BoxId) -> PathBuf {
        self.jail_dir(firecracker_bin, id).join("root")
    }

    /// `jailer --id … --exec-file … --uid … --gid … --chroot-base-dir … --cgroup-version …
    /// -- --api-sock <api_socket>`, Firecracker running as `owner` (uid, gid): its own
    /// arguments follow `--`, with paths as it sees them in the chroot. No `--new-pid-ns`: with it the jailer's parent exits at
    /// once and Firecracker is no longer berth's child (no pidfd reaping, no exit status).
    /// No `--daemonize`: Firecracker's stdout and stderr stay the console log.
    pub fn args(
        &self,
        firecracker_bin: &Path,
        id: &BoxId,
        api_socket: &Path,
        owner: (u32, u32),
    ) -> Vec<OsString> {
        vec![
            "--id".into(),
            instance_id(id).into(),
            "--exec-file".into(),
            firecracker_bin.into(),
            "--uid".into(),
            owner.0.to_string().into(),
            "--gid".into(),
            owner.1.to_string().into(),
            "--chroot-base-dir".into(),
            self.chroot_base_dir.clone().into(),
            "--cgroup-version".into(),
            self.cgroup_version.to_string().into(),
            "--".into(),
            "--api-sock".into(),
            api_socket.into(),
        ]
    }
}

/// The exec file's last component: the jailer's directory under the chroot base, its copy
/// of the binary in the chroot, and its default parent cgroup are named after it.
pub fn exec_name(firecracker_bin: &Path) -> OsString {
    firecracker_bin
        .file_name()
        .map(OsString::from)
        .unwrap_or_else(|| "firecracker".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> BoxId {
        BoxId::from_random([0; 20])
    }

    #[test]
    fn firecracker_gets_its_api_socket_and_a_valid_id() {
        let args = firecracker_args(Path::new("/d/boxes/x/vm/firecracker.sock"), &id());
        let expected: Vec<OsString> = [
            "--api-sock",
            "/d/boxes/x/vm/firecracker.sock",
            "--id",
            "bx-aaaaaaaaaaaaaaaaaaaa",
        ]
        .map(OsString::from)
        .to_vec();
        assert_eq!(args, expected);
        let id = instance_id(&id());
        assert!(id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    }

    #[test]
    fn the_jailer_command_line_wraps_firecrackers() {
        let jailer = JailerConfig {
            jailer_bin: "/usr/bin/jailer".into(),
            chroot_base_dir: "/srv/jail".into(),
            cgroup_version: 2,
        };
        let fc = Path::new("/usr/bin/firecracker");
        let socket = Path::new("/d/boxes/x/vm/run/firecracker.sock");
        let args = jailer.args(fc, &id(), socket, (1234, 1235));
        let expected: Vec<OsString> = [
            "--id",
            "bx-aaaaaaaaaaaaaaaaaaaa",
            "--exec-file",
            "/usr/bin/firecracker",
            "--uid",
            "1234",
            "--gid",
            "1235",
            "--chroot-base-dir",
            "/srv/jail",
            "--cgroup-version",
            "2",
            "--",
            "--api-sock",
            "/d/boxes/x/vm/run/firecracker.sock",
        ]
        .map(OsString::from)
        .to_vec();
        assert_eq!(args, expected);
        assert_eq!(
            jailer.chroot(fc, &id()),
            Path::new("/srv/jail/firecracker/bx-aaaaaaaaaaaaaaaaaaaa/root")
        );
        assert_eq!(
            jailer.jail_dir(fc, &id()),
            Path::new("/srv/jail/firecracker/bx-aaaaaaaaaaaaaaaaaaaa")
        );
    }

    #[test]
    fn boot_args_reset_through_the_keyboard_controller_and_start_berth_init() {
        for arg in [
            "reboot=k",
            "panic=1",
            "pci=off",
            "console=ttyS0",
            "i8042.dumbkbd",
            "rdinit=/berth-init",
        ] {
            assert!(BOOT_ARGS.split(' ').any(|a| a == arg), "{arg} missing");
        }
    }
}
