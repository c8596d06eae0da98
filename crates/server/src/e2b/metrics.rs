//! Sandbox metrics (`GET /sandboxes/{id}/metrics`, `GET /sandboxes/metrics`) from what
//! berth measures of a box now: the memory its runtime says it holds, its volume's size and
//! free space (read from the image's superblock), its CPU and memory limits. berth keeps no
//! history, so a running sandbox has one sample, taken at the call, and a paused one none.
//! CPU use and the page cache are not measured: `cpuUsedPct` and `memCache` are 0.

use berth_protocol::TenantId;
use berth_store::BoxRecord;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ctx::Ctx;
use crate::e2b::error::E2bError;
use crate::e2b::lookup::find;
use crate::e2b::view::{cpu_count, state};
use crate::e2b::wire::{SandboxMetric, SandboxState, SandboxesWithMetrics};

/// At most this many sandboxes in one `GET /sandboxes/metrics`.
pub const MAX_IDS: usize = 100;

/// The sandbox's samples between `start_s` and `end_s` (Unix seconds, both optional).
pub async fn of_sandbox(
    ctx: &Ctx,
    tenant: &TenantId,
    sandbox_id: &str,
    start_s: Option<i64>,
    end_s: Option<i64>,
) -> Result<Vec<SandboxMetric>, E2bError> {
    let (record, _) = find(ctx, tenant, sandbox_id)?;
    let now_s = OffsetDateTime::now_utc().unix_timestamp();
    let in_window = start_s.is_none_or(|s| s <= now_s) && end_s.is_none_or(|e| now_s <= e);
    if !in_window || state(&record) != SandboxState::Running {
        return Ok(Vec::new());
    }
    Ok(vec![sample(ctx, &record).await])
}

/// A sample of each running sandbox named in `ids` (comma-separated); ids of no running
/// sandbox of the tenant are left out.
pub async fn of_sandboxes(
    ctx: &Ctx,
    tenant: &TenantId,
    ids: &str,
) -> Result<SandboxesWithMetrics, E2bError> {
    let ids: Vec<&str> = ids
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .collect();
    if ids.is_empty() || ids.len() > MAX_IDS {
        return Err(E2bError::InvalidQuery {
            param: "sandbox_ids",
            rule: "1 to 100 comma-separated sandbox ids",
        });
    }
    let mut out = SandboxesWithMetrics {
        sandboxes: Default::default(),
    };
    for id in ids {
        let record = match find(ctx, tenant, id) {
            Ok((record, _)) => record,
            Err(E2bError::SandboxNotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        if state(&record) == SandboxState::Running {
            out.sandboxes
                .insert(id.to_owned(), sample(ctx, &record).await);
        }
    }
    Ok(out)
}

async fn sample(ctx: &Ctx, record: &BoxRecord) -> SandboxMetric {
    let now = OffsetDateTime::now_utc();
    let mem_used = match ctx.runtime_of(record) {
        Ok(runtime) => runtime.memory_held(&record.id).await.unwrap_or_else(|e| {
            tracing::warn!(box_id = %record.id, error = %berth_runtime::error_chain(&e), "cannot measure the box's memory");
            None
        }),
        Err(_) => None,
    };
    let volume =
        berth_image::volume_usage(&berth_runtime::volume_image(&ctx.data_dir, &record.id)).ok();
    SandboxMetric {
        timestamp: now.format(&Rfc3339).unwrap_or_default(),
        timestamp_unix: now.unix_timestamp(),
        cpu_count: cpu_count(record.cpus),
        cpu_used_pct: 0.0,
        mem_used: mem_used.unwrap_or(0),
        mem_total: record.memory_mib << 20,
        mem_cache: 0,
        disk_used: volume
            .as_ref()
            .map_or(0, |v| v.size_bytes.saturating_sub(v.free_bytes)),
        disk_total: volume.as_ref().map_or(0, |v| v.size_bytes),
    }
}
