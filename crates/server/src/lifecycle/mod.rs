//! The box lifecycle beyond single calls: who is using a box ([`activity`]) and the
//! reclaimer that stops boxes nobody used for their idle timeout ([`idle`]).

pub mod activity;
pub mod idle;

pub use activity::{Activity, ActivityGuard, Use};
