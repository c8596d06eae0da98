//! What can go wrong building an image, each saying what to do next.

use std::path::PathBuf;
use std::process::ExitStatus;

/// An image build failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A host tool the builder runs is not installed.
    #[error("`{tool}` is not installed: install the Debian package `{package}` (or run scripts/install-deps.sh)")]
    MissingTool {
        tool: &'static str,
        package: &'static str,
    },
    /// A host tool ran and failed; `stderr` is the tail of what it printed.
    #[error("`{command}` failed ({status}): {stderr}")]
    ToolFailed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    /// A host tool could not be started.
    #[error("could not run `{tool}`")]
    Spawn {
        tool: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// apt could not reach the Debian mirror (or has no package lists and `apt-get update`
    /// failed).
    #[error("no network to the Debian mirror: {step} failed: {stderr} (check the apt sources and the network, then retry)")]
    NoMirror { step: String, stderr: String },
    /// apt knows no such package.
    #[error("apt knows no package `{package}`: run `apt-get update`, or check the apt sources")]
    UnknownPackage { package: String },
    /// apt's record of a package lacks the field the builder needs.
    #[error("apt's record of `{package}` has no usable `{field}` field")]
    PackageField {
        package: String,
        field: &'static str,
    },
    /// The unpacked kernel package does not hold what a kernel package holds.
    #[error("{path} holds no kernel: expected {expected}")]
    NotAKernel {
        path: PathBuf,
        expected: &'static str,
    },
    /// A module the VM needs is neither in the kernel's modules nor built in.
    #[error("kernel {version} has no module `{module}` (not in modules.dep, not built in): use a kernel that has it")]
    MissingModule { module: String, version: String },
    /// A file or directory operation failed.
    #[error("could not {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A name does not fit in the place it goes (an archive path, a label, a suite).
    #[error("invalid {what} `{value}`: {why}")]
    Invalid {
        what: &'static str,
        value: String,
        why: &'static str,
    },
    /// A volume can only grow: shrinking would cut off the box's files.
    #[error("volume {path} is {current_mib} MiB; it cannot shrink to {requested_mib} MiB (raise the size, or make a new box)")]
    Shrink {
        path: PathBuf,
        current_mib: u64,
        requested_mib: u64,
    },
    /// A layer's mount point cannot be made in a read-only rootfs image.
    #[error("layer target {target}: {path} is a {kind} in the rootfs image, not a directory; choose a target whose parents are directories in the image")]
    MountPointBlocked {
        target: String,
        path: String,
        kind: &'static str,
    },
    /// A confined tool ran past its deadline and was killed.
    #[error("`{tool}` took too long on the volume (killed after {after:?}): the check took too long; the image may be hostile or huge")]
    TookTooLong {
        tool: &'static str,
        after: std::time::Duration,
    },
    /// A confined tool's jail, privilege drop or seccomp filter could not be prepared.
    #[error("cannot prepare the confinement of a tool")]
    Confine {
        #[source]
        source: berth_confine::ConfineError,
    },
    /// A volume a guest wrote failed the host's check: nothing on the host mounts, grows or
    /// reads it, and it was left as it was.
    #[error("the volume {image} failed the host's check ({check}): {report}. The image is left as it was. Start the box on a VM runtime and repair it with `e2fsck -f` from inside, or restore the volume from a backup")]
    VolumeRefused {
        image: PathBuf,
        /// Which check: `journal replay` or `full check (e2fsck -fn)`.
        check: &'static str,
        /// The end of what the tool printed.
        report: String,
    },
    /// A confined program printed more than its answer may hold (it was cut off).
    #[error("`{tool}` printed more than {cap} bytes: its answer was refused")]
    TooMuchOutput { tool: &'static str, cap: usize },
    /// The volume reader could not answer, and says why (a missing path, a damaged image).
    #[error("{}", failure.message)]
    VolumeRead {
        failure: berth_protocol::memory::VolumeReadFailure,
    },
    /// The volume reader ended without an answer or a reason (it crashed, or was killed).
    #[error("the volume reader failed ({status}) reading {image}: {stderr}")]
    ReaderFailed {
        image: PathBuf,
        status: ExitStatus,
        stderr: String,
    },
    /// The volume reader answered something that is not what was asked for.
    #[error("the volume reader's answer cannot be decoded")]
    BadReaderAnswer {
        #[source]
        source: serde_json::Error,
    },
    /// A link an image adds after its packages points at nothing the packages installed.
    #[error("the image's link {link} points to {target}, which its packages no longer install: update the link")]
    LinkTarget { link: String, target: String },
    /// The operation needs root (debootstrap, device nodes).
    #[error("{what} needs root: run the daemon as root")]
    NeedsRoot { what: &'static str },
}

pub(crate) fn io(
    action: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> ImageError {
    let path = path.to_path_buf();
    move |source| ImageError::Io {
        action,
        path,
        source,
    }
}
