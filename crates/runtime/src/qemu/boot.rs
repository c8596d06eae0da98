//! Booting one box: disks, config disk, the box's cgroup and the files its jailed
//! processes may use (`crate::vm::jail`), egress listener, the channel bridge, QEMU, then
//! (the VM runtime then waits for berth-init to answer). On error the runtime cleans up:
//! every step leaves its traces where its cleanup looks.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_protocol::vm::{
    VmDisk, CONFIG_DISK_SERIAL, LAYER_DISK_SERIAL_PREFIX, ROOT_DISK_SERIAL, VOLUME_DISK_SERIAL,
};

use super::cmdline::{self, Accel, Disk, Launch};
use super::launch_record::LaunchRecord;
use super::Qemu;
use crate::process::vmm as process;
use crate::vm::cgroup::VmCgroup;
use crate::vm::jail::{self, Access, Jail};
use crate::vm::vmm::Launched;
use crate::vm::{self, config_disk, egress, volume, VmPaths};
use crate::{BoxSpec, RuntimeError};

/// How long the channel bridge may take to create its sockets.
const BRIDGE_DEADLINE: Duration = Duration::from_secs(5);

/// What one launch of a box's QEMU is made of: its disks (in QEMU's order), argv and the
/// guest's RAM.
pub(crate) struct Plan {
    disks: Vec<Disk>,
    targets: Vec<VmDisk>,
    pub(super) args: Vec<OsString>,
    pub(super) memory_mib: u64,
}

impl Qemu {
    /// The disks and QEMU's argv for booting `spec` (the volume created on the first boot).
    pub(super) async fn plan(&self, spec: &BoxSpec, paths: &VmPaths) -> Result<Plan, RuntimeError> {
        let root_image = vm::rootfs_image(spec, "qemu")?;
        vm::prepare_box(spec, paths).await?;

        let mut disks = vec![
            Disk {
                serial: ROOT_DISK_SERIAL.into(),
                path: root_image,
                read_only: true,
            },
            Disk {
                serial: VOLUME_DISK_SERIAL.into(),
                path: paths.volume(),
                read_only: false,
            },
        ];
        let mut targets = VmDisk::base_disks();
        for (i, layer) in spec.layers.iter().enumerate() {
            let serial = format!("{LAYER_DISK_SERIAL_PREFIX}{i}");
            disks.push(Disk {
                serial: serial.clone(),
                path: volume::layer_image(&self.config.data_dir, layer).await?,
                read_only: true,
            });
            targets.push(VmDisk {
                serial,
                target: layer.target.clone(),
                ro: true,
            });
        }
        disks.push(Disk {
            serial: CONFIG_DISK_SERIAL.into(),
            path: paths.config_disk(),
            read_only: true,
        });
        let kernel_cmdline = cmdline::kernel_cmdline(self.tsc_khz);
        let args = cmdline::qemu_args(&Launch {
            accel: self.accel.accel,
            vcpus: cmdline::vcpus(spec.limits.cpus),
            memory_mib: spec.limits.memory_mib,
            kernel: &self.config.kernel,
            initramfs: &self.config.initramfs,
            kernel_cmdline: &kernel_cmdline,
            disks: &disks,
            paths,
        });
        Ok(Plan {
            disks,
            targets,
            args,
            memory_mib: spec.limits.memory_mib,
        })
    }

