//! The parts of Firecracker's REST API berth uses, as hand-written serde types shaped
//! exactly like Firecracker's published swagger (`src/firecracker/swagger/firecracker.yaml`):
//! field names, required fields and enum spellings. Optional fields berth never sets are
//! left out rather than sent as `null` (Firecracker rejects unknown and mistyped fields).
//!
//! [`ApiRequest`] pairs each body with its method and path; `client.rs` sends them.

use http::Method;
use serde::{Deserialize, Serialize};

/// `PUT /machine-config`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineConfig {
    /// 1 to 32.
    pub vcpu_count: u32,
    pub mem_size_mib: u64,
    /// Simultaneous multithreading: off, so a box gets whole cores' worth of vCPUs.
    pub smt: bool,
}

/// `PUT /boot-source`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSource {
    /// An uncompressed ELF `vmlinux` on x86_64 (Firecracker does not boot a bzImage).
    pub kernel_image_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_args: Option<String>,
}

/// `PUT /drives/{drive_id}`. Firecracker gives a drive no serial: berth-init maps them by
/// the order they were attached (`drives.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drive {
    pub drive_id: String,
    pub path_on_host: String,
    /// Always `false`: berth boots from the initramfs, and a root device would be moved to
    /// the front of the attach order.
    pub is_root_device: bool,
    pub is_read_only: bool,
}

/// `PUT /vsock`: a hybrid vsock device. The host connects to `uds_path` and sends
/// `CONNECT <port>\n`; the guest's connections to host port P arrive on `<uds_path>_P`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vsock {
    /// At least 3. Each VM has its own device and socket, so every VM can use the same.
    pub guest_cid: u32,
    pub uds_path: String,
}

/// `PUT /actions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceAction {
    pub action_type: ActionType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActionType {
    FlushMetrics,
    InstanceStart,
    /// Ctrl-Alt-Del through the emulated i8042: berth-init turns it into a graceful stop.
    SendCtrlAltDel,
}

/// `PATCH /vm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmStateChange {
    pub state: VmStateRequest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VmStateRequest {
    Paused,
    Resumed,
}

/// `PUT /snapshot/create` (the VM must be paused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotCreate {
    pub snapshot_path: String,
    pub mem_file_path: String,
    pub snapshot_type: SnapshotType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotType {
    Full,
    Diff,
}

/// `PUT /snapshot/load` (on a fresh Firecracker, before any other configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotLoad {
    pub snapshot_path: String,
    pub mem_backend: MemBackend,
    pub enable_diff_snapshots: bool,
    pub resume_vm: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemBackend {
    pub backend_path: String,
    pub backend_type: MemBackendType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemBackendType {
    File,
    Uffd,
}

/// `GET /`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub app_name: String,
    pub id: String,
    pub state: InstanceState,
    pub vmm_version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceState {
    #[serde(rename = "Not started")]
    NotStarted,
    Running,
    Paused,
}

/// Firecracker's error body (any 4xx/5xx).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub fault_message: String,
}

/// One API call: method, path and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub method: Method,
    pub path: String,
    pub body: Option<serde_json::Value>,
}

impl ApiRequest {
    fn with_body(method: Method, path: String, body: &impl Serialize) -> ApiRequest {
        ApiRequest {
            method,
            path,
            // Serialising these plain structs cannot fail (no maps with non-string keys).
            body: Some(serde_json::to_value(body).unwrap_or(serde_json::Value::Null)),
        }
    }

    pub fn machine_config(config: &MachineConfig) -> ApiRequest {
        Self::with_body(Method::PUT, "/machine-config".into(), config)
    }

    pub fn boot_source(source: &BootSource) -> ApiRequest {
        Self::with_body(Method::PUT, "/boot-source".into(), source)
    }

    pub fn drive(drive: &Drive) -> ApiRequest {
        Self::with_body(Method::PUT, format!("/drives/{}", drive.drive_id), drive)
    }

    pub fn vsock(vsock: &Vsock) -> ApiRequest {
        Self::with_body(Method::PUT, "/vsock".into(), vsock)
    }

    pub fn action(action_type: ActionType) -> ApiRequest {
        Self::with_body(
            Method::PUT,
            "/actions".into(),
            &InstanceAction { action_type },
        )
    }

    pub fn vm_state(state: VmStateRequest) -> ApiRequest {
        Self::with_body(Method::PATCH, "/vm".into(), &VmStateChange { state })
    }

    pub fn snapshot_create(params: &SnapshotCreate) -> ApiRequest {
        Self::with_body(Method::PUT, "/snapshot/create".into(), params)
    }

    pub fn snapshot_load(params: &SnapshotLoad) -> ApiRequest {
        Self::with_body(Method::PUT, "/snapshot/load".into(), params)
    }

