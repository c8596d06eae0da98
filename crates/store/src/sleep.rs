//! A box's sleep ladder as the store keeps it.

/// A box's sleep ladder: idle seconds before each rung (0: never), and whether a call
/// wakes a sleeping box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SleepSettings {
    pub pause_after_s: u64,
    pub snapshot_after_s: u64,
    pub stop_after_s: u64,
    pub auto_resume: bool,
}

/// Rungs of a sleep ladder out of order: a later rung must come after an earlier one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{later}` ({later_s} s) must be longer than `{earlier}` ({earlier_s} s): a box is paused, then snapshotted, then stopped (0 turns a rung off)")]
pub struct SleepOrderError {
    pub earlier: &'static str,
    pub earlier_s: u64,
    pub later: &'static str,
    pub later_s: u64,
}

impl SleepSettings {
    /// The rungs that are on come in ladder order.
    pub fn in_order(&self) -> Result<(), SleepOrderError> {
        let sleep = self;
        let rungs = [
            ("pause_after_s", sleep.pause_after_s),
            ("snapshot_after_s", sleep.snapshot_after_s),
            ("stop_after_s", sleep.stop_after_s),
        ];
        let on: Vec<_> = rungs.into_iter().filter(|(_, s)| *s > 0).collect();
        for pair in on.windows(2) {
            let ((earlier, earlier_s), (later, later_s)) = (pair[0], pair[1]);
            if later_s <= earlier_s {
                return Err(SleepOrderError {
                    earlier,
                    earlier_s,
                    later,
                    later_s,
                });
            }
        }
        Ok(())
    }
}
