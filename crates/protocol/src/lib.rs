//! Types and encodings shared by berth's pieces. No I/O lives here.
//!
//! - [`guest`]: the guest channel between the host and `berth-init` (port 2024).
//! - [`ids`]: typed identifiers used across the host (boxes, tenants).
//! - [`terminal`], [`process`], [`files`], [`ports`]: version 3's calls (terminals,
//!   background processes, directories and watches, in-box ports).
//! - [`service`]: version 7's template services, supervised by `berth-init`.
//! - [`memory`]: a box's `/memory` as the host reads it without waking the box.
//! - [`vm`]: the config disk the host gives a VM's `berth-init`.
//! - [`error`]: the one JSON error shape, `{"error":{"code","message"}}`, used by the
//!   guest channel and the public API alike.

pub mod error;
pub mod files;
pub mod guest;
pub mod harness;
pub mod ids;
pub mod memory;
pub mod memory_history;
pub mod memory_search;
pub mod ports;
pub mod process;
pub mod service;
pub mod terminal;
pub mod version;
pub mod vm;
pub mod wake;

pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use ids::{BoxId, IdError, TenantId};
pub use version::{negotiate, ProtocolVersion, PROTOCOL_VERSION};
