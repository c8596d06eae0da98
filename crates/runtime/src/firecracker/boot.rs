//! Booting one box: disks and config disk, under the jailer their staging into its chroot,
//! the egress listener, Firecracker (or the jailer that execs it), then the API calls that
//! configure and start the VM (the VM runtime then waits for berth-init to answer). On
//! error the runtime cleans up (undoing the jail too).

use std::path::PathBuf;
use std::time::Duration;

use super::api::{ActionType, ApiRequest, BootSource, Drive, MachineConfig, Vsock};
use super::client::{ApiClient, ApiError};
use super::cmdline::{self, BOOT_ARGS};
use super::jail::{self, JailPlan};
use super::paths::FcPaths;
use super::{api_failed, drives, Firecracker};
use crate::process::vmm as process;
use crate::vm::vmm::{Launched, Vmm};
use crate::vm::{config_disk, volume};
use crate::vm::{prepare_box, rootfs_image};
use crate::{BoxSpec, RuntimeError};
use berth_protocol::vm::VmConfig;

/// The guest CID. Every VM has its own vsock device behind its own socket, so the CID only
/// has to be valid (≥ 3), not unique on the host.
pub const GUEST_CID: u32 = 3;
/// Firecracker's vCPU limit.
const MAX_VCPUS: u32 = 32;
/// How long Firecracker may take to create its API socket.
const API_SOCKET_DEADLINE: Duration = Duration::from_secs(5);

/// Everything `PUT` before `InstanceStart`.
#[derive(Debug, Clone)]
pub struct VmSetup {
    pub machine: MachineConfig,
    pub boot_source: BootSource,
    /// In attach order (`drives.rs`).
    pub drives: Vec<Drive>,
    pub vsock: Vsock,
}

/// The API calls that configure and start a VM, in the order they are sent: machine
/// config, boot source, the drives in attach order, vsock, `InstanceStart`.
pub fn boot_requests(setup: &VmSetup) -> Vec<ApiRequest> {
    let mut requests = vec![
        ApiRequest::machine_config(&setup.machine),
        ApiRequest::boot_source(&setup.boot_source),
    ];
    requests.extend(setup.drives.iter().map(ApiRequest::drive));
    requests.push(ApiRequest::vsock(&setup.vsock));
    requests.push(ApiRequest::action(ActionType::InstanceStart));
    requests
}

/// Sends [`boot_requests`] one by one, stopping at the first refusal.
pub async fn configure_and_start(api: &ApiClient, setup: &VmSetup) -> Result<(), ApiError> {
    for request in boot_requests(setup) {
        api.call(&request).await?;
    }
    Ok(())
}

/// vCPUs for a `cpus` limit: rounded up, 1 to 32.
pub fn vcpus(cpus: f64) -> u32 {
    if cpus.is_finite() && cpus > 1.0 {
        cpus.ceil().min(MAX_VCPUS as f64) as u32
    } else {
        1
    }
}

/// What one launch of a box's Firecracker is made of: the VM's configuration (in the
/// paths Firecracker sees), the config disk, and under the jailer what it stages.
pub(crate) struct Plan {
    setup: VmSetup,
    config: VmConfig,
    jail: Option<JailPlan>,
}

