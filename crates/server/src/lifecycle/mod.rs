//! The box lifecycle, with one owner: [`Lifecycle`] (`ctx.lifecycle()`) is the only way to
//! wake, stop, pause, snapshot or fail a box. Each of those holds the box's lifecycle lock
//! for its whole run, in a task of its own (a client that disconnects cannot cut a start or
//! a snapshot half-way; the caller just stops waiting), and keeps the boot bookkeeping
//! (`crate::boxes::Live`: client, pumps, egress, exit watch) in step with the store. Every
//! one of them runs inside a `transition::Transition`, the one place that takes the lock,
//! reads the row, writes the state with its generation and records a failed step on the box;
//! a boot is planned without side effects first (`boot_plan`).
//!
//! The rungs of the sleep ladder, cheapest wake first: `running`, `paused` (frozen in
//! memory), `snapshotted` (memory on disk, no VMM), `stopped` (processes gone, disk kept).
//! A wake takes the box up from wherever it is ([`wake`]); the reclaimer takes idle boxes
//! down the rungs their ladder has ([`idle`]). Around them: who is using a box
//! ([`activity`]), the watch that notices a boot ending on its own ([`exit_watch`]), the
//! pruner that keeps every box's event log within its budget ([`event_retention`]), and
//! what keeps a box awake as the host sees it ([`awake`]).

pub mod activity;
pub mod awake;
mod boot;
pub(crate) mod boot_plan;
pub(crate) mod boot_tasks;
pub mod copy;
pub(crate) mod detached;
pub mod event_retention;
pub mod exit_watch;
pub mod idle;
mod owner;
mod restore_copy;
pub(crate) mod rootfs;
pub(crate) mod rootfs_error;
mod sleep;
mod stop;
pub(crate) mod transition;
mod wake;
pub mod wakeups;
pub mod warm_pool;

pub use activity::{Activity, ActivityGuard, Use};
pub use exit_watch::ExitWatch;
pub use owner::Lifecycle;
pub(crate) use restore_copy::restore_if_moved;
