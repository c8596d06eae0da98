//! Choosing a node for a new box, and recording the choice: the box's row (on that node)
//! and the node's `create` op commit in one transaction, so a placement is never half
//! made, and two replicas placing at once see each other's boxes (Postgres runs it
//! SERIALIZABLE and runs it again on a conflict).
//!
//! Best of K: K live, active nodes that pass the filters are drawn at random and the least
//! loaded of them wins. Drawing a few rather than scanning for the global minimum keeps
//! replicas that place at the same moment from all picking the same node (the peers' way:
//! Nomad's and E2B's schedulers). A node's load is the larger of its CPU and memory shares
//! taken by boxes that run or are about to (an op is open for them), or by what the node
//! says it uses if that is more, plus [`SLEEPING_SHARE`] of what its sleeping boxes would
//! take: they wake where they live, so they count, and a burst of creates (boxes that
//! sleep until used) spreads instead of all going to whichever node last reported the
//! lowest use. Ties go to the node with fewer boxes.

use std::collections::BTreeMap;

use crate::box_record::BoxRecord;
use crate::boxes::{admit_in, new_record, Admission, NewBox};
use crate::db::Conn;
use crate::error::{sql, StoreError};
use crate::ops::enqueue_in;
use crate::Store;

/// How much of a sleeping box's limits its node counts as taken: not all (it holds no CPU
/// or RAM while it sleeps), not none (it wakes there). Half keeps a node's measured use,
/// which moves between its reports, from outweighing more than a couple of boxes.
pub const SLEEPING_SHARE: f64 = 0.5;

/// The op kind a placement queues: the node makes the box its own.
pub const CREATE_OP: &str = "create";

/// What a box needs of its node.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement<'a> {
    /// The node must offer this runtime: a node label `runtime/<name>` = `ready`.
    pub runtime: &'a str,
    /// Labels the node must have, each with this value.
    pub node_labels: &'a BTreeMap<String, String>,
    /// How many candidates are drawn (K).
    pub sample: usize,
}

/// A node label that says a runtime works there.
pub fn runtime_label(runtime: &str) -> String {
    format!("runtime/{runtime}")
}

/// A box placed: its row, and the op that makes it on its node.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub record: BoxRecord,
    pub op_id: u64,
}

/// A candidate node as placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    pub id: String,
    pub load: f64,
    pub boxes: u64,
}

impl Store {
    /// Places `new` on a node (see the module's doc), inserting it and its `create` op in
    /// one transaction. No node fits: [`StoreError::NoNode`] with what was asked.
    pub fn place_box(
        &self,
        new: &NewBox,
        admit: Admission<'_>,
        placement: &Placement<'_>,
    ) -> Result<Placed, StoreError> {
        let (placed, node_id) = self.db.write(|tx| {
            let candidates = candidates(tx, (new.cpus, new.memory_mib), placement)?;
            let Some(chosen) = best_of(candidates, placement.sample) else {
                return Err(StoreError::NoNode {
                    runtime: placement.runtime.to_owned(),
                    labels: placement.node_labels.clone(),
                });
            };
            let (slot, at) = admit_in(tx, new, &admit, Some(&chosen.id))?;
            let op_id = enqueue_in(tx, &new.id, &chosen.id, CREATE_OP, "{}")?;
            let record = new_record(new, slot, at, Some(&chosen.id));
            Ok((Placed { record, op_id }, chosen.id))
        })?;
        self.ring_op_bell(&node_id);
        Ok(placed)
    }
}

