//! Work for a node, as rows: the API tier inserts an op for a box's node (in the same
//! transaction as the placement that chose it), the node claims its queued ops, does them,
//! and records how each ended. At most one op per box is open at a time (a unique partial
//! index), so two replicas cannot both start the same box.
//!
//! On Postgres a claim takes rows with `FOR UPDATE SKIP LOCKED`, so claimers never wait on
//! each other, and an insert notifies the channel `berth_ops` with the node's id (delivered
//! at commit) so the node wakes at once instead of polling. On SQLite (one process) the
//! single writer serialises claims.

use std::sync::Mutex;

use berth_protocol::BoxId;
use tokio::sync::watch;

use crate::db::{Conn, Dialect, Optional, Row};
use crate::error::{sql, StoreError};
use crate::Store;

/// The `LISTEN` channel an op insert notifies, with the node's id as the payload.
pub const OPS_CHANNEL: &str = "berth_ops";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpState {
    Queued,
    Claimed,
    Done,
    Failed,
}

impl OpState {
    fn parse(value: &str) -> Result<OpState, StoreError> {
        match value {
            "queued" => Ok(OpState::Queued),
            "claimed" => Ok(OpState::Claimed),
            "done" => Ok(OpState::Done),
            "failed" => Ok(OpState::Failed),
            other => Err(StoreError::CorruptValue {
                column: "ops.state",
                value: other.to_owned(),
            }),
        }
    }
}

/// One op as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub id: u64,
    pub box_id: BoxId,
    pub node_id: String,
    pub kind: String,
    pub args: serde_json::Value,
    pub state: OpState,
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
    /// Unix milliseconds of the database's clock.
    pub created_ms: i64,
    pub claimed_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

/// Rings when ops may have been queued for a node: a node claims after each ring, and
/// also now and then without one (a notification is a hint, the table is the truth). A new
/// bell rings once at once, so the node looks at what was queued before it listened.
pub struct OpBell {
    rung: watch::Receiver<u64>,
}

impl OpBell {
    /// Waits for the next ring since the last one seen (rings while no one waited are
    /// remembered as one).
    pub async fn rung(&mut self) {
        // An error means the store is gone: the caller's next claim says so.
        let _ = self.rung.changed().await;
    }
}

/// The bells of the nodes in this process, by node id (SQLite rings them itself).
#[derive(Default)]
pub(crate) struct Bells(Mutex<Vec<(String, watch::Sender<u64>)>>);

impl Bells {
    fn add(&self, node_id: &str) -> watch::Receiver<u64> {
        let (sender, receiver) = watch::channel(0);
        // As on Postgres once its LISTEN is up: look at the queue first.
        sender.send_modify(|count| *count += 1);
        let mut bells = self.0.lock().unwrap_or_else(|p| p.into_inner());
        bells.retain(|(_, bell)| !bell.is_closed());
        bells.push((node_id.to_owned(), sender));
        receiver
    }

    fn ring(&self, node_id: &str) {
        let bells = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (_, bell) in bells.iter().filter(|(node, _)| node == node_id) {
            bell.send_modify(|count| *count += 1);
        }
    }
}

/// The queue as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpQueue {
    /// Ops queued and not yet claimed.
    pub queued: u64,
    /// Ops claimed and not yet finished.
    pub claimed: u64,
    /// How long the oldest queued op has waited.
    pub oldest_queued_ms: Option<i64>,
}

const COLUMNS: &str = "id, box_id, node_id, kind, args, state, result, error, created_ms, \
    claimed_ms, finished_ms";

