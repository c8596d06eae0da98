//! Why berth.toml could not be used.

use std::path::PathBuf;

/// A config file larger than this is refused (it is a few lines).
pub const MAX_BYTES: u64 = 1024 * 1024;

/// Why the host config could not be used. Shown as `FILE[:LINE]: message`.
#[derive(Debug, thiserror::Error)]
pub enum HostConfigError {
    #[error("{}: cannot read the file", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: the file is larger than {MAX_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}{}: {}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), source.message())]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        /// Boxed: an error is rare, a `Result` of one is everywhere.
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{}: [egress] extra_roots: {} must be an absolute path", path.display(), root.display())]
    RelativeRoot { path: PathBuf, root: PathBuf },
    #[error("{}: [storage] min_free_percent must be between 0 and 50, got {value}", path.display())]
    MinFreeOutOfRange { path: PathBuf, value: f64 },
    #[error("{}: [storage] overcommit must be between 1 and 100, got {value}", path.display())]
    OvercommitOutOfRange { path: PathBuf, value: f64 },
    #[error("{}: [ports] base_domain {value:?} {rule}", path.display())]
    BaseDomain {
        path: PathBuf,
        value: String,
        rule: &'static str,
    },
    #[error("{}: {key} must be between {min} and {max}, got {value}", path.display())]
    OutOfRange {
        path: PathBuf,
        key: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
}
