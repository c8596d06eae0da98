//! Changes to a box's record after creation: its idle timeout, limits, volume size, labels
//! and environment (`PATCH /v1/boxes/{ref}`).
//!
//! These are settings, not lifecycle state: they do not bump the box's generation, which
//! orders state changes only, so a label change never makes a concurrent start or stop
//! fail as stale. New limits of a box that may have processes wait in `pending_*` until
//! its next start ([`Store::apply_pending_limits`]); the daemon makes both calls under the
//! box's lifecycle lock, so a start never runs with limits the record no longer shows.

use std::collections::BTreeMap;

use berth_protocol::BoxId;

use crate::box_record::BoxLimits;
use crate::box_rows::COLUMNS;
use crate::boxes::labels_json;
use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};
use crate::quota::{self, QuotaLimit, TemplateDisk};
use crate::sleep::SleepSettings;
use crate::{format_time, now, BoxRecord, Store};

/// What a change sets; `None` keeps the field. The daemon validates every value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoxChange {
    /// The sleep ladder, each rung at once (the daemon checks them against each other).
    pub sleep: Option<SleepSettings>,
    /// All three limits as the box's next start should apply them.
    pub limits: Option<BoxLimits>,
    /// The box's own volume size (the daemon allows growth only).
    pub disk_mib: Option<u64>,
    /// Replaces every label.
    pub labels: Option<BTreeMap<String, String>>,
    /// Replaces the whole environment.
    pub env: Option<BTreeMap<String, String>>,
}

impl Store {
    /// Applies `change` to box `id`, in one transaction with the check of its tenant's
    /// quota (memory and disk may only grow within it). Limits become the box's own at once
    /// when it has no processes, else pending for its next start. Returns the new row.
    pub fn update_box(
        &self,
        id: &BoxId,
        change: &BoxChange,
        template_disk: TemplateDisk<'_>,
    ) -> Result<BoxRecord, StoreError> {
        let at = format_time(now())?;
        self.db.write(|tx| {
            let before = read_box(tx, id)?;
            if let Some(limits) = change.limits {
                let (now_limits, pending) = if !before.state.may_have_processes() {
                    (limits, None)
                } else if limits == before.limits() {
                    // Back to what the running boot has: nothing is pending.
                    (limits, None)
                } else {
                    (before.limits(), Some(limits))
                };
                // A pending raise counts against the quota already: the next start takes it
                // without asking again.
                let counted = |current: BoxLimits, pending: Option<BoxLimits>| {
                    pending.map_or(current.memory_mib, |p| p.memory_mib.max(current.memory_mib))
                };
                let more = counted(now_limits, pending)
                    .saturating_sub(counted(before.limits(), before.pending_limits));
                check_quota(tx, &before, QuotaLimit::MaxMemoryMib, more, template_disk)?;
                tx.execute(
                    "UPDATE boxes SET memory_mib = ?1, pids = ?2, cpus = ?3, pending_memory_mib = ?4, \
                     pending_pids = ?5, pending_cpus = ?6, updated_at = ?7 WHERE id = ?8",
                    crate::args![
                        now_limits.memory_mib,
                        now_limits.pids,
                        now_limits.cpus,
                        pending.map(|p| p.memory_mib),
                        pending.map(|p| p.pids),
                        pending.map(|p| p.cpus),
                        at,
                        id.as_str()
                    ],
                )
                .map_err(sql("change a box's limits"))?;
            }
            if let Some(disk_mib) = change.disk_mib {
                let before_mib = before
                    .disk_mib
                    .unwrap_or_else(|| template_disk(&before.template));
                let more = disk_mib.saturating_sub(before_mib);
                check_quota(tx, &before, QuotaLimit::MaxDiskMib, more, template_disk)?;
                tx.execute(
                    "UPDATE boxes SET disk_mib = ?1, updated_at = ?2 WHERE id = ?3",
                    crate::args![disk_mib, at, id.as_str()],
                )
                .map_err(sql("change a box's volume size"))?;
            }
            if let Some(sleep) = change.sleep {
                tx.execute(
                    "UPDATE boxes SET pause_after_s = ?1, snapshot_after_s = ?2, stop_after_s = ?3, \
                     auto_resume = ?4, updated_at = ?5 WHERE id = ?6",
                    crate::args![
                        sleep.pause_after_s,
                        sleep.snapshot_after_s,
                        sleep.stop_after_s,
                        sleep.auto_resume,
                        at,
                        id.as_str()
                    ],
                )
                .map_err(sql("change a box's sleep settings"))?;
            }
            for (column, map) in [("labels", &change.labels), ("env", &change.env)] {
                if let Some(map) = map {
                    tx.execute(
                        &format!("UPDATE boxes SET {column} = ?1, updated_at = ?2 WHERE id = ?3"),
                        crate::args![labels_json(map), at, id.as_str()],
                    )
                    .map_err(sql("change a box's labels or env"))?;
                }
            }
            read_box(tx, id)
        })
    }

    /// At a start, with the box's lifecycle lock held: its pending limits become its own.
    /// Returns the row as the start should use it.
    pub fn apply_pending_limits(&self, id: &BoxId) -> Result<BoxRecord, StoreError> {
        self.db.write(|tx| {
            tx.execute(
                "UPDATE boxes SET memory_mib = pending_memory_mib, pids = pending_pids, \
                 cpus = pending_cpus, pending_memory_mib = NULL, pending_pids = NULL, \
                 pending_cpus = NULL WHERE id = ?1 AND pending_memory_mib IS NOT NULL \
                 AND pending_pids IS NOT NULL AND pending_cpus IS NOT NULL",
                crate::args![id.as_str()],
            )
            .map_err(sql("apply a box's pending limits"))?;
            read_box(tx, id)
        })
    }
}

fn read_box(conn: &Conn<'_>, id: &BoxId) -> Result<BoxRecord, StoreError> {
    let raw = conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM boxes WHERE id = ?1"),
            crate::args![id.as_str()],
            crate::box_rows::RawBox::from_row,
        )
        .optional()
        .map_err(sql("read a box"))?;
    match raw {
        Some(raw) => raw.into_record(),
        None => Err(StoreError::BoxNotFound { id: id.clone() }),
    }
}

/// `Err` when `more` of `which` takes the box's tenant past its quota.
fn check_quota(
    tx: &Conn<'_>,
    record: &BoxRecord,
    which: QuotaLimit,
    more: u64,
    template_disk: TemplateDisk<'_>,
) -> Result<(), StoreError> {
    if more == 0 {
        return Ok(());
    }
    let limits = quota::read(tx, &record.tenant_id)?;
    let usage = quota::usage(tx, &record.tenant_id, template_disk)?;
    let (limit, used) = match which {
        QuotaLimit::MaxMemoryMib => (limits.max_memory_mib, usage.memory_mib),
        QuotaLimit::MaxDiskMib => (limits.max_disk_mib, usage.disk_mib),
        QuotaLimit::MaxBoxes => (limits.max_boxes, usage.boxes),
        QuotaLimit::MaxRunning => (limits.max_running, usage.running),
    };
    quota::check(which, limit, used, more)?;
    Ok(())
}