fn op_row(row: &Row) -> Result<Op, StoreError> {
    let read = sql("read an operation");
    let box_id: String = row.get(1).map_err(read)?;
    let args: String = row.get(4).map_err(sql("read an operation"))?;
    let state: String = row.get(5).map_err(sql("read an operation"))?;
    let result: Option<String> = row.get(6).map_err(sql("read an operation"))?;
    let json = |column, text: &str| {
        serde_json::from_str(text).map_err(|source| StoreError::CorruptJson { column, source })
    };
    Ok(Op {
        id: row.get(0).map_err(sql("read an operation"))?,
        box_id: box_id.parse().map_err(|source| StoreError::CorruptId {
            column: "ops.box_id",
            source,
        })?,
        node_id: row.get(2).map_err(sql("read an operation"))?,
        kind: row.get(3).map_err(sql("read an operation"))?,
        args: json("ops.args", &args)?,
        state: OpState::parse(&state)?,
        result: result.map(|r| json("ops.result", &r)).transpose()?,
        error: row.get(7).map_err(sql("read an operation"))?,
        created_ms: row.get(8).map_err(sql("read an operation"))?,
        claimed_ms: row.get(9).map_err(sql("read an operation"))?,
        finished_ms: row.get(10).map_err(sql("read an operation"))?,
    })
}

/// Queues an op inside the caller's transaction (a placement inserts its box and the op
/// together); the caller rings the node's bell after the commit ([`Store::ring_op_bell`]).
pub(crate) fn enqueue_in(
    tx: &Conn<'_>,
    box_id: &BoxId,
    node_id: &str,
    kind: &str,
    args: &str,
) -> Result<u64, StoreError> {
    let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
    let expires_ms: Option<i64> = tx
        .query_row(
            "SELECT lease_expires_ms FROM nodes WHERE id = ?1",
            crate::args![node_id],
            |row| row.get(0),
        )
        .optional()
        .map_err(sql("read a node"))?;
    match expires_ms {
        None => {
            return Err(StoreError::NodeNotFound {
                reference: node_id.to_owned(),
            })
        }
        Some(expires_ms) if expires_ms <= now_ms => {
            return Err(StoreError::NodeGone {
                node: node_id.to_owned(),
                lapsed_ms: now_ms - expires_ms,
            })
        }
        Some(_) => {}
    }
    // Asked first: on Postgres a statement that breaks the unique index would abort
    // the whole transaction.
    let open: Option<u64> = tx
        .query_row(
            "SELECT id FROM ops WHERE box_id = ?1 AND state IN ('queued', 'claimed')",
            crate::args![box_id.as_str()],
            |row| row.get(0),
        )
        .optional()
        .map_err(sql("look for an open operation"))?;
    if open.is_some() {
        return Err(StoreError::OpInProgress {
            box_id: box_id.clone(),
        });
    }
    let id: u64 = tx
        .query_row(
            "INSERT INTO ops (box_id, node_id, kind, args, created_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
            crate::args![box_id.as_str(), node_id, kind, args, now_ms],
            |row| row.get(0),
        )
        .map_err(sql("queue an operation"))?;
    if tx.dialect() == Dialect::Postgres {
        tx.execute(
            "SELECT pg_notify(?1, ?2)",
            crate::args![OPS_CHANNEL, node_id],
        )
        .map_err(sql("notify the node"))?;
    }
    Ok(id)
}

impl Store {
    /// A bell that rings when ops may have been queued for node `node_id`.
    pub fn op_bell(&self, node_id: &str) -> OpBell {
        match self.db.as_postgres() {
            Some(pg) => {
                let (sender, rung) = watch::channel(0);
                pg.listen(OPS_CHANNEL, node_id.to_owned(), sender);
                OpBell { rung }
            }
            None => OpBell {
                rung: self.op_bells.add(node_id),
            },
        }
    }

    /// Queues `kind` for `box_id` on its node `node_id`; returns the op's id. Refused when
    /// the box has an op open ([`StoreError::OpInProgress`]) or the node's lease has run
    /// out ([`StoreError::NodeGone`]: the op would never be done).
    pub fn enqueue_op(
        &self,
        box_id: &BoxId,
        node_id: &str,
        kind: &str,
        args: &serde_json::Value,
    ) -> Result<u64, StoreError> {
        let args = args.to_string();
        let id = self
            .db
            .write(|tx| enqueue_in(tx, box_id, node_id, kind, &args))?;
        self.ring_op_bell(node_id);
        Ok(id)
    }

