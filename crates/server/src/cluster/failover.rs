//! Boxes of a lost node start elsewhere: one of the cluster's singleton jobs
//! (`cluster::jobs`). A node whose lease ran out has, by then, stopped its boxes itself
//! (`node_agent`: it fences itself once it cannot renew for a lease's length); after
//! [`FAILOVER_GRACE`] more, each of its boxes is moved to a live node that fits it, the way
//! a new box is placed, its volume epoch raised and its run ended
//! (`berth_store::Store::move_box`), under the jobs lease's term. Its next start, on the new
//! node, restores its volume from its newest durable copy; a box with messages waiting is
//! woken at once. A node that comes back finds its boxes gone and drops what it held of
//! them. A box no live node fits waits on the lost node until one does, and so does a box
//! that ran but has no copy yet (its files are only there; an expunge moves it anyway).

use std::time::Duration;

use berth_runtime::error_chain;
use berth_store::{BoxRecord, LostNode, Placement};

use crate::cluster::op_kind::WAKE;
use crate::cluster::role::LEASE_TTL;
use crate::ctx::Ctx;

/// How long after a node's lease ran out its boxes are moved: time for the node, which
/// fences itself when it could not renew for a lease's length, to have stopped them.
pub const FAILOVER_GRACE: Duration = Duration::from_secs(10);
/// How often the job looks for lost and draining nodes.
const EVERY: Duration = Duration::from_secs(1);
/// How many nodes a move draws and compares, as a placement does.
const SAMPLE: usize = 3;

pub fn spawn(ctx: Ctx) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Boxes said to wait for their lost node, so each is said once.
        let mut said_waiting = std::collections::HashSet::new();
        loop {
            tokio::time::sleep(EVERY).await;
            let lost = match ctx.store.lost_nodes(FAILOVER_GRACE) {
                Ok(lost) => lost,
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "failover: cannot look for lost nodes");
                    continue;
                }
            };
            let fence = ctx.jobs.fence();
            for node in lost {
                let reason = reason_lost(&node);
                let moves =
                    move_boxes_off(&ctx, &node, &reason, fence.as_ref(), Uncopied::Wait).await;
                for id in moves.waiting {
                    if said_waiting.insert(id.clone()) {
                        tracing::warn!(box_id = %id, node = %node.name, "failover: the box has no durable copy yet; it waits for its node (berth node expunge moves it onto an empty volume)");
                    }
                }
            }
            drain(&ctx, fence.as_ref()).await;
        }
    })
}

fn reason_lost(node: &LostNode) -> String {
    format!(
        "its node {} was lost (no lease renewal for {} s): it starts on another node from its last durable copy",
        node.name,
        (node.lapsed_ms.max(0) as u64 + LEASE_TTL.as_millis() as u64) / 1000
    )
}

/// What a move does with a box that ran but has no durable copy yet (its files are only on
/// the lost node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncopied {
    /// It waits for its node (a failover: the node may come back).
    Wait,
    /// It moves and starts on an empty volume, its log saying so (an expunge: its operator
    /// says the node is gone for good).
    Move,
}

/// What [`move_boxes_off`] did.
#[derive(Debug, Default)]
pub struct Moves {
    pub moved: usize,
    /// Boxes left on the node for [`Uncopied::Wait`].
    pub waiting: Vec<berth_protocol::BoxId>,
}

/// Moves every box of `node` to a live node that fits it, with `reason` on each, under
/// `fence` (the jobs lease's term) when given.
pub async fn move_boxes_off(
    ctx: &Ctx,
    node: &LostNode,
    reason: &str,
    fence: Option<&berth_store::Fence>,
    uncopied: Uncopied,
) -> Moves {
    let boxes = match ctx.store.list_boxes_on_node(Some(&node.id)) {
        Ok(boxes) => boxes,
        Err(e) => {
            tracing::warn!(node = %node.name, error = %error_chain(&e), "failover: cannot list the node's boxes");
            return Moves::default();
        }
    };
    let mut moves = Moves::default();
    for record in boxes {
        let has_files_only_there = record.durable.is_none() && record.last_boot.is_some();
        if has_files_only_there && uncopied == Uncopied::Wait {
            moves.waiting.push(record.id.clone());
            continue;
        }
        match move_one(ctx, &record, &node.id, reason, fence) {
            Ok(Some(to)) => {
                moves.moved += 1;
                tracing::warn!(box_id = %record.id, name = %record.name, from = %node.name, to = %to, "failover: box moved off a lost node");
                wake_if_messages_wait(ctx, &record, &to);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(box_id = %record.id, from = %node.name, error = %error_chain(&e), "failover: cannot move the box yet")
            }
        }
    }
    moves
}