    /// Writes the config disk, confines and starts the channel bridge and then QEMU with
    /// `plan`, recording what it was launched with (`LaunchRecord`). Returns once QEMU
    /// runs; its guest may not answer yet.
    pub(super) async fn launch(
        &self,
        spec: &BoxSpec,
        paths: &VmPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        let Plan {
            disks,
            targets,
            args,
            memory_mib,
        } = plan;
        let config = config_disk::build(spec, targets)?;
        config_disk::write(&paths.config_disk(), &config)?;

        let owner = vm::vmm_owner(spec.id_map);
        let cgroup = VmCgroup::create(&spec.id, &spec.limits)?;
        let shared = [self.config.kernel.as_path(), &self.config.initramfs];
        hand_over(paths, &disks, owner, &shared)?;
        let jail = |mut files: Vec<(PathBuf, Access)>| -> Jail {
            files.push((paths.run_dir(), Access::ReadWrite));
            files.extend(
                jail::DEVICES
                    .iter()
                    .map(|d| (PathBuf::from(d), Access::Device)),
            );
            Jail {
                root: paths.jail_root(),
                uid: owner.0,
                gid: owner.1,
                paths: files,
                cgroup_procs: cgroup.procs_files(),
                filter: None,
            }
        };

        // Bound before the guest runs: its harness may connect out during boot.
        let egress = egress::bind(&paths.egress_socket(), Some(owner))?;
        let bridge_jail = Jail {
            filter: Some(vm::seccomp::bridge_filter()?),
            ..jail(vec![(self.config.bridge_bin.clone(), Access::Exec)])
        };
        let bridge = self.start_bridge(paths, bridge_jail).await?;

        let mut qemu_files = vec![
            (self.config.qemu_bin.clone(), Access::Exec),
            (self.config.kernel.clone(), Access::ReadOnly),
            (self.config.initramfs.clone(), Access::ReadOnly),
            (paths.console_log(), Access::ReadWrite),
        ];
        qemu_files.extend(disks.iter().map(|d| {
            let access = if d.read_only {
                Access::ReadOnly
            } else {
                Access::ReadWrite
            };
            (d.path.clone(), access)
        }));
        if self.accel.accel == Accel::Kvm {
            qemu_files.push((PathBuf::from("/dev/kvm"), Access::Device));
        }
        let qemu_jail = jail(qemu_files).prepare()?;

        LaunchRecord::of(&args, memory_mib).write(paths)?;
        let console_from = crate::vm::exit::begin_boot(paths)?;
        let qemu = process::spawn_recorded(
            &self.config.qemu_bin,
            &args,
            &paths.qemu_log(),
            &paths.qemu_pid(),
            Some(qemu_jail.into_pre_exec()),
        )?;
        process::supervise(qemu, Some(bridge), &paths.vmm_exit());
        Ok(Launched {
            pid: qemu,
            egress,
            console_from,
        })
    }

    /// Starts the channel bridge (`berth-init bridge`) in `jail` and waits for both its
    /// sockets: QEMU's end of the guest's serial port, and the hybrid vsock socket the host
    /// connects to.
    async fn start_bridge(&self, paths: &VmPaths, jail: Jail) -> Result<i32, RuntimeError> {
        let bin = &self.config.bridge_bin;
        let args: Vec<OsString> = vec![
            "bridge".into(),
            "--serial".into(),
            paths.serial_socket().into(),
            "--uds-path".into(),
            paths.vsock_socket().into(),
        ];
        let pid = process::spawn_recorded(
            bin,
            &args,
            &paths.bridge_log(),
            &paths.bridge_pid(),
            Some(jail.prepare()?.into_pre_exec()),
        )?;
        crate::process::reap_on_exit(pid);
        for socket in [paths.serial_socket(), paths.vsock_socket()] {
            if let Err(died) = process::wait_for_path(&socket, pid, BRIDGE_DEADLINE).await {
                return Err(vm::socket_missing(
                    bin,
                    died,
                    &socket.display(),
                    BRIDGE_DEADLINE,
                    &paths.bridge_log(),
                ));
            }
        }
        Ok(pid)
    }
}

/// Makes this boot's own files the VMM uid's (`owner`) for the run: the sockets dir
/// (0700), the writable disks (0600), the config disk (0400), the console log. `clean`
/// gives them back to root. The shared read-only files (`shared` and the read-only disks)
/// keep their owner and must already be readable by the uid.
fn hand_over(
    paths: &VmPaths,
    disks: &[Disk],
    owner: (u32, u32),
    shared: &[&Path],
) -> Result<(), RuntimeError> {
    let give = |path: &Path, mode: u32| -> Result<(), RuntimeError> {
        std::os::unix::fs::chown(path, Some(owner.0), Some(owner.1))
            .map_err(process::io("chown for the VMM", path))?;
        crate::fs::set_mode(path, mode)
    };
    vm::make_private_dir(&paths.run_dir())?;
    give(&paths.run_dir(), 0o700)?;
    vm::make_private_dir(&paths.jail_root())?;
    process::open_log(&paths.console_log())?;
    give(&paths.console_log(), 0o600)?;
    for disk in disks {
        if disk.path == paths.config_disk() {
            give(&disk.path, 0o400)?;
        } else if !disk.read_only {
            give(&disk.path, 0o600)?;
        }
    }
    let read_only = disks
        .iter()
        .filter(|d| d.read_only && d.path != paths.config_disk());
    for path in shared
        .iter()
        .copied()
        .chain(read_only.map(|d| d.path.as_path()))
    {
        vm::check_readable_by(path, owner)?;
    }
    Ok(())
}

pub(super) fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    if joined.is_empty() {
        "it printed nothing".into()
    } else {
        joined
    }
}
