//! The template registry: what a box is made from (base rootfs, layers, harness, services,
//! limits, sleep ladder, egress policy). Built-in templates ship with berth (`builtin.rs`,
//! the `desktop` one in `desktop.rs`);
//! user templates are `<data-dir>/templates/NAME.toml` files (`parse.rs`, its `[[services]]`
//! in `services.rs`; the format is in `docs/templates.md`).
//!
//! Loading never half-loads a file: a file that does not parse or validate is reported
//! ([`TemplateError`], with its file and line) and skipped, and the others load. A registry is
//! immutable; [`TemplateRegistry::reload`] builds a new one, and [`SharedTemplates`] swaps it
//! in atomically for the server.

mod base;
mod builtin;
pub mod desktop;
mod egress;
mod error;
#[cfg(test)]
mod old_releases;
mod parse;
mod program;
mod registry;
mod services;
mod source;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;

pub use base::{parse_base, BaseError};
pub use builtin::{
    builtins, echo_harness_binary, echo_layer_dir, prepare_echo_layer, EchoLayerError,
    ECHO_LAYER_TARGET,
};
pub use error::{TemplateError, TemplateErrorKind};
pub use parse::{parse_template, DEFAULT_SLEEP, WARM_RANGE};
pub use registry::MAX_FILE_BYTES;
pub use registry::{templates_dir, SharedTemplates, TemplateRegistry};
pub use services::ServiceProblem;

use berth_protocol::harness::HarnessConfig;
use berth_runtime::Limits;

use crate::egress::policy::EgressPolicy;

/// A read-only shared layer of a template: a host directory and where it goes in the box.
pub type LayerSpec = berth_runtime::Layer;

/// One template, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// A DNS label; for a file, its stem.
    pub name: String,
    pub base: Base,
    /// The sleep ladder of its boxes (a box may give its own).
    pub sleep: berth_store::SleepSettings,
    /// Defaults for boxes of this template (a box may override each).
    pub limits: Limits,
    /// The volume size of its boxes (a box may give its own).
    pub disk_mib: u64,
    pub layers: Vec<LayerSpec>,
    /// `None`: boxes of this template take no messages.
    pub harness: Option<HarnessConfig>,
    /// What its boxes may reach and which credentials the gateway sets for them
    /// (validated, canonical). Empty: nothing leaves. A box may replace it at creation.
    pub egress: EgressPolicy,
    /// Boxes kept booted for it, with no user data, for creates to claim
    /// (`lifecycle/warm_pool.rs`); 0: none.
    pub warm: usize,
    /// Labels a node must carry to run its boxes (a box's `node/KEY` labels add to them).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// How `/memory` is seeded on a box's first boot (`[memory]`); `None`: the default.
    pub memory: Option<berth_protocol::memory::MemoryLayout>,
    /// Daemons `berth-init` starts before the harness and supervises (`[[services]]`,
    /// validated: unique names, `after` naming only others, no cycle), in the file's order.
    pub services: Vec<berth_protocol::service::ServiceConfig>,
    pub origin: Origin,
    /// Why boxes cannot be made from this template right now (e.g. the echo harness binary
    /// is missing); `None`: usable. Listed either way.
    pub unavailable: Option<String>,
    /// What its file should say instead (an earlier release's key names, still read),
    /// logged when it is loaded.
    pub warnings: Vec<String>,
}

/// The base root filesystem. `host` runs on the sandbox only; the others are read-only
/// ext4 images (`berth_image`) and run on every runtime. Written in a template as one
/// string (`docs/templates.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// `host`: the host's own `/usr`, read-only (sandbox runtime).
    Host,
    /// `minimal`: busybox-static and berth's skeleton (seconds to build, cached).
    Minimal,
    /// `debian` (bookworm) or `debian:<suite>`: debootstrap minbase plus
    /// [`berth_image::DEBIAN_PACKAGES`] (minutes to build: `berth image build`).
    Debian { suite: String },
    /// `desktop`: `debian` (bookworm) plus [`berth_image::DESKTOP_PACKAGES`] (X, XFCE, VNC;
    /// about 1 GB and 4–6 minutes to build: `berth image build --template desktop`).
    Desktop,
    /// `dir:/abs/path`: a copy of a directory of the host's.
    Dir(PathBuf),
    /// `tarball:/abs/path.tar[.gz|.xz|.zst]`: an unpacked tarball.
    Tarball(PathBuf),
}

impl Base {
    /// Whether the base is an image (a VM runtime's rootfs) rather than the host's `/usr`.
    pub fn is_image(&self) -> bool {
        !matches!(self, Base::Host)
    }
}

/// The template file's spelling (and `GET /v1/templates`'): `host`, `minimal`, `debian`,
/// `debian:<suite>`, `desktop`, `dir:<path>`, `tarball:<path>`.
impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Base::Host => f.write_str("host"),
            Base::Minimal => f.write_str("minimal"),
            Base::Debian { suite } if suite == berth_image::DEBIAN_SUITE => f.write_str("debian"),
            Base::Debian { suite } => write!(f, "debian:{suite}"),
            Base::Desktop => f.write_str("desktop"),
            Base::Dir(path) => write!(f, "dir:{}", path.display()),
            Base::Tarball(path) => write!(f, "tarball:{}", path.display()),
        }
    }
}

/// Where a template comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Builtin,
    File(PathBuf),
}

/// `builtin`, or the file's path (as `GET /v1/templates` shows it).
impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin => f.write_str("builtin"),
            Origin::File(path) => write!(f, "{}", path.display()),
        }
    }
}