    pub fn instance_info() -> ApiRequest {
        ApiRequest {
            method: Method::GET,
            path: "/".into(),
            body: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(request: &ApiRequest) -> &serde_json::Value {
        request.body.as_ref().expect("a body")
    }

    // The expected JSON below is written from Firecracker's swagger definitions
    // (MachineConfiguration, BootSource, Drive, Vsock, InstanceActionInfo, Vm,
    // SnapshotCreateParams, SnapshotLoadParams, InstanceInfo, Error).

    #[test]
    fn machine_config_and_boot_source() {
        let r = ApiRequest::machine_config(&MachineConfig {
            vcpu_count: 2,
            mem_size_mib: 512,
            smt: false,
        });
        assert_eq!(
            (r.method.clone(), r.path.as_str()),
            (Method::PUT, "/machine-config")
        );
        assert_eq!(
            body(&r),
            &json!({"vcpu_count": 2, "mem_size_mib": 512, "smt": false})
        );
        let r = ApiRequest::boot_source(&BootSource {
            kernel_image_path: "/k/vmlinux".into(),
            initrd_path: Some("/k/initrd.img".into()),
            boot_args: Some("console=ttyS0".into()),
        });
        assert_eq!(
            (r.method.clone(), r.path.as_str()),
            (Method::PUT, "/boot-source")
        );
        assert_eq!(
            body(&r),
            &json!({"kernel_image_path": "/k/vmlinux", "initrd_path": "/k/initrd.img", "boot_args": "console=ttyS0"})
        );
        let bare = ApiRequest::boot_source(&BootSource {
            kernel_image_path: "/k/vmlinux".into(),
            initrd_path: None,
            boot_args: None,
        });
        assert_eq!(body(&bare), &json!({"kernel_image_path": "/k/vmlinux"}));
    }

    #[test]
    fn drive_vsock_actions_and_vm_state() {
        let r = ApiRequest::drive(&Drive {
            drive_id: "vol".into(),
            path_on_host: "/d/volume.ext4".into(),
            is_root_device: false,
            is_read_only: false,
        });
        assert_eq!(
            (r.method.clone(), r.path.as_str()),
            (Method::PUT, "/drives/vol")
        );
        assert_eq!(
            body(&r),
            &json!({"drive_id": "vol", "path_on_host": "/d/volume.ext4", "is_root_device": false, "is_read_only": false})
        );
        let r = ApiRequest::vsock(&Vsock {
            guest_cid: 3,
            uds_path: "/d/vsock.sock".into(),
        });
        assert_eq!((r.method.clone(), r.path.as_str()), (Method::PUT, "/vsock"));
        assert_eq!(
            body(&r),
            &json!({"guest_cid": 3, "uds_path": "/d/vsock.sock"})
        );
        for (action, spelled) in [
            (ActionType::InstanceStart, "InstanceStart"),
            (ActionType::SendCtrlAltDel, "SendCtrlAltDel"),
            (ActionType::FlushMetrics, "FlushMetrics"),
        ] {
            let r = ApiRequest::action(action);
            assert_eq!(
                (r.method.clone(), r.path.as_str()),
                (Method::PUT, "/actions")
            );
            assert_eq!(body(&r), &json!({"action_type": spelled}));
        }
        for (state, spelled) in [
            (VmStateRequest::Paused, "Paused"),
            (VmStateRequest::Resumed, "Resumed"),
        ] {
            let r = ApiRequest::vm_state(state);
            assert_eq!((r.method.clone(), r.path.as_str()), (Method::PATCH, "/vm"));
            assert_eq!(body(&r), &json!({"state": spelled}));
        }
    }

    #[test]
    fn snapshots() {
        let r = ApiRequest::snapshot_create(&SnapshotCreate {
            snapshot_path: "/s/vm.snap".into(),
            mem_file_path: "/s/vm.mem".into(),
            snapshot_type: SnapshotType::Full,
        });
        assert_eq!(
            (r.method.clone(), r.path.as_str()),
            (Method::PUT, "/snapshot/create")
        );
        assert_eq!(
            body(&r),
            &json!({"snapshot_path": "/s/vm.snap", "mem_file_path": "/s/vm.mem", "snapshot_type": "Full"})
        );
        let r = ApiRequest::snapshot_load(&SnapshotLoad {
            snapshot_path: "/s/vm.snap".into(),
            mem_backend: MemBackend {
                backend_path: "/s/vm.mem".into(),
                backend_type: MemBackendType::File,
            },
            enable_diff_snapshots: false,
            resume_vm: true,
        });
        assert_eq!(
            (r.method.clone(), r.path.as_str()),
            (Method::PUT, "/snapshot/load")
        );
        assert_eq!(
            body(&r),
            &json!({"snapshot_path": "/s/vm.snap", "mem_backend": {"backend_path": "/s/vm.mem", "backend_type": "File"}, "enable_diff_snapshots": false, "resume_vm": true})
        );
        assert_eq!(
            serde_json::to_value(SnapshotType::Diff).unwrap(),
            json!("Diff")
        );
        assert_eq!(
            serde_json::to_value(MemBackendType::Uffd).unwrap(),
            json!("Uffd")
        );
    }

    #[test]
    fn instance_info_and_faults_decode() {
        let r = ApiRequest::instance_info();
        assert_eq!(
            (r.method.clone(), r.path.as_str(), &r.body),
            (Method::GET, "/", &None)
        );
        for (spelled, state) in [
            ("Not started", InstanceState::NotStarted),
            ("Running", InstanceState::Running),
            ("Paused", InstanceState::Paused),
        ] {
            let info: InstanceInfo = serde_json::from_value(json!({
                "app_name": "Firecracker", "id": "bx-a", "state": spelled, "vmm_version": "1.7.0"
            }))
            .unwrap();
            assert_eq!(info.state, state);
        }
        assert!(serde_json::from_value::<InstanceInfo>(json!({
            "app_name": "Firecracker", "id": "bx-a", "state": "Halted", "vmm_version": "1.7.0"
        }))
        .is_err());
        let fault: Fault =
            serde_json::from_value(json!({"fault_message": "Invalid kernel"})).unwrap();
        assert_eq!(fault.fault_message, "Invalid kernel");
    }
}
