//! Tenant quotas: limits the admin sets on a tenant's boxes, and what the tenant uses of
//! them. Checked inside the transaction that would go over (a new box, a start), so two
//! concurrent calls cannot both take the last unit.

use berth_protocol::TenantId;
use serde::Serialize;

use crate::db::{Conn, Optional};
use crate::error::{sql, StoreError};

/// A tenant's limits; `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Quota {
    /// Boxes, in any state.
    pub max_boxes: Option<u64>,
    /// Boxes that may have processes (starting, running, paused, stopping).
    pub max_running: Option<u64>,
    /// The sum of its boxes' memory limits (a limit pending for a box's next start counts
    /// when it is the larger).
    pub max_memory_mib: Option<u64>,
    /// The sum of its boxes' volume sizes.
    pub max_disk_mib: Option<u64>,
}

/// A change to a [`Quota`]: for each limit, `None` keeps it, `Some(None)` clears it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaChange {
    pub max_boxes: Option<Option<u64>>,
    pub max_running: Option<Option<u64>>,
    pub max_memory_mib: Option<Option<u64>>,
    pub max_disk_mib: Option<Option<u64>>,
}

impl QuotaChange {
    fn applied_to(&self, quota: Quota) -> Quota {
        Quota {
            max_boxes: self.max_boxes.unwrap_or(quota.max_boxes),
            max_running: self.max_running.unwrap_or(quota.max_running),
            max_memory_mib: self.max_memory_mib.unwrap_or(quota.max_memory_mib),
            max_disk_mib: self.max_disk_mib.unwrap_or(quota.max_disk_mib),
        }
    }
}

/// What a tenant uses of its quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub boxes: u64,
    pub running: u64,
    pub memory_mib: u64,
    pub disk_mib: u64,
}

/// Which limit a call would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaLimit {
    MaxBoxes,
    MaxRunning,
    MaxMemoryMib,
    MaxDiskMib,
}

impl QuotaLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaLimit::MaxBoxes => "max_boxes",
            QuotaLimit::MaxRunning => "max_running",
            QuotaLimit::MaxMemoryMib => "max_memory_mib",
            QuotaLimit::MaxDiskMib => "max_disk_mib",
        }
    }
}

/// A call would take a tenant past one of its limits; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error(
    "tenant quota exceeded: {} is {limit}, the tenant uses {usage} and this needs {requested} more",
    which.as_str()
)]
pub struct QuotaExceeded {
    #[serde(rename = "limit")]
    pub which: QuotaLimit,
    #[serde(rename = "max")]
    pub limit: u64,
    pub usage: u64,
    pub requested: u64,
}

/// The volume size of a box that has none of its own: its template's, now.
pub type TemplateDisk<'a> = &'a dyn Fn(&str) -> u64;

/// The tenant's quota.
pub(crate) fn read(tx: &Conn<'_>, tenant: &TenantId) -> Result<Quota, StoreError> {
    let row: Option<[Option<i64>; 4]> = tx
        .query_row(
            "SELECT max_boxes, max_running, max_memory_mib, max_disk_mib FROM tenants WHERE id = ?1",
            crate::args![tenant.as_str()],
            |row| Ok([row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?]),
        )
        .optional()
        .map_err(sql("read a tenant's quota"))?;
    let [max_boxes, max_running, max_memory_mib, max_disk_mib] =
        row.unwrap_or_default().map(|v| v.map(|v| v as u64));
    Ok(Quota {
        max_boxes,
        max_running,
        max_memory_mib,
        max_disk_mib,
    })
}

