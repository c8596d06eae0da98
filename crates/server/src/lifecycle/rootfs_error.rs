//! Why a box's rootfs cannot be had (`lifecycle::rootfs`), a file of its own so that the
//! daemon's errors can hold it without importing the rootfs work.

/// Why the box's rootfs cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("base {base} cannot run on the {runtime} runtime")]
    WrongRuntime { base: String, runtime: String },
    #[error("the {base} rootfs image is not built; run `berth image build --template {template}` (minutes the first time)")]
    NotBuilt { base: String, template: String },
    #[error("cannot read the record of built images")]
    Record(#[source] crate::images::BuiltImagesError),
    #[error("cannot build the {base} rootfs image")]
    Build {
        base: String,
        #[source]
        source: berth_image::ImageError,
    },
    #[error("cannot make the layers' mount points in the {base} rootfs image")]
    MountPoints {
        base: String,
        #[source]
        source: berth_image::ImageError,
    },
    #[error("the image build task died")]
    Task(#[source] tokio::task::JoinError),
}
