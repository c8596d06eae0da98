//! What the store keeps of a box's durable copies (its volume in the chunk store): the
//! newest copy, written only forward (a slow upload that finishes after a newer one cannot
//! put an older copy back), and the restores of one, each an event on the box, with what
//! the restore lost.

use berth_protocol::BoxId;
use serde::{Deserialize, Serialize};

use crate::error::{sql, StoreError};
use crate::{now, Store};

/// The event kind of a restore from a durable copy, with [`VolumeRestored`] as data.
pub const VOLUME_RESTORED_EVENT: &str = "volume_restored";

/// One copy of a box's volume in the chunk store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableCopy {
    /// Its number among the box's copies, from 1.
    pub generation: u64,
    /// When the box's volume held what the copy holds (RFC 3339).
    pub taken_at: String,
    /// The volume image's size.
    pub image_bytes: u64,
    /// What the copy's chunks take in the store, compressed (shared chunks counted).
    pub stored_bytes: u64,
}

/// A restore of a box's volume from a copy: the event's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRestored {
    pub generation: u64,
    pub taken_at: String,
    /// Why: `"copy"` (an operator asked), `"failover"` (its node was lost).
    pub reason: String,
    /// Seconds between the copy and the restore: what the box may have lost (its writes
    /// since the copy, if it ran then).
    pub lost_s: u64,
}

impl Store {
    /// Records `copy`, taken of the box's volume at `epoch`, as its newest durable copy,
    /// unless it already has that one or a newer one, or its volume has moved to a newer
    /// epoch since (the copy is of a lost node's stale image); whether it was recorded.
    pub fn record_durable_copy(
        &self,
        id: &BoxId,
        epoch: u64,
        copy: &DurableCopy,
    ) -> Result<bool, StoreError> {
        let data = serde_json::to_string(copy).map_err(|source| StoreError::CorruptJson {
            column: "boxes.durable_copy",
            source,
        })?;
        let generation = copy.generation as i64;
        let n = self.db.write(|tx| {
            tx.execute(
                "UPDATE boxes SET durable_copy = ?1, durable_generation = ?2 \
                 WHERE id = ?3 AND durable_generation < ?2 AND volume_epoch = ?4",
                crate::args![data, generation, id.as_str(), epoch as i64],
            )
            .map_err(sql("record a durable copy"))
        })?;
        Ok(n == 1)
    }

    /// Appends the restore of the box's volume from a copy to its event log.
    pub fn record_volume_restored(
        &self,
        id: &BoxId,
        restored: &VolumeRestored,
    ) -> Result<u64, StoreError> {
        let data = serde_json::to_value(restored).map_err(|source| StoreError::CorruptJson {
            column: "events.data",
            source,
        })?;
        let seq = self.db.write(|tx| {
            let seq = crate::events::last_seq(tx, id)? + 1;
            crate::events::insert(tx, id, seq, VOLUME_RESTORED_EVENT, &data, now())?;
            Ok::<_, StoreError>(seq)
        })?;
        self.notify_appended(id, seq);
        Ok(seq)
    }
}