/// Sets the changed limits of `tenant`; the new quota, `None` when there is no such tenant.
pub(crate) fn write(
    tx: &Conn<'_>,
    tenant: &TenantId,
    change: &QuotaChange,
) -> Result<Option<Quota>, StoreError> {
    let quota = change.applied_to(read(tx, tenant)?);
    let as_sql = |v: Option<u64>| v.map(|v| v.min(i64::MAX as u64) as i64);
    let n = tx
        .execute(
            "UPDATE tenants SET max_boxes = ?1, max_running = ?2, max_memory_mib = ?3, max_disk_mib = ?4 \
             WHERE id = ?5",
            crate::args![
                as_sql(quota.max_boxes),
                as_sql(quota.max_running),
                as_sql(quota.max_memory_mib),
                as_sql(quota.max_disk_mib),
                tenant.as_str()
            ],
        )
        .map_err(sql("set a tenant's quota"))?;
    Ok((n == 1).then_some(quota))
}

/// What `tenant`'s boxes use now.
pub(crate) fn usage(
    tx: &Conn<'_>,
    tenant: &TenantId,
    template_disk: TemplateDisk<'_>,
) -> Result<Usage, StoreError> {
    // A box counts its memory limit, or the one pending for its next start when larger.
    let rows = tx
        .query_map(
            "SELECT state IN ('starting', 'running', 'stopping', 'paused'), \
             CASE WHEN memory_mib > COALESCE(pending_memory_mib, 0) \
             THEN memory_mib ELSE COALESCE(pending_memory_mib, 0) END, disk_mib, template \
             FROM boxes WHERE tenant_id = ?1",
            crate::args![tenant.as_str()],
            |row| {
                Ok((
                    row.get::<bool>(0)?,
                    row.get::<i64>(1)?,
                    row.get::<Option<i64>>(2)?,
                    row.get::<String>(3)?,
                ))
            },
        )
        .map_err(sql("read a tenant's usage"))?;
    let mut usage = Usage::default();
    for (live, memory_mib, disk_mib, template) in rows {
        usage.boxes += 1;
        usage.running += u64::from(live);
        usage.memory_mib += memory_mib as u64;
        usage.disk_mib += disk_mib.map_or_else(|| template_disk(&template), |d| d as u64);
    }
    Ok(usage)
}

/// One more box for a tenant: what it takes of the quota.
#[derive(Clone, Copy)]
pub(crate) struct NewUse<'a> {
    pub memory_mib: u64,
    /// Its own volume size; `None`: its template's.
    pub disk_mib: Option<u64>,
    pub template: &'a str,
    /// It runs from the start (a claimed pool box), so `max_running` counts it too.
    pub running: bool,
}

/// `Err` when `tenant`'s quota has no room for one more box using `new`.
pub(crate) fn check_new_box(
    tx: &Conn<'_>,
    tenant: &TenantId,
    new: NewUse<'_>,
    template_disk: TemplateDisk<'_>,
) -> Result<(), StoreError> {
    let limits = read(tx, tenant)?;
    if limits == Quota::default() {
        return Ok(());
    }
    let usage = usage(tx, tenant, template_disk)?;
    let disk_mib = new.disk_mib.unwrap_or_else(|| template_disk(new.template));
    check(QuotaLimit::MaxBoxes, limits.max_boxes, usage.boxes, 1)?;
    if new.running {
        check(QuotaLimit::MaxRunning, limits.max_running, usage.running, 1)?;
    }
    check(
        QuotaLimit::MaxMemoryMib,
        limits.max_memory_mib,
        usage.memory_mib,
        new.memory_mib,
    )?;
    check(
        QuotaLimit::MaxDiskMib,
        limits.max_disk_mib,
        usage.disk_mib,
        disk_mib,
    )?;
    Ok(())
}

/// `Err` when `usage + requested` passes `limit`.
pub(crate) fn check(
    which: QuotaLimit,
    limit: Option<u64>,
    usage: u64,
    requested: u64,
) -> Result<(), QuotaExceeded> {
    match limit {
        Some(limit) if usage.saturating_add(requested) > limit => Err(QuotaExceeded {
            which,
            limit,
            usage,
            requested,
        }),
        _ => Ok(()),
    }
}
