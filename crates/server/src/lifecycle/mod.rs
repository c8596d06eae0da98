//! The box lifecycle beyond single calls: who is using a box ([`activity`]), the
//! reclaimer that stops boxes nobody used for their idle timeout ([`idle`]), and the
//! watch that notices a box ending on its own ([`exit_watch`]), and the pruner that keeps
//! every box's event log within its budget ([`event_retention`]); what keeps a box awake
//! as the host sees it ([`awake`]).

pub mod activity;
pub mod awake;
pub mod event_retention;
pub mod exit_watch;
pub mod idle;
pub mod warm_pool;

pub use activity::{Activity, ActivityGuard, Use};
pub use exit_watch::ExitWatch;
