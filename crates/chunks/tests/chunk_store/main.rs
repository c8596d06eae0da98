//! berth-chunks against real places: a local directory and moto, the S3 stand-in (its
//! tests skip, part `moto`, where the pinned moto is not installed). Each scenario runs on
//! both, as `<scenario>::on_a_dir` and `<scenario>::on_moto`.

mod support;

mod corruption;
mod gc;
mod markers;
mod memory_history;
mod open;
mod round_trip;