impl Firecracker {
    /// The drives, config disk and jail of a boot: the same for a cold boot and a restore,
    /// so a snapshot finds every drive where its boot had it.
    pub(super) async fn plan(&self, spec: &BoxSpec, paths: &FcPaths) -> Result<Plan, RuntimeError> {
        let root_image = rootfs_image(spec, "firecracker")?;
        let vm = paths.vm();
        prepare_box(spec, vm).await?;
        let mut layers: Vec<(PathBuf, String)> = Vec::with_capacity(spec.layers.len());
        for layer in &spec.layers {
            let image = volume::layer_image(&self.config.data_dir, layer).await?;
            layers.push((image, layer.target.clone()));
        }
        let mut source = BootSource {
            kernel_image_path: self.config.kernel.display().to_string(),
            initrd_path: Some(self.config.initramfs.display().to_string()),
            boot_args: Some(BOOT_ARGS.into()),
        };
        let mut plan = drives::plan(&root_image, &vm.volume(), &layers, &vm.config_disk());
        let jail = self.config.jailer.as_ref().map(|jailer| {
            let layer_images: Vec<PathBuf> =
                layers.iter().map(|(image, _)| image.clone()).collect();
            let jail = jail::plan(
                &jailer.chroot(&self.config.firecracker_bin, &spec.id),
                jail::BootFiles {
                    kernel: &self.config.kernel,
                    initramfs: &self.config.initramfs,
                    rootfs: &root_image,
                    volume: &vm.volume(),
                    layers: &layer_images,
                    config_disk: &vm.config_disk(),
                    sockets_dir: &paths.sockets_dir(),
                },
            );
            // Firecracker is given the paths it sees in its chroot.
            source.kernel_image_path = JailPlan::api_path(&jail.kernel);
            source.initrd_path = Some(JailPlan::api_path(&jail.initramfs));
            let inside_layers: Vec<(PathBuf, String)> = jail
                .layers
                .iter()
                .zip(&layers)
                .map(|(staged, (_, target))| (staged.inside.clone(), target.clone()))
                .collect();
            plan = drives::plan(
                &jail.rootfs.inside,
                &jail.volume.inside,
                &inside_layers,
                &jail.config_disk.inside,
            );
            jail
        });
        let config = config_disk::build(spec, plan.disks)?;
        let setup = VmSetup {
            machine: MachineConfig {
                vcpu_count: vcpus(spec.limits.cpus),
                mem_size_mib: spec.limits.memory_mib,
                smt: false,
            },
            boot_source: source,
            drives: plan.drives,
            vsock: Vsock {
                guest_cid: GUEST_CID,
                // The sockets dir has the same path inside the chroot.
                uds_path: paths.vsock_socket().display().to_string(),
            },
        };
        Ok(Plan {
            setup,
            config,
            jail,
        })
    }

    /// `Vmm::launch`: Firecracker spawned, then configured and started through its API.
    pub(super) async fn launch(
        &self,
        spec: &BoxSpec,
        paths: &FcPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        let (launched, api, setup) = self.spawn(spec, paths, plan).await?;
        configure_and_start(&api, &setup)
            .await
            .map_err(|e| api_failed("boot", &e, &paths.vm().console_log()))?;
        Ok(launched)
    }

    /// Everything of a boot up to a Firecracker listening on its API, not yet given a VM:
    /// the config disk, the jail, the egress listener, the process. Returns its API and
    /// the VM a cold boot configures.
    pub(super) async fn spawn(
        &self,
        spec: &BoxSpec,
        paths: &FcPaths,
        plan: Plan,
    ) -> Result<(Launched, ApiClient, VmSetup), RuntimeError> {
        let vm = paths.vm();
        config_disk::write(&vm.config_disk(), &plan.config)?;
        let owner = crate::vm::vmm_owner(spec.id_map);
        let jailer = self.config.jailer.as_ref().zip(plan.jail.as_ref());
        if let Some((_, jail)) = jailer {
            // A crashed boot's chroot would make the jailer reuse stale files.
            self.unjail(&spec.id, paths)?;
            jail::stage(jail, owner.0, owner.1)?;
        }

        // Bound before the guest runs: its harness may connect out during boot.
        let egress = self.bind_egress(paths, spec.id_map)?;
        // Firecracker refuses to bind over an existing socket.
        for stale in [paths.api_socket(), paths.vsock_socket()] {
            crate::fs::remove_if_exists(&stale)?;
        }
        let console_from = crate::vm::exit::begin_boot(vm)?;
        let (bin, args) = match jailer {
            None => (
                &self.config.firecracker_bin,
                cmdline::firecracker_args(&paths.api_socket(), &spec.id),
            ),
            Some((jailer, _)) => (
                &jailer.jailer_bin,
                jailer.args(
                    &self.config.firecracker_bin,
                    &spec.id,
                    &paths.api_socket(),
                    owner,
                ),
            ),
        };
        let pid = process::spawn_recorded(bin, &args, &vm.console_log(), &paths.pid_file(), None)?;
        process::supervise(pid, None, &vm.vmm_exit());
        let api = ApiClient::new(&paths.api_socket());
        if let Err(died) = api.wait_listening(pid, API_SOCKET_DEADLINE).await {
            return Err(crate::vm::socket_missing(
                bin,
                died,
                &"API socket",
                API_SOCKET_DEADLINE,
                &vm.console_log(),
            ));
        }
        let launched = Launched {
            pid,
            egress,
            console_from,
        };
        Ok((launched, api, plan.setup))
    }
}

