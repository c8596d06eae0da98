//! The kinds of op a replica queues for a node (`cluster::remote`) and a node does
//! (`cluster::op`).

use berth_store::CREATE_OP;

/// Made by a placement (`berth_store::CREATE_OP`): the node checks it can run the box.
pub const CREATE: &str = CREATE_OP;
pub const START: &str = "start";
pub const STOP: &str = "stop";
pub const PAUSE: &str = "pause";
pub const RESUME: &str = "resume";
pub const SNAPSHOT: &str = "snapshot";
pub const DELETE: &str = "delete";
/// Put the stopped box's volume back from its newest durable copy.
pub const RESTORE: &str = "restore";
/// Wake the box for its queued messages (a post, a wakeup), and do not wait for the boot.
pub const WAKE: &str = "wake";
