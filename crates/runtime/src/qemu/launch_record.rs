//! What a boot's QEMU was launched with, recorded as it launches (`<vm>/launch.json`): the
//! argv as a snapshot compares it and the guest's RAM. A save reads them here, never from
//! the running QEMU's `/proc` command line, which QEMU itself can rewrite.

use std::ffi::OsString;

use serde::{Deserialize, Serialize};

use crate::error::io;
use crate::vm::VmPaths;
use crate::RuntimeError;

/// What a boot's QEMU was launched with, written as it launches: the comparable argv and
/// the guest's RAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LaunchRecord {
    pub(super) args: Vec<String>,
    pub(super) memory_mib: u64,
}

impl LaunchRecord {
    pub(super) fn of(args: &[OsString], memory_mib: u64) -> LaunchRecord {
        LaunchRecord {
            args: comparable_args(args.iter().cloned()),
            memory_mib,
        }
    }

    pub(super) fn write(&self, paths: &VmPaths) -> Result<(), RuntimeError> {
        let path = paths.launch_record();
        let bytes = serde_json::to_vec(self).expect("a launch record serialises");
        std::fs::write(&path, bytes).map_err(io("write", &path))
    }

    pub(super) fn read(paths: &VmPaths) -> Result<LaunchRecord, RuntimeError> {
        let path = paths.launch_record();
        let bytes = std::fs::read(&path).map_err(io("read the boot's launch record", &path))?;
        serde_json::from_slice(&bytes).map_err(|e| RuntimeError::Io {
            action: "parse the boot's launch record",
            path,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }
}

/// An argv as a snapshot compares it: without the kernel command line (it only mattered at
/// boot, and it carries the host's measured TSC rate, which may differ between daemon
/// runs) and without a restored QEMU's `-incoming`.
pub(super) fn comparable_args(args: impl IntoIterator<Item = OsString>) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-append" => {
                args.next();
                out.extend([arg, "<kernel command line>".into()]);
            }
            // A restored QEMU's own: not part of what the guest saw.
            "-incoming" => {
                args.next();
            }
            _ => out.push(arg),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_record_keeps_the_guests_ram_and_the_comparable_argv() {
        let dir = tempfile::tempdir().unwrap();
        let paths = VmPaths::at(dir.path());
        std::fs::create_dir_all(paths.vm_dir()).unwrap();
        let args = ["-m", "256M", "-append", "tsc_early_khz=1", "-smp", "1"].map(OsString::from);
        LaunchRecord::of(&args, 256).write(&paths).unwrap();
        let read = LaunchRecord::read(&paths).unwrap();
        assert_eq!(read.memory_mib, 256);
        assert_eq!(
            read.args,
            [
                "-m",
                "256M",
                "-append",
                "<kernel command line>",
                "-smp",
                "1"
            ]
        );
        assert!(paths.boot_files().contains(&paths.launch_record()));
        std::fs::write(paths.launch_record(), b"{").unwrap();
        assert!(LaunchRecord::read(&paths).is_err());
    }
}
