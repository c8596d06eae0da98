//! A box's runs (`box_runs`): a row from each start to the stop that ends it, naming the
//! node and the volume epoch it ran with. Written in the transaction of each state change
//! ([`follow`]), and by a failover that takes a lost node's boxes (their runs end then). A
//! unique index over the runs not ended makes the database itself refuse a second running
//! copy of a box.

use berth_protocol::BoxId;

use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};
use crate::state::BoxState;
use crate::{format_time, now};

/// Keeps the box's runs in step with its move to `to`: a start opens a run (refused while
/// another is open: the box runs on another node), a move to a state where nothing of it
/// runs ends the open one.
pub(crate) fn follow(
    tx: &Conn<'_>,
    id: &BoxId,
    to: BoxState,
    node: Option<&str>,
    epoch: u64,
) -> Result<(), StoreError> {
    match to {
        BoxState::Starting => {
            let open: Option<Option<String>> = tx
                .query_row(
                    "SELECT node_id FROM box_runs WHERE box_id = ?1 AND ended_at IS NULL",
                    crate::args![id.as_str()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read a box's open run"))?;
            if let Some(elsewhere) = open {
                if elsewhere.as_deref() != node {
                    return Err(StoreError::RunsElsewhere {
                        id: id.clone(),
                        node: elsewhere.unwrap_or_default(),
                    });
                }
                // A start after a crash of this very node: the old run is over.
                end(tx, id)?;
            }
            tx.execute(
                "INSERT INTO box_runs (box_id, node_id, epoch, started_at) VALUES (?1, ?2, ?3, ?4)",
                crate::args![id.as_str(), node, epoch as i64, format_time(now())?],
            )
            .map_err(sql("record a box's run"))?;
        }
        BoxState::Stopped | BoxState::Failed | BoxState::Snapshotted => end(tx, id)?,
        BoxState::Running | BoxState::Paused | BoxState::Stopping | BoxState::Deleted => {}
    }
    Ok(())
}

/// Ends the box's open run, if it has one.
pub(crate) fn end(tx: &Conn<'_>, id: &BoxId) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE box_runs SET ended_at = ?1 WHERE box_id = ?2 AND ended_at IS NULL",
        crate::args![format_time(now())?, id.as_str()],
    )
    .map_err(sql("end a box's run"))?;
    Ok(())
}
