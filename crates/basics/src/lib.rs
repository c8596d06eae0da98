//! The few helpers that every berth crate needs one copy of: writing a file so that it is
//! either wholly old or wholly new ([`write_atomically`]), lowercase hex ([`hex`]), and the
//! percent-encoding of API URLs ([`path_segment`], [`query_value`]), and a lock-free
//! histogram of durations ([`Histogram`]).
//!
//! std only, no dependency: `berth-init` is built static and small, and uses these too.

mod atomic_write;
mod hex;
mod histogram;
mod percent;

pub use atomic_write::{write_atomically, write_atomically_with};
pub use hex::hex;
pub use histogram::{Histogram, HistogramSnapshot};
pub use percent::{path_segment, percent_decode, query_value};