/// The live, active nodes that offer the runtime and carry the labels, with their loads
/// counting a box of `(cpus, memory_mib)` as theirs.
pub(crate) fn candidates(
    tx: &Conn<'_>,
    (new_cpus, new_memory_mib): (f64, u64),
    placement: &Placement<'_>,
) -> Result<Vec<Candidate>, StoreError> {
    let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
    // Boxes that run, or have an op open (about to start, or being made), hold their limits.
    let rows = tx
        .query_map(
            "SELECT n.id, n.cpus, n.memory_mib, n.labels, n.used_cpus, n.used_memory_mib, \
             (SELECT COALESCE(SUM(b.cpus), 0) FROM boxes b WHERE b.node_id = n.id \
              AND (b.state <> 'stopped' OR EXISTS (SELECT 1 FROM ops o WHERE o.box_id = b.id \
              AND o.state IN ('queued', 'claimed')))), \
             (SELECT COALESCE(CAST(SUM(b.memory_mib) AS BIGINT), 0) FROM boxes b \
              WHERE b.node_id = n.id AND (b.state <> 'stopped' OR EXISTS (SELECT 1 FROM ops o \
              WHERE o.box_id = b.id AND o.state IN ('queued', 'claimed')))), \
             (SELECT COUNT(*) FROM boxes b WHERE b.node_id = n.id), \
             (SELECT COALESCE(SUM(b.cpus), 0) FROM boxes b WHERE b.node_id = n.id), \
             (SELECT COALESCE(CAST(SUM(b.memory_mib) AS BIGINT), 0) FROM boxes b \
              WHERE b.node_id = n.id) \
             FROM nodes n WHERE n.state = 'active' AND n.lease_expires_ms > ?1 ORDER BY n.id",
            crate::args![now_ms],
            |row| {
                Ok((
                    row.get::<String>(0)?,
                    (row.get::<f64>(1)?, row.get::<u64>(2)?),
                    row.get::<String>(3)?,
                    (row.get::<f64>(4)?, row.get::<u64>(5)?),
                    (row.get::<f64>(6)?, row.get::<u64>(7)?),
                    row.get::<u64>(8)?,
                    (row.get::<f64>(9)?, row.get::<u64>(10)?),
                ))
            },
        )
        .map_err(sql("list the nodes a box may go to"))?;
    let mut out = Vec::new();
    for (id, (cpus, memory_mib), labels, used, reserved, boxes, assigned) in rows {
        let labels: BTreeMap<String, String> =
            serde_json::from_str(&labels).map_err(|source| StoreError::CorruptJson {
                column: "nodes.labels",
                source,
            })?;
        let fits = labels
            .get(&runtime_label(placement.runtime))
            .map(String::as_str)
            == Some("ready")
            && placement
                .node_labels
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value));
        if !fits {
            continue;
        }
        // What its sleeping boxes would take: all its boxes' limits but the reserved ones'.
        let sleeping = (
            (assigned.0 - reserved.0).max(0.0),
            assigned.1.saturating_sub(reserved.1) as f64,
        );
        let cpu_taken = reserved.0.max(used.0) + SLEEPING_SHARE * sleeping.0 + new_cpus;
        let memory_taken =
            reserved.1.max(used.1) as f64 + SLEEPING_SHARE * sleeping.1 + new_memory_mib as f64;
        let load = (cpu_taken / cpus.max(0.001)).max(memory_taken / memory_mib.max(1) as f64);
        out.push(Candidate { id, load, boxes });
    }
    Ok(out)
}

/// The least loaded of `sample` candidates drawn at random (all of them when fewer).
pub(crate) fn best_of(mut candidates: Vec<Candidate>, sample: usize) -> Option<Candidate> {
    let sample = sample.max(1);
    // A partial Fisher-Yates shuffle: the first `sample` are a uniform draw.
    for i in 0..sample.min(candidates.len()) {
        let j = i + random_below(candidates.len() - i);
        candidates.swap(i, j);
    }
    candidates.truncate(sample);
    candidates.into_iter().min_by(|a, b| {
        a.load
            .total_cmp(&b.load)
            .then(a.boxes.cmp(&b.boxes))
            .then_with(|| a.id.cmp(&b.id))
    })
}

fn random_below(n: usize) -> usize {
    let bytes = crate::random::<8>().unwrap_or([0; 8]);
    (u64::from_le_bytes(bytes) % n.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, load: f64, boxes: u64) -> Candidate {
        Candidate {
            id: id.into(),
            load,
            boxes,
        }
    }

    #[test]
    fn the_least_loaded_of_the_draw_wins_and_ties_go_to_fewer_boxes() {
        let all = vec![
            candidate("a", 0.5, 1),
            candidate("b", 0.2, 9),
            candidate("c", 0.2, 3),
        ];
        assert_eq!(best_of(all.clone(), 3).unwrap().id, "c");
        assert_eq!(best_of(all.clone(), 10).unwrap().id, "c");
        assert!(best_of(Vec::new(), 3).is_none());
        // A draw of one is any node, never a panic.
        let one = best_of(all, 1).unwrap();
        assert!(["a", "b", "c"].contains(&one.id.as_str()));
    }
}