/// Moves the boxes of draining nodes (`berth node drain`) that are asleep and copied: a
/// stopped or failed box whose newest copy was taken since it stopped, or one that never
/// ran (it has nothing to lose). A running box moves after its next sleep.
async fn drain(ctx: &Ctx, fence: Option<&berth_store::Fence>) {
    let nodes = match ctx.store.list_nodes() {
        Ok(nodes) => nodes,
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "drain: cannot list the nodes");
            return;
        }
    };
    for node in nodes
        .iter()
        .filter(|n| n.state == berth_store::NodeState::Draining && n.live)
    {
        let Ok(boxes) = ctx.store.list_boxes_on_node(Some(&node.id)) else {
            continue;
        };
        let reason = format!(
            "its node {} is draining: it moved to another node",
            node.name
        );
        for record in boxes.iter().filter(|b| ready_to_move(b)) {
            match move_one(ctx, record, &node.id, &reason, fence) {
                Ok(Some(to)) => {
                    tracing::info!(box_id = %record.id, from = %node.name, to = %to, "drain: box moved");
                    wake_if_messages_wait(ctx, record, &to);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::info!(box_id = %record.id, error = %error_chain(&e), "drain: cannot move the box yet")
                }
            }
        }
    }
}

/// Whether a box of a draining node can move now without losing a write.
fn ready_to_move(record: &BoxRecord) -> bool {
    use berth_store::BoxState;
    if !matches!(record.state, BoxState::Stopped | BoxState::Failed) {
        return false;
    }
    match &record.durable {
        // Both RFC 3339 in UTC to the second: the copy staged at the stop is not older.
        Some(copy) => {
            let stopped = record
                .updated_at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            copy.taken_at >= stopped
        }
        None => record.last_boot.is_none(),
    }
}

/// Moves `record` off node `from`; the node it went to, `None` when it had left already.
fn move_one(
    ctx: &Ctx,
    record: &BoxRecord,
    from: &str,
    reason: &str,
    fence: Option<&berth_store::Fence>,
) -> Result<Option<String>, berth_store::StoreError> {
    let template_labels = ctx
        .templates
        .get(&record.template)
        .map(|t| t.node_labels.clone())
        .unwrap_or_default();
    let node_labels = crate::box_labels::node_selector(&template_labels, &record.labels);
    let placement = Placement {
        runtime: &record.runtime,
        node_labels: &node_labels,
        sample: SAMPLE,
    };
    let Some(to) = ctx.store.choose_node(record, &placement, from)? else {
        return Err(berth_store::StoreError::NoNode {
            runtime: record.runtime.clone(),
            labels: node_labels,
        });
    };
    Ok(ctx
        .store
        .move_box(&record.id, from, &to, reason, fence)?
        .then_some(to))
}

/// A moved box whose messages wait is woken on its new node.
fn wake_if_messages_wait(ctx: &Ctx, record: &BoxRecord, node: &str) {
    let waiting = ctx
        .store
        .boxes_with_queued_messages(Some(node))
        .map(|ids| ids.contains(&record.id))
        .unwrap_or(false);
    if !waiting {
        return;
    }
    let (ctx, id) = (ctx.clone(), record.id.clone());
    tokio::spawn(async move {
        if let Err(e) = crate::cluster::remote::queue(&ctx, &id, WAKE).await {
            tracing::info!(box_id = %id, error = %error_chain(&e), "failover: no wake queued on the box's new node");
        }
    });
}
