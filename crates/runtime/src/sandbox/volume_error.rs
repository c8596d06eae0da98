//! What can go wrong putting a sandbox box's volume image in place, each naming the image
//! or mount and what to do.

use std::path::PathBuf;

use crate::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// `/dev/loop-control` cannot be opened or hands out no device.
    #[error("cannot get a loop device from /dev/loop-control (is the `loop` module loaded?)")]
    LoopControl {
        #[source]
        source: std::io::Error,
    },

    #[error("cannot bind {device} to {image}")]
    LoopAttach {
        device: PathBuf,
        image: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Every free device was taken by someone else before it could be bound.
    #[error("no loop device for {image}: each free one was taken first ({attempts} attempts)")]
    LoopBusy { image: PathBuf, attempts: u32 },

    /// The image is still bound to a loop device (a mount of an earlier start that has not
    /// gone yet): mounting it twice would corrupt it.
    #[error("{image} is still in use by /dev/loop{device} (a mount of an earlier start): stop the box again, or unmount it and run `losetup -d /dev/loop{device}`")]
    StillAttached { image: PathBuf, device: u32 },

    /// The user namespace that carries the box's id map for the idmapped mount.
    #[error("cannot make a user namespace for the box's id range (needed for the idmapped volume mount)")]
    UserNamespace {
        #[source]
        source: std::io::Error,
    },

    #[error("cannot mount {device} at {target}: {step} failed{}", kernel_says.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Mount {
        device: PathBuf,
        target: PathBuf,
        /// The syscall that failed (`fsopen`, `fsconfig`, `fsmount`, `mount_setattr`, `move_mount`).
        step: &'static str,
        /// What the kernel logged on the filesystem context, if anything.
        kernel_says: Option<String>,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot unmount {target}")]
    Unmount {
        target: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// e2fsck found damage it will not repair unattended: the box does not start on it.
    #[error("the file system in {image} has errors `e2fsck -p` cannot repair: with the box stopped, run `e2fsck -f {image}` and answer its questions, then start the box again")]
    Unrepairable {
        image: PathBuf,
        #[source]
        source: berth_image::ImageError,
    },

    /// A VM's guest wrote the image since the host last checked it, and the full check
    /// refused it: the host does not mount it, and it was left as it was.
    #[error("the volume {image} was written by a VM's guest and failed the host's check, so the sandbox does not mount it")]
    GuestWrittenRefused {
        image: PathBuf,
        #[source]
        source: berth_image::ImageError,
    },

    /// Making, growing or checking the image failed.
    #[error("{action} {image}")]
    Image {
        action: &'static str,
        image: PathBuf,
        #[source]
        source: berth_image::ImageError,
    },

    /// The image made from a directory volume does not hold what the directory holds; the
    /// directory is kept as it was and the image is removed.
    #[error("migrating {dir} into {image}: the image holds {found}, the directory {expected}; the directory is kept, the image removed")]
    MigrationMismatch {
        dir: PathBuf,
        image: PathBuf,
        expected: String,
        found: String,
    },

    /// A directory volume holds something that cannot go into an image.
    #[error("migrating {path}: {why}; the directory volume is kept as it was")]
    Unmigratable { path: PathBuf, why: &'static str },

    #[error("{action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Growing online needs the volume mounted (the box running).
    #[error("{image} is not mounted: it grows at the box's next start instead")]
    NotMounted { image: PathBuf },

    /// A blocking volume step's thread died.
    #[error("the volume work for {image} did not finish")]
    Task {
        image: PathBuf,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl From<VolumeError> for RuntimeError {
    fn from(e: VolumeError) -> RuntimeError {
        match e {
            VolumeError::Image {
                source: berth_image::ImageError::MissingTool { tool, package },
                ..
            } => RuntimeError::Missing {
                what: format!("`{tool}`"),
                hint: format!("apt-get install {package} (or run scripts/install-deps.sh)"),
            },
            other => RuntimeError::Io {
                action: "prepare the box volume",
                path: other.path().to_path_buf(),
                source: std::io::Error::other(other),
            },
        }
    }
}

impl VolumeError {
    /// The image, device or mount the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            VolumeError::LoopControl { .. } => std::path::Path::new("/dev/loop-control"),
            VolumeError::UserNamespace { .. } => std::path::Path::new("/proc/self/ns/user"),
            VolumeError::LoopAttach { image, .. }
            | VolumeError::LoopBusy { image, .. }
            | VolumeError::StillAttached { image, .. }
            | VolumeError::Unrepairable { image, .. }
            | VolumeError::GuestWrittenRefused { image, .. }
            | VolumeError::Image { image, .. }
            | VolumeError::MigrationMismatch { image, .. }
            | VolumeError::NotMounted { image }
            | VolumeError::Task { image, .. } => image,
            VolumeError::Mount { target, .. } | VolumeError::Unmount { target, .. } => target,
            VolumeError::Unmigratable { path, .. } | VolumeError::Io { path, .. } => path,
        }
    }
}
