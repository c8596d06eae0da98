//! The VM boot benchmark's parts: the images a box boots ([`images`]), the bare-boot floor
//! ([`bare`]: the same kernel and QEMU machine to a trivial `/init` that powers off) and
//! the host memory of a running VM ([`memory`]); and the sleep ladder of a `qemu` box
//! ([`ladder`]).

pub mod bare;
pub mod images;
pub mod ladder;
pub mod memory;
