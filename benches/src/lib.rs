//! Helpers for berth's benchmarks: percentiles and the floors every figure is compared to.

pub mod daemon;
pub mod egress;
pub mod floor;
pub mod http;
pub mod phases;
pub mod sse;
pub mod stats;
pub mod vm;
pub mod volume;
