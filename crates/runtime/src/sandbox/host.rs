//! What the backend needs from the host: the OCI runtime binary, traversable data dirs,
//! the console log.

use std::path::{Path, PathBuf};

use super::ready;
use crate::RuntimeError;

/// A console log past this is truncated at the next start.
const CONSOLE_MAX_BYTES: u64 = 8 << 20;

/// A name in `PATH` or a path to an executable file.
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return path.is_file().then_some(path);
    }
    let path_var = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path_var)
        // root's PATH may lack the sbin dirs where Debian puts runc.
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

pub fn package_of(runtime: &str) -> &str {
    match runtime.rsplit('/').next().unwrap_or(runtime) {
        "runsc" => "runsc (gVisor, from gvisor.dev)",
        "crun" => "crun",
        _ => "runc",
    }
}

/// Adds `o+x` (and `g+x`) so ids in the boxes' ranges can pass through.
pub fn allow_traverse(dir: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)
        .map_err(crate::error::io("stat", dir))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o011 != 0o011 {
        crate::fs::set_mode(dir, mode | 0o011)?;
    }
    Ok(())
}

pub fn open_console(path: &Path) -> Result<std::fs::File, RuntimeError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true).mode(0o640);
    if std::fs::metadata(path).is_ok_and(|m| m.len() > CONSOLE_MAX_BYTES) {
        options.append(false).write(true).truncate(true);
    }
    options
        .open(path)
        .map_err(crate::error::io("open the console log", path))
}

/// Puts the console log's tail (where the OCI runtime wrote why) into a run error.
pub fn with_console(e: RuntimeError, console: &Path) -> RuntimeError {
    match e {
        RuntimeError::Backend {
            program,
            operation,
            status,
            ..
        } => RuntimeError::Backend {
            program,
            operation,
            status,
            stderr: ready::console_tail(console),
        },
        other => other,
    }
}

/// Whether this host lets berth create user namespaces (every box has one). Refused, for
/// example, inside a chroot, under `kernel.unprivileged_userns_clone=0` for non-root, or by
/// a container's seccomp profile. Costs one fork + exec.
pub fn check_user_namespaces() -> Result<(), RuntimeError> {
    use std::os::unix::process::CommandExt;
    let mut probe = std::process::Command::new("/proc/self/exe");
    probe
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: unshare is async-signal-safe and touches no memory of the parent.
    unsafe {
        probe.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                // Only the unshare matters; exit before running anything.
                libc::_exit(0);
            }
            Err(std::io::Error::last_os_error())
        });
    }
    match probe.status() {
        Ok(_) => Ok(()),
        Err(e) => Err(RuntimeError::Missing {
            what: format!("user namespaces ({e})"),
            hint: "every box has its own user namespace; run berth on a host (or VM) that allows them, not inside a chroot or a container that forbids unshare(CLONE_NEWUSER)".into(),
        }),
    }
}
