//! The drives of a boot, in attach order. Firecracker has no drive serials, so berth-init
//! maps the config disk's `disks` list onto the drives by position (`vdX` order without the
//! config disk; crates/init/src/vm/discover.rs): the drives here are exactly that list, in
//! that order ([`VmDisk::base_disks`], then the layers), and the config disk last. None is
//! a root device: Firecracker would move it to the front.

use std::path::{Path, PathBuf};

use berth_protocol::vm::{VmDisk, CONFIG_DISK_SERIAL, LAYER_DISK_SERIAL_PREFIX};

use super::api::Drive;

/// What a boot attaches and what the config disk tells berth-init about it.
#[derive(Debug, Clone, PartialEq)]
pub struct DrivePlan {
    /// In attach order, the config disk last.
    pub drives: Vec<Drive>,
    /// The config disk's `disks`: `drives` without the config disk, same order.
    pub disks: Vec<VmDisk>,
}

/// The drives for a rootfs image, the box volume, the layers' images (with their targets,
/// in the spec's order) and the config disk.
pub fn plan(
    rootfs: &Path,
    volume: &Path,
    layers: &[(PathBuf, String)],
    config_disk: &Path,
) -> DrivePlan {
    let mut disks = VmDisk::base_disks();
    for (i, (_, target)) in layers.iter().enumerate() {
        disks.push(VmDisk {
            serial: format!("{LAYER_DISK_SERIAL_PREFIX}{i}"),
            target: target.clone(),
            ro: true,
        });
    }
    let images = [rootfs, volume]
        .into_iter()
        .chain(layers.iter().map(|(image, _)| image.as_path()));
    let mut drives: Vec<Drive> = disks
        .iter()
        .zip(images)
        .map(|(disk, image)| drive(&disk.serial, image, disk.ro))
        .collect();
    drives.push(drive(CONFIG_DISK_SERIAL, config_disk, true));
    DrivePlan { drives, disks }
}

/// A drive named after the serial it stands for (`berth-vol` → `berth_vol`: a drive id is
/// alphanumeric and `_`).
fn drive(serial: &str, image: &Path, read_only: bool) -> Drive {
    Drive {
        drive_id: serial.replace('-', "_"),
        path_on_host: image.display().to_string(),
        is_root_device: false,
        is_read_only: read_only,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_protocol::vm::{ROOT_DISK_SERIAL, VOLUME_DISK_SERIAL, VOLUME_TARGET};

    #[test]
    fn drives_follow_the_config_disks_list_with_the_config_disk_last() {
        let layers = vec![
            (PathBuf::from("/img/l0.ext4"), "/opt/harness".to_owned()),
            (PathBuf::from("/img/l1.ext4"), "/opt/tools".to_owned()),
        ];
        let plan = plan(
            Path::new("/img/root.ext4"),
            Path::new("/box/volume.ext4"),
            &layers,
            Path::new("/box/vm/config.img"),
        );
        let mut expected = VmDisk::base_disks();
        assert_eq!(expected[0].serial, ROOT_DISK_SERIAL);
        assert_eq!(expected[1].serial, VOLUME_DISK_SERIAL);
        expected.push(VmDisk {
            serial: "berth-layer-0".into(),
            target: "/opt/harness".into(),
            ro: true,
        });
        expected.push(VmDisk {
            serial: "berth-layer-1".into(),
            target: "/opt/tools".into(),
            ro: true,
        });
        assert_eq!(plan.disks, expected);
        assert_eq!(plan.disks[1].target, VOLUME_TARGET);

        let got: Vec<(&str, &str, bool, bool)> = plan
            .drives
            .iter()
            .map(|d| {
                (
                    d.drive_id.as_str(),
                    d.path_on_host.as_str(),
                    d.is_read_only,
                    d.is_root_device,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("berth_root", "/img/root.ext4", true, false),
                ("berth_vol", "/box/volume.ext4", false, false),
                ("berth_layer_0", "/img/l0.ext4", true, false),
                ("berth_layer_1", "/img/l1.ext4", true, false),
                ("berth_config", "/box/vm/config.img", true, false),
            ]
        );
        // Position i of the disks list is drive i: what berth-init's positional mapping needs.
        for (disk, drive) in plan.disks.iter().zip(&plan.drives) {
            assert_eq!(drive.drive_id, disk.serial.replace('-', "_"));
            assert_eq!(drive.is_read_only, disk.ro);
        }
    }
}
