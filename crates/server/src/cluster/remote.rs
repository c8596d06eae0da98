//! An API replica's lifecycle verbs: each is an op queued for the box's node, which this
//! replica waits for. One op per box is open at a time (the database's rule), so a verb
//! that finds another op open waits for it to end and queues its own after.
//!
//! A node writes how an op failed as the error its API would have answered
//! ([`OpFailure`]), so a client of a replica sees the same status and code as on one host.

use std::time::{Duration, Instant};

use berth_protocol::{BoxId, ErrorCode};
use berth_store::{BoxRecord, OpState, StoreError};
use serde::{Deserialize, Serialize};

use crate::ctx::Ctx;
use crate::error::OpError;

/// How long a verb waits for its node: a cold boot of a VM under emulation takes minutes.
const OP_DEADLINE: Duration = Duration::from_secs(600);

/// How an op failed, as its node's API would have said it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpFailure {
    pub status: u16,
    pub code: ErrorCode,
    pub message: String,
}

impl OpFailure {
    fn into_op_error(self) -> OpError {
        OpError::OnNode {
            status: self.status,
            code: self.code,
            message: self.message,
        }
    }

    /// An op's stored error: a node's [`OpFailure`], or the store's own words (a node
    /// taken for gone, a restart) as unavailable.
    fn parse(error: &str) -> OpError {
        match serde_json::from_str::<OpFailure>(error) {
            Ok(failure) => failure.into_op_error(),
            Err(_) => OpError::OnNode {
                status: 503,
                code: ErrorCode::Unavailable,
                message: format!("{error}; retry in a moment"),
            },
        }
    }
}

/// Queues op `kind` for the box's node and waits for it; returns the box's row after.
pub async fn run(ctx: &Ctx, id: &BoxId, kind: &str) -> Result<BoxRecord, OpError> {
    let op_id = queue(ctx, id, kind).await?;
    wait(ctx, op_id).await?;
    crate::ops::box_find::reload(ctx, id)
}

/// Queues op `kind` for the box's node without waiting for it to be done.
pub async fn queue(ctx: &Ctx, id: &BoxId, kind: &str) -> Result<u64, OpError> {
    let began = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let record = crate::ops::box_find::reload(ctx, id)?;
        let node = record
            .node_id
            .clone()
            .ok_or_else(|| OpError::NodeUnavailable {
                node: "(none)".into(),
                reason: format!(
                    "box {} was made on a single host and has no node",
                    record.name
                ),
            })?;
        match ctx
            .store
            .enqueue_op(id, &node, kind, &serde_json::json!({}))
        {
            Ok(op_id) => return Ok(op_id),
            // Another op of the box is open: ours follows it.
            Err(StoreError::OpInProgress { .. }) if began.elapsed() < OP_DEADLINE => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for op `op_id` to end; its failure as the node said it.
pub async fn wait(ctx: &Ctx, op_id: u64) -> Result<(), OpError> {
    let began = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let Some(op) = ctx.store.op(op_id)? else {
            // The box was deleted, and its ops with it.
            return Ok(());
        };
        match op.state {
            OpState::Done => return Ok(()),
            OpState::Failed => {
                return Err(OpFailure::parse(op.error.as_deref().unwrap_or("failed")));
            }
            OpState::Queued | OpState::Claimed => {}
        }
        if began.elapsed() > OP_DEADLINE {
            return Err(OpError::NodeUnavailable {
                node: op.node_id,
                reason: format!("op {op_id} ({}) is not done after {OP_DEADLINE:?}", op.kind),
            });
        }
        // The database is the truth and the node writes it: look again, less often as the
        // op takes longer (a boot takes a second, a VM's under emulation minutes).
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}
