//! Warm pools in the store: pool boxes are ordinary box rows of one reserved tenant
//! ([`WARM_POOL_TENANT`], made by migration 13), so every tenant-scoped query (list, get,
//! quota usage) leaves them out without a change, and a claim is one transaction that
//! moves a row to the caller's tenant under the caller's quota.

use std::collections::BTreeMap;

use berth_protocol::{BoxId, TenantId};

use crate::boxes::{labels_json, named, Admission};
use crate::db::Optional;
use crate::error::{sql, StoreError};
use crate::events::STATE_EVENT;
use crate::quota;
use crate::{format_time, now, BoxRecord, BoxState, Store};

/// The id of the tenant that holds every template's pool boxes. Ids are 20 random base32
/// characters, so a random one equals this with odds of 2^-100.
pub const WARM_POOL_TENANT: &str = "tn_warmpoolwarmpoolwarm";

impl crate::BoxRecord {
    /// Whether the box is a warm pool's (kept booted for creates to claim; no tenant's).
    pub fn in_warm_pool(&self) -> bool {
        self.tenant_id.as_str() == WARM_POOL_TENANT
    }
}

/// The tenant of pool boxes.
pub fn warm_pool_tenant() -> TenantId {
    WARM_POOL_TENANT.parse().expect("the reserved id is an id")
}

/// What a claimed pool box becomes: the caller's box under the caller's name.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    pub tenant: &'a TenantId,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub sleep: crate::SleepSettings,
    /// The token the box is handed next (stored with the move: one commit, not two).
    pub boot_token: &'a str,
}

impl Store {
    /// Moves the `running` pool box `id` (at `expected_generation`) to `claim.tenant`, if
    /// that tenant's quota has room for one more box that runs (boxes, running, memory,
    /// disk): the check and the move are one transaction. Its event log restarts with one
    /// state event saying where it came from: nothing of its time in the pool is the new
    /// owner's. [`StoreError::NameTaken`] when the tenant has a box of that name.
    pub fn claim_warm_box(
        &self,
        id: &BoxId,
        expected_generation: u64,
        claim: &Claim<'_>,
        admit: Admission<'_>,
    ) -> Result<BoxRecord, StoreError> {
        self.db.write(|tx| {
            let row: Option<(i64, String, i64, Option<i64>, String)> = tx
                .query_row(
                    "SELECT generation, state, memory_mib, disk_mib, template FROM boxes \
                     WHERE id = ?1 AND tenant_id = ?2",
                    crate::args![id.as_str(), WARM_POOL_TENANT],
                    |row| {
                        Ok((
                            row.get(0)?,
                            row.get(1)?,
                            row.get(2)?,
                            row.get(3)?,
                            row.get(4)?,
                        ))
                    },
                )
                .optional()
                .map_err(sql("read a pool box"))?;
            let Some((generation, state, memory_mib, disk_mib, template)) = row else {
                return Err(StoreError::BoxNotFound { id: id.clone() });
            };
            if generation as u64 != expected_generation || state != BoxState::Running.as_str() {
                return Err(StoreError::StaleGeneration {
                    id: id.clone(),
                    expected: expected_generation,
                    actual: generation as u64,
                });
            }
            let new_use = quota::NewUse {
                memory_mib: memory_mib as u64,
                disk_mib: disk_mib.map(|d| d as u64),
                template: &template,
                running: true,
            };
            quota::check_new_box(tx, claim.tenant, new_use, admit.template_disk)?;
            let at = format_time(now())?;
            let moved = tx.execute(
                "UPDATE boxes SET tenant_id = ?1, name = ?2, labels = ?3, stop_after_s = ?4, \
                 created_at = ?5, updated_at = ?5, generation = generation + 1, boot_token = ?8, \
                 pause_after_s = ?9, snapshot_after_s = ?10, auto_resume = ?11 \
                 WHERE id = ?6 AND generation = ?7",
                crate::args![
                    claim.tenant.as_str(),
                    claim.name,
                    labels_json(claim.labels),
                    claim.sleep.stop_after_s,
                    at,
                    id.as_str(),
                    generation,
                    claim.boot_token,
                    claim.sleep.pause_after_s,
                    claim.sleep.snapshot_after_s,
                    claim.sleep.auto_resume,
                ],
            );
            named(moved, claim.name, "claim a pool box")?;
            tx.execute("DELETE FROM events WHERE box_id = ?1", crate::args![id.as_str()])
                .map_err(sql("clear a pool box's events"))?;
            let data = serde_json::json!({"state": BoxState::Running.as_str(), "reason": "claimed from the warm pool"});
            crate::events::insert(tx, id, 1, STATE_EVENT, &data, now())?;
            Ok(())
        })?;
        self.notify_appended(id, 1);
        self.get_box(id)?
            .ok_or_else(|| StoreError::BoxNotFound { id: id.clone() })
    }
}
