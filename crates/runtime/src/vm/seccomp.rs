//! The seccomp filter of the `qemu` channel bridge (`berth-init bridge`; QEMU installs its
//! own with `-sandbox`): the table [`berth_confine::tables::VMM_BRIDGE`], whose doc says
//! what it refuses and why a deny list. Built for the target architecture; x32 numbers are
//! refused the same way.

use berth_confine::{tables::VMM_BRIDGE, Filter};

use crate::RuntimeError;

/// The compiled filter.
pub(crate) fn bridge_filter() -> Result<Filter, RuntimeError> {
    Filter::compile(&VMM_BRIDGE).map_err(|e| RuntimeError::Io {
        action: "build the seccomp filter of",
        path: "the channel bridge".into(),
        source: std::io::Error::other(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A subverted bridge: under the filter, an inet socket and a mount are refused with
    /// `EPERM`, while the Unix sockets it works with still open.
    #[test]
    fn the_filter_refuses_inet_sockets_and_mounts_but_not_unix_sockets() {
        let Ok(python) = which("python3") else {
            berth_testkit::skip("python3", "no python3 to try the filter with");
            return;
        };
        let filter = bridge_filter().unwrap();
        // The mount targets a path that does not exist: without the filter it fails with
        // ENOENT (and mounts nothing), not EPERM.
        let script = r#"
import ctypes, errno, os, socket
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
    try:
        socket.socket(family, socket.SOCK_RAW if family == socket.AF_NETLINK else socket.SOCK_STREAM)
        raise SystemExit("family %d opened" % family)
    except PermissionError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"none", b"/berth-no-such-dir", b"tmpfs", 0, None) == 0 or ctypes.get_errno() != errno.EPERM:
    raise SystemExit("mount not refused with EPERM: %d" % ctypes.get_errno())
print("refused")
"#;
        let mut command = std::process::Command::new(python);
        command.args(["-c", script]);
        // SAFETY: the hook sets no_new_privs and installs the filter: system calls on
        // memory it owns.
        unsafe { command.pre_exec(move || Ok(filter.install()?)) };
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "refused");
    }

    fn which(name: &str) -> Result<std::path::PathBuf, ()> {
        crate::vm::find_program("BERTH_TEST_NO_SUCH_VAR", name).ok_or(())
    }
}