    /// Rings the bell of node `node_id` in this process after an op for it committed (on
    /// Postgres the commit delivered the notification already).
    pub(crate) fn ring_op_bell(&self, node_id: &str) {
        if self.db.dialect() == Dialect::Sqlite {
            self.op_bells.ring(node_id);
        }
    }

    /// Claims up to `limit` of the queued ops of node `node_id` for its boot `boot_id`,
    /// oldest first. Concurrent claimers never get the same op.
    pub fn claim_ops(
        &self,
        node_id: &str,
        boot_id: &str,
        limit: u32,
    ) -> Result<Vec<Op>, StoreError> {
        self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            let lock = match tx.dialect() {
                Dialect::Postgres => "FOR UPDATE SKIP LOCKED",
                Dialect::Sqlite => "",
            };
            let query = format!(
                "UPDATE ops SET state = 'claimed', claimed_ms = ?1, claimed_by_boot = ?2 \
                 WHERE id IN (SELECT id FROM ops WHERE node_id = ?3 AND state = 'queued' \
                 ORDER BY id LIMIT ?4 {lock}) RETURNING {COLUMNS}"
            );
            let rows = tx
                .query_map(
                    &query,
                    crate::args![now_ms, boot_id, node_id, limit],
                    |row| Ok(row.clone()),
                )
                .map_err(sql("claim operations"))?;
            let mut ops = rows.iter().map(op_row).collect::<Result<Vec<_>, _>>()?;
            ops.sort_by_key(|op| op.id);
            Ok(ops)
        })
    }

    /// Records how op `id`, claimed by `boot_id`, ended. An op that is no longer that
    /// boot's to finish (failed meanwhile because the node was taken for gone) is left as
    /// it is: [`StoreError::OpNotFound`].
    pub fn finish_op(
        &self,
        id: u64,
        boot_id: &str,
        outcome: Result<&serde_json::Value, &str>,
    ) -> Result<(), StoreError> {
        let (state, result, error) = match outcome {
            Ok(result) => ("done", Some(result.to_string()), None),
            Err(error) => ("failed", None, Some(error.to_owned())),
        };
        self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            let changed = tx
                .execute(
                    "UPDATE ops SET state = ?1, result = ?2, error = ?3, finished_ms = ?4 \
                     WHERE id = ?5 AND state = 'claimed' AND claimed_by_boot = ?6",
                    crate::args![state, result, error, now_ms, id, boot_id],
                )
                .map_err(sql("finish an operation"))?;
            if changed == 0 {
                return Err(StoreError::OpNotFound { id });
            }
            Ok(())
        })
    }

    pub fn op(&self, id: u64) -> Result<Option<Op>, StoreError> {
        self.db.read(|conn| {
            let query = format!("SELECT {COLUMNS} FROM ops WHERE id = ?1");
            let row = conn
                .query_row(&query, crate::args![id], |row| Ok(row.clone()))
                .optional()
                .map_err(sql("read an operation"))?;
            row.as_ref().map(op_row).transpose()
        })
    }

    /// How many ops wait, and for how long the oldest has.
    pub fn op_queue(&self) -> Result<OpQueue, StoreError> {
        self.db.read(|conn| {
            let now_ms = conn.now_ms().map_err(sql("read the database's clock"))?;
            conn.query_row(
                "SELECT (SELECT COUNT(*) FROM ops WHERE state = 'queued'), \
                 (SELECT COUNT(*) FROM ops WHERE state = 'claimed'), \
                 (SELECT MIN(created_ms) FROM ops WHERE state = 'queued')",
                crate::args![],
                |row| {
                    Ok(OpQueue {
                        queued: row.get(0)?,
                        claimed: row.get(1)?,
                        oldest_queued_ms: row.get::<Option<i64>>(2)?.map(|oldest| now_ms - oldest),
                    })
                },
            )
            .map_err(sql("measure the operation queue"))
        })
    }
}
