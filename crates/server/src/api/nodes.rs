//! `GET /v1/nodes`: the cluster's machines, for the admin (`berth node ls`). On a single
//! host the list is empty. Like `/metrics`, it is for operators and left out of the OpenAPI
//! description the SDKs are made from (docs/cluster.md describes it).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use berth_store::NodeRecord;
use serde::Serialize;
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::error::OpError;

/// A node as its operator sees it.
#[derive(Debug, Serialize)]
pub struct NodeView {
    pub id: String,
    pub name: String,
    /// `host:port` where API replicas reach it.
    pub address: String,
    /// `active` (takes new boxes) or `draining`.
    pub state: String,
    /// Whether its lease still runs: `false` is a node taken for gone.
    pub live: bool,
    /// Milliseconds since it last renewed its lease.
    pub lease_age_ms: i64,
    /// Boxes placed on it.
    pub boxes: u64,
    pub cpus: f64,
    pub memory_mib: u64,
    /// What its boxes that are not stopped hold of it.
    pub reserved_cpus: f64,
    pub reserved_memory_mib: u64,
    /// What it said it uses at its last renewal.
    pub used_cpus: f64,
    pub used_memory_mib: u64,
    /// What is left for new boxes: its capacity less the larger of reserved and used.
    pub free_cpus: f64,
    pub free_memory_mib: u64,
    pub labels: BTreeMap<String, String>,
    pub boot_id: String,
    pub registered_at: String,
}

impl From<NodeRecord> for NodeView {
    fn from(n: NodeRecord) -> NodeView {
        NodeView {
            free_cpus: (n.cpus - n.reserved_cpus.max(n.used.cpus)).max(0.0),
            free_memory_mib: n
                .memory_mib
                .saturating_sub(n.reserved_memory_mib.max(n.used.memory_mib)),
            id: n.id,
            name: n.name,
            address: n.address,
            state: n.state.as_str().to_owned(),
            live: n.live,
            lease_age_ms: n.lease_age_ms,
            boxes: n.boxes,
            cpus: n.cpus,
            memory_mib: n.memory_mib,
            reserved_cpus: n.reserved_cpus,
            reserved_memory_mib: n.reserved_memory_mib,
            used_cpus: n.used.cpus,
            used_memory_mib: n.used.memory_mib,
            labels: n.labels,
            boot_id: n.boot_id,
            registered_at: n.registered_at.format(&Rfc3339).unwrap_or_default(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct NodeListView {
    pub nodes: Vec<NodeView>,
}

pub async fn list(State(ctx): State<Ctx>, caller: Caller) -> Result<Json<NodeListView>, ApiError> {
    caller.require_admin()?;
    let nodes = ctx.store.list_nodes().map_err(OpError::from)?;
    Ok(Json(NodeListView {
        nodes: nodes.into_iter().map(NodeView::from).collect(),
    }))
}

/// The node `reference` names: its id or its name.
fn find_node(ctx: &Ctx, reference: &str) -> Result<NodeRecord, OpError> {
    ctx.store
        .list_nodes()?
        .into_iter()
        .find(|n| n.id == reference || n.name == reference)
        .ok_or_else(|| OpError::NodeNotFound {
            reference: reference.to_owned(),
        })
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainBody {
    /// Stop its running boxes now (each is copied and moved once stopped), rather than at
    /// their next sleep.
    #[serde(default)]
    now: bool,
}

/// `POST /v1/nodes/{node}/drain` `{"now":false}`: the node takes no new boxes, and each of
/// its boxes moves to another node once asleep and copied (`cluster::failover`); with
/// `now`, its running boxes are stopped at once. Answers the node.
pub async fn drain(
    State(ctx): State<Ctx>,
    caller: Caller,
    axum::extract::Path(reference): axum::extract::Path<String>,
    crate::api::extract::OptionalJson(body): crate::api::extract::OptionalJson<DrainBody>,
) -> Result<Json<NodeView>, ApiError> {
    caller.require_admin()?;
    if ctx.durable.is_none() {
        return Err(OpError::NoDurableCopies.into());
    }
    let node = find_node(&ctx, &reference)?;
    ctx.store
        .set_node_state(&node.id, berth_store::NodeState::Draining)
        .map_err(OpError::from)?;
    tracing::warn!(node = %node.name, now = body.now, "node draining");
    if body.now {
        let running = ctx
            .store
            .list_boxes_on_node(Some(&node.id))
            .map_err(OpError::from)?
            .into_iter()
            .filter(|b| b.state.may_have_processes());
        for record in running {
            let (ctx, id) = (ctx.clone(), record.id.clone());
            tokio::spawn(async move {
                if let Err(e) =
                    crate::cluster::remote::queue(&ctx, &id, crate::cluster::op_kind::STOP).await
                {
                    tracing::warn!(box_id = %id, error = %berth_runtime::error_chain(&e), "drain: cannot stop the box");
                }
            });
        }
    }
    Ok(Json(NodeView::from(find_node(&ctx, &reference)?)))
}

/// `POST /v1/nodes/{node}/expunge`: the node is gone for good (its operator says so): its
/// boxes move to other nodes now, from their copies, without waiting for the failover's
/// grace. Refused (`409`) while its lease runs. Answers the node.
pub async fn expunge(
    State(ctx): State<Ctx>,
    caller: Caller,
    axum::extract::Path(reference): axum::extract::Path<String>,
) -> Result<Json<NodeView>, ApiError> {
    caller.require_admin()?;
    if ctx.durable.is_none() {
        return Err(OpError::NoDurableCopies.into());
    }
    let node = find_node(&ctx, &reference)?;
    ctx.store.expunge_node(&node.id).map_err(OpError::from)?;
    tracing::warn!(node = %node.name, "node expunged: its boxes move now");
    let lost = berth_store::LostNode {
        id: node.id.clone(),
        name: node.name.clone(),
        lapsed_ms: 0,
    };
    let reason = format!(
        "its node {} was expunged: it starts on another node from its last durable copy",
        node.name
    );
    crate::cluster::failover::move_boxes_off(
        &ctx,
        &lost,
        &reason,
        None,
        crate::cluster::failover::Uncopied::Move,
    )
    .await;
    Ok(Json(NodeView::from(find_node(&ctx, &reference)?)))
}
