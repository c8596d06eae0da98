//! Lowering and raising one capability in the calling thread's effective set.
//!
//! A file call made as the box user runs on a `berth-init` thread with its fsuid switched
//! to 1001 ([`crate::files::FsIdentity`]). That drops the filesystem capabilities, but not
//! `CAP_SYS_RESOURCE`, which is what lets ext4 write into the blocks a volume keeps for
//! root (`-m 1`). Those blocks are `berth-init`'s, so its journals still take writes when
//! the box user has filled the volume: the user's file calls must not spend them. The
//! per-thread capability calls live with the rest of berth's capability handling.

pub use berth_confine::caps::{lower, raise, CAP_SYS_RESOURCE};
