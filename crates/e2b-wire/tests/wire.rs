//! The crate's one integration test binary: the generated messages against the pinned E2B
//! SDK's own bytes, and through both codecs.

#[path = "wire/golden.rs"]
mod golden;
#[path = "wire/round_trip.rs"]
mod round_trip;
