//! The seccomp table of each confined process, each built from [`groups`] where tables
//! share calls.

mod box_user;
pub mod groups;
mod sandbox_box;
mod vmm_bridge;
mod volume_tool;

pub use box_user::{BOX_USER, FAMILIES};
pub use sandbox_box::{AF_VSOCK, CLONE_NEW_NAMESPACES, SANDBOX_BOX};
pub use vmm_bridge::VMM_BRIDGE;
pub use volume_tool::VOLUME_TOOL;

/// Every table, for the checks they all must pass.
pub const ALL: &[crate::rule::Table] = &[BOX_USER, VMM_BRIDGE, VOLUME_TOOL, SANDBOX_BOX];

#[cfg(test)]
mod tests;
