//! Taking boxes off a node that is lost (its lease ran out more than a grace period ago:
//! it has fenced itself by then, stopping its boxes) or that its operator drains or
//! expunges. A moved box is on its new node at once, `stopped`, with its volume epoch
//! raised, so whatever the old node still holds of its volume is stale (the old node drops
//! it; the new one restores the box's durable copy at its next start) and its open run is
//! ended. The state is written directly, not through the state machine: the box's owner is
//! gone, and nothing of it runs any more.

use std::time::Duration;

use berth_protocol::BoxId;

use crate::box_record::BoxRecord;
use crate::db::Optional;
use crate::error::{sql, StoreError};
use crate::events::STATE_EVENT;
use crate::placement::{best_of, candidates, Placement};
use crate::{format_time, now, Fence, Store};

/// A node whose lease ran out more than the grace period ago and that still holds boxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostNode {
    pub id: String,
    pub name: String,
    /// How long ago its lease ran out, by the database's clock.
    pub lapsed_ms: i64,
}

impl Store {
    /// The nodes whose lease ran out at least `grace` ago and that boxes still name.
    pub fn lost_nodes(&self, grace: Duration) -> Result<Vec<LostNode>, StoreError> {
        self.db.read(|c| {
            let now_ms = c.now_ms().map_err(sql("read the database's clock"))?;
            let cutoff = now_ms - grace.as_millis() as i64;
            c.query_map(
                "SELECT n.id, n.name, n.lease_expires_ms FROM nodes n \
                 WHERE n.lease_expires_ms <= ?1 \
                 AND EXISTS (SELECT 1 FROM boxes b WHERE b.node_id = n.id) ORDER BY n.id",
                crate::args![cutoff],
                |row| {
                    Ok(LostNode {
                        id: row.get(0)?,
                        name: row.get(1)?,
                        lapsed_ms: now_ms - row.get::<i64>(2)?,
                    })
                },
            )
            .map_err(sql("find lost nodes"))
        })
    }

    /// Takes node `id` for gone now, whatever its lease said (`berth node expunge`: its
    /// operator knows it is dead): its lease is made to have run out long ago, and it takes
    /// no new boxes. Refused while its lease still runs: a live node is drained instead.
    pub fn expunge_node(&self, id: &str) -> Result<(), StoreError> {
        self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            let row: Option<(String, i64)> = tx
                .query_row(
                    "SELECT name, lease_expires_ms FROM nodes WHERE id = ?1",
                    crate::args![id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(sql("read a node"))?;
            let Some((name, expires_ms)) = row else {
                return Err(StoreError::NodeNotFound {
                    reference: id.to_owned(),
                });
            };
            if expires_ms > now_ms {
                return Err(StoreError::NodeAlive {
                    name,
                    lease_left_ms: expires_ms - now_ms,
                });
            }
            tx.execute(
                "UPDATE nodes SET lease_expires_ms = 0, state = 'draining' WHERE id = ?1",
                crate::args![id],
            )
            .map_err(sql("expunge a node"))?;
            Ok(())
        })
    }

    /// The node a box of `record`'s size would go to now, by the placement's rules, other
    /// than `except` (its current node); `None` when no node fits.
    pub fn choose_node(
        &self,
        record: &BoxRecord,
        placement: &Placement<'_>,
        except: &str,
    ) -> Result<Option<String>, StoreError> {
        self.db.read(|c| {
            let mut found = candidates(c, (record.cpus, record.memory_mib), placement)?;
            found.retain(|n| n.id != except);
            Ok(best_of(found, placement.sample).map(|n| n.id))
        })
    }

    /// Moves box `id` from node `from` to node `to` (see the module's doc), leaving it
    /// `stopped` with `reason`; with `fence`, only while that lease term holds. `false`
    /// when the box is no longer on `from` (moved or deleted meanwhile).
    pub fn move_box(
        &self,
        id: &BoxId,
        from: &str,
        to: &str,
        reason: &str,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        let seq = self.db.write(|tx| {
            if let Some(fence) = fence {
                crate::leases::check_fence(tx, fence)?;
            }
            let on_from: Option<String> = tx
                .query_row(
                    "SELECT id FROM boxes WHERE id = ?1 AND node_id = ?2",
                    crate::args![id.as_str(), from],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read a box's node"))?;
            if on_from.is_none() {
                return Ok::<_, StoreError>(None);
            }
            tx.execute(
                "UPDATE boxes SET node_id = ?1, volume_epoch = volume_epoch + 1, state = 'stopped', \
                 state_reason = ?2, generation = generation + 1, updated_at = ?3, boot_token = NULL \
                 WHERE id = ?4",
                crate::args![to, reason, format_time(now())?, id.as_str()],
            )
            .map_err(sql("move a box to another node"))?;
            crate::box_runs::end(tx, id)?;
            // Its ops for the old node can never run there now.
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            tx.execute(
                "UPDATE ops SET state = 'failed', error = ?1, finished_ms = ?2 WHERE box_id = ?3 \
                 AND node_id = ?4 AND state IN ('queued', 'claimed')",
                crate::args![reason, now_ms, id.as_str(), from],
            )
            .map_err(sql("fail a moved box's ops"))?;
            let seq = crate::events::last_seq(tx, id)? + 1;
            let data = serde_json::json!({"state": "stopped", "reason": reason});
            crate::events::insert(tx, id, seq, STATE_EVENT, &data, now())?;
            Ok(Some(seq))
        })?;
        match seq {
            Some(seq) => {
                self.notify_appended(id, seq);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
