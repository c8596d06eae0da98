//! Box state changes: each one checked by the state machine (`state.rs`), applied only at
//! the generation the caller read, and written to the box's event log in the same
//! transaction.

use berth_protocol::{BoxId, TenantId};

use crate::box_outcomes::TransitionFailure;
use crate::box_rows::parse_state;
use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};
use crate::events::STATE_EVENT;
use crate::quota::{self, QuotaLimit};
use crate::state::{check_transition, BoxState};
use crate::{format_time, now, Store};

impl Store {
    /// Moves the box to `to` if its generation is still `expected_generation` and the state
    /// machine allows it; returns the new generation.
    pub fn update_box_state(
        &self,
        id: &BoxId,
        expected_generation: u64,
        to: BoxState,
        reason: Option<&str>,
    ) -> Result<u64, StoreError> {
        self.change_state(id, expected_generation, to, reason, None, |_, _| Ok(()))
    }

    /// Moves the box to `to` as [`Store::update_box_state`] does, for a transition that
    /// failed: `failure` stays on the box (until its next state change), its cause is the
    /// state's reason.
    pub fn fail_box_state(
        &self,
        id: &BoxId,
        expected_generation: u64,
        to: BoxState,
        failure: &TransitionFailure,
    ) -> Result<u64, StoreError> {
        self.change_state(
            id,
            expected_generation,
            to,
            Some(&failure.cause),
            Some(failure),
            |_, _| Ok(()),
        )
    }

    /// Moves a stopped or failed box to `starting` (as [`Store::update_box_state`]) if its
    /// tenant's `max_running` has room: the count and the change are one transaction, so
    /// concurrent starts cannot both take the last unit.
    pub fn begin_start(&self, id: &BoxId, expected_generation: u64) -> Result<u64, StoreError> {
        self.change_state(
            id,
            expected_generation,
            BoxState::Starting,
            None,
            None,
            |tx, tenant| {
                let limits = quota::read(tx, tenant)?;
                if limits.max_running.is_none() {
                    return Ok(());
                }
                // The box itself is not running (the state machine admits `starting` only
                // from `stopped` or `failed`), so it is not in the count.
                let usage = quota::usage(tx, tenant, &|_| 0)?;
                quota::check(QuotaLimit::MaxRunning, limits.max_running, usage.running, 1)?;
                Ok(())
            },
        )
    }

    /// The state change of [`Store::update_box_state`], after `admit` (given the box's
    /// tenant) agreed, all in one transaction.
    fn change_state(
        &self,
        id: &BoxId,
        expected_generation: u64,
        to: BoxState,
        reason: Option<&str>,
        failure: Option<&TransitionFailure>,
        mut admit: impl FnMut(&Conn<'_>, &TenantId) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let (generation, event_seq) = self.db.write(|tx| {
            let row: Option<(String, i64, String, Option<String>, i64)> = tx
                .query_row(
                    "SELECT state, generation, tenant_id, node_id, volume_epoch FROM boxes WHERE id = ?1",
                    crate::args![id.as_str()],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)),
                )
                .optional()
                .map_err(sql("read a box's state"))?;
            let Some((from, generation, tenant, node, epoch)) = row else {
                return Err(StoreError::BoxNotFound { id: id.clone() });
            };
            let generation = generation as u64;
            if generation != expected_generation {
                return Err(StoreError::StaleGeneration {
                    id: id.clone(),
                    expected: expected_generation,
                    actual: generation,
                });
            }
            let from = parse_state(&from)?;
            check_transition(from, to).map_err(|source| StoreError::Transition {
                id: id.clone(),
                source,
            })?;
            let tenant = tenant.parse().map_err(|source| StoreError::CorruptId {
                column: "boxes.tenant_id",
                source,
            })?;
            admit(tx, &tenant)?;
            if to == BoxState::Deleted {
                // Its messages and events go with it (ON DELETE CASCADE), and its id slot is
                // free for the next new box: the caller deletes the row only once the runtime
                // has removed the box's files, mounts and processes.
                tx.execute("DELETE FROM boxes WHERE id = ?1", crate::args![id.as_str()])
                    .map_err(sql("delete a box"))?;
                return Ok((generation, None));
            }
            // The boot token lives only while the box runs, is paused, or is snapshotted (a
            // restore hands the new boot's token over on a channel the old one opens).
            // A failure stays on the box until its next state change.
            tx.execute(
                "UPDATE boxes SET state = ?1, state_reason = ?2, generation = generation + 1, updated_at = ?3, \
                 boot_token = CASE WHEN ?1 IN ('running', 'paused', 'snapshotted') THEN boot_token ELSE NULL END, \
                 failure = ?6 \
                 WHERE id = ?4 AND generation = ?5",
                crate::args![
                    to.as_str(),
                    reason,
                    format_time(now())?,
                    id.as_str(),
                    generation as i64,
                    failure.map(|f| f.to_json().to_string()),
                ],
            )
            .map_err(sql("update a box's state"))?;
            crate::box_runs::follow(tx, id, to, node.as_deref(), epoch as u64)?;
            // Every state change is in the box's event log, in the same transaction.
            let seq = crate::events::last_seq(tx, id)? + 1;
            let mut data = serde_json::json!({"state": to.as_str(), "reason": reason});
            if let Some(failure) = failure {
                data["failure"] = failure.to_json();
            }
            crate::events::insert(tx, id, seq, STATE_EVENT, &data, now())?;
            Ok((generation, Some(seq)))
        })?;
        if let Some(seq) = event_seq {
            self.notify_appended(id, seq);
        }
        Ok(generation + 1)
    }
}