#[cfg(test)]
mod tests {
    use super::super::api::InstanceState;
    use super::super::fake::FakeApi;
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn setup() -> VmSetup {
        let plan = drives::plan(
            Path::new("/img/root.ext4"),
            Path::new("/box/volume.ext4"),
            &[(PathBuf::from("/img/l0.ext4"), "/opt/h".into())],
            Path::new("/box/vm/config.img"),
        );
        VmSetup {
            machine: MachineConfig {
                vcpu_count: vcpus(1.5),
                mem_size_mib: 256,
                smt: false,
            },
            boot_source: BootSource {
                kernel_image_path: "/k/vmlinux".into(),
                initrd_path: Some("/k/initrd".into()),
                boot_args: Some(BOOT_ARGS.into()),
            },
            drives: plan.drives,
            vsock: Vsock {
                guest_cid: GUEST_CID,
                uds_path: "/box/vm/vsock.sock".into(),
            },
        }
    }

    #[tokio::test]
    async fn start_sends_the_configuration_in_order_then_instance_start() {
        let fake = FakeApi::start().await;
        configure_and_start(&ApiClient::new(fake.socket()), &setup())
            .await
            .unwrap();
        let seen: Vec<(String, String)> = fake
            .requests()
            .iter()
            .map(|r| (r.method.to_string(), r.path.clone()))
            .collect();
        let expected: Vec<(String, String)> = [
            ("PUT", "/machine-config"),
            ("PUT", "/boot-source"),
            ("PUT", "/drives/berth_root"),
            ("PUT", "/drives/berth_vol"),
            ("PUT", "/drives/berth_layer_0"),
            ("PUT", "/drives/berth_config"),
            ("PUT", "/vsock"),
            ("PUT", "/actions"),
        ]
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
        .to_vec();
        assert_eq!(seen, expected);
        let requests = fake.requests();
        assert_eq!(
            requests[0].body,
            Some(json!({"vcpu_count": 2, "mem_size_mib": 256, "smt": false}))
        );
        assert_eq!(
            requests[6].body,
            Some(json!({"guest_cid": 3, "uds_path": "/box/vm/vsock.sock"}))
        );
        assert_eq!(
            requests[7].body,
            Some(json!({"action_type": "InstanceStart"}))
        );
        assert_eq!(fake.state(), InstanceState::Running);
    }

    #[tokio::test]
    async fn a_refused_drive_stops_the_sequence_before_the_vm_starts() {
        let fake = FakeApi::start().await;
        fake.fail(
            "/drives/berth_vol",
            400,
            r#"{"fault_message": "Unable to open the block device backing file"}"#,
        );
        let err = configure_and_start(&ApiClient::new(fake.socket()), &setup())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ApiError::Fault { status: 400, path, .. } if path == "/drives/berth_vol"),
            "{err:?}"
        );
        assert!(err.to_string().contains("Unable to open the block device"));
        assert_eq!(fake.requests().len(), 4);
        assert_eq!(fake.state(), InstanceState::NotStarted);
    }

    #[test]
    fn vcpus_round_up_within_firecrackers_limit() {
        assert_eq!(vcpus(0.5), 1);
        assert_eq!(vcpus(f64::NAN), 1);
        assert_eq!(vcpus(2.1), 3);
        assert_eq!(vcpus(100.0), 32);
    }
}
