//! Boxes by state, read from the store at each scrape: the store, not this daemon's memory,
//! is where a box's state is recorded (with a shared PostgreSQL store, every host's boxes).

use berth_store::{BoxState, Store, StoreError};

use super::exposition::{Exposition, Kind};

/// `berth_boxes{state}`: every state a box row can be in, 0 included. A deleted box has no
/// row (its move to `deleted` is counted by `berth_box_transitions_total`), so `deleted`
/// is not a series. Warm-pool boxes count like any other.
pub(super) fn write(out: &mut Exposition, store: &Store) -> Result<(), StoreError> {
    let mut counts = BoxState::ALL.map(|state| (state, 0u64));
    for (state, stored) in store.count_boxes_by_state()? {
        if let Some((_, count)) = counts.iter_mut().find(|(s, _)| *s == state) {
            *count = stored;
        }
    }
    out.family("berth_boxes", Kind::Gauge, "Boxes in the store, by state.");
    for (state, count) in counts {
        if state != BoxState::Deleted {
            out.sample("berth_boxes", &[("state", state.as_str())], count);
        }
    }
    Ok(())
}
