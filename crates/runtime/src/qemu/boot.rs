//! Booting one box: disks, config disk, CID, egress listener, vhost-device-vsock, QEMU,
//! then waiting for berth-init to answer. On error the caller cleans up
//! (`QemuRuntime::clean`): every step leaves its traces where `clean` looks.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_protocol::vm::{
    VmDisk, CONFIG_DISK_SERIAL, LAYER_DISK_SERIAL_PREFIX, ROOT_DISK_SERIAL, VOLUME_DISK_SERIAL,
};

use super::cmdline::{self, Disk, Launch};
use super::paths::VmPaths;
use super::{config_disk, egress, process, volume, QemuRuntime};
use crate::{error_chain, Booted, BoxSpec, GuestClient, Rootfs, RuntimeError};

/// How long vhost-device-vsock may take to create its sockets.
const VHOST_DEADLINE: Duration = Duration::from_secs(5);
/// The longest one `info` attempt may wait (never past the boot deadline). Generous: a
/// connection vhost-device-vsock has forwarded to the guest and that the host drops
/// before the guest answers can wedge the backend (see `QemuRuntime::pause`), so the host
/// waits for a slow guest rather than giving up on it early.
const INFO_ATTEMPT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

impl QemuRuntime {
    pub(super) async fn boot(
        &self,
        spec: &BoxSpec,
        paths: &VmPaths,
    ) -> Result<Booted, RuntimeError> {
        let root_image = self.rootfs_image(spec)?;
        crate::layer::check_layers(&spec.layers).map_err(|(i, reason)| {
            let layer = &spec.layers[i];
            RuntimeError::InvalidSpec {
                what: format!("layer {i} ({} -> {})", layer.source.display(), layer.target),
                reason,
            }
        })?;
        make_private_dir(paths.box_dir())?;
        make_private_dir(&paths.vm_dir())?;
        egress::set_mode(&paths.vm_dir(), 0o700)?;
        volume::ensure(&paths.volume(), spec.disk_mib).await?;

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
        let config = config_disk::build(spec, targets)?;
        config_disk::write(&paths.config_disk(), &config)?;
        disks.push(Disk {
            serial: CONFIG_DISK_SERIAL.into(),
            path: paths.config_disk(),
            read_only: true,
        });

        let cid = self.cids.allocate().ok_or_else(|| RuntimeError::Backend {
            program: "qemu".into(),
            operation: "allocate a guest CID",
            status: "every CID is in use".into(),
            stderr: String::new(),
        })?;
        if let Err(e) = std::fs::write(paths.cid_file(), format!("{cid}\n")) {
            self.cids.release(cid);
            return Err(process::io("write", &paths.cid_file())(e));
        }

        // Bound before the guest runs: its harness may connect out during boot.
        let egress = egress::bind(paths)?;
        let vhost = self.start_vhost(paths, cid).await?;

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
        let started = Instant::now();
        let qemu = process::spawn_recorded(
            &self.config.qemu_bin,
            &args,
            &paths.qemu_log(),
            &paths.qemu_pid(),
        )?;
        process::supervise(qemu, Some(vhost));

        let client = self.channel_for(spec, paths);
        self.wait_ready(spec, paths, &client, qemu).await?;
        tracing::info!(box_id = %spec.id, accel = self.accel.accel.as_str(), boot_ms = started.elapsed().as_millis() as u64, "VM ready");
        Ok(Booted { client, egress })
    }

    fn rootfs_image(&self, spec: &BoxSpec) -> Result<PathBuf, RuntimeError> {
        match &spec.rootfs {
            Rootfs::Image(path) => Ok(path.clone()),
            Rootfs::Host => Err(RuntimeError::Unsupported {
                backend: "qemu",
                operation: "the host rootfs (a VM boots a template's rootfs image)",
            }),
        }
    }

    fn channel_for(&self, spec: &BoxSpec, paths: &VmPaths) -> GuestClient {
        GuestClient::new(
            crate::GuestAddr::HybridVsock {
                path: paths.vsock_socket(),
                port: berth_protocol::guest::VSOCK_PORT,
            },
            spec.boot_token.clone(),
        )
    }

    /// Starts vhost-device-vsock for guest `cid` and waits for both its sockets.
    async fn start_vhost(&self, paths: &VmPaths, cid: u32) -> Result<i32, RuntimeError> {
        let bin = &self.config.vhost_vsock_bin;
        // Separate flags, not `--vm k=v,…`: a comma in the data dir cannot split them.
        let args: Vec<OsString> = vec![
            "--guest-cid".into(),
            cid.to_string().into(),
            "--socket".into(),
            paths.vhost_user_socket().into(),
            "--uds-path".into(),
            paths.vsock_socket().into(),
        ];
        let pid = process::spawn_recorded(bin, &args, &paths.vhost_log(), &paths.vhost_pid())?;
        crate::process::reap_on_exit(pid);
        for socket in [paths.vhost_user_socket(), paths.vsock_socket()] {
            if let Err(died) = process::wait_for_path(&socket, pid, VHOST_DEADLINE).await {
                return Err(RuntimeError::Backend {
                    program: bin.display().to_string(),
                    operation: "start",
                    status: if died {
                        "exited".into()
                    } else {
                        format!(
                            "no {} after {} ms",
                            socket.display(),
                            VHOST_DEADLINE.as_millis()
                        )
                    },
                    stderr: process::log_tail(&paths.vhost_log()),
                });
            }
        }
        Ok(pid)
    }

    /// Calls `info` until berth-init answers, QEMU exits, or the boot deadline passes;
    /// the error carries the console's last lines (and QEMU's own complaints).
    async fn wait_ready(
        &self,
        spec: &BoxSpec,
        paths: &VmPaths,
        client: &GuestClient,
        qemu: i32,
    ) -> Result<(), RuntimeError> {
        let deadline = self.boot_deadline();
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        loop {
            let attempt = INFO_ATTEMPT.min(deadline.saturating_sub(started.elapsed()));
            let last = match tokio::time::timeout(attempt, client.info()).await {
                Ok(Ok(_)) => return Ok(()),
                // A version mismatch will not fix itself.
                Ok(Err(e @ crate::GuestError::Version { .. })) => return Err(e.into()),
                Ok(Err(e)) => error_chain(&e),
                Err(_) => format!("no answer within {} ms", attempt.as_millis()),
            };
            let exited = !crate::process::pid_alive(qemu);
            if exited || started.elapsed() >= deadline {
                let why = if exited {
                    format!(
                        "QEMU exited ({})",
                        one_line(&process::log_tail(&paths.qemu_log()))
                    )
                } else {
                    format!("the {} ms boot deadline passed", deadline.as_millis())
                };
                return Err(RuntimeError::NotReady {
                    id: spec.id.to_string(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    last_error: Some(format!(
                        "{why}; the guest channel: {last}; console log ({}):\n{}",
                        paths.console_log().display(),
                        process::console_tail(&paths.console_log())
                    )),
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

fn one_line(text: &str) -> String {
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

/// Creates `dir` 0700 if missing (the VM dir holds the boot token and control sockets).
fn make_private_dir(dir: &std::path::Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(process::io("create", dir)(e))
        }
        _ => Ok(()),
    }
}
