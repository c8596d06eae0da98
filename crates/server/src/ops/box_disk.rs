//! A box's volume size, and what the boxes' sparse volumes may still take of the host's
//! disk: the tenant's disk quota counts the sizes, the host's free-space threshold counts
//! what is not yet written (`disk_space.rs`).

use std::os::unix::fs::MetadataExt;

use berth_store::BoxRecord;

use crate::ctx::Ctx;
use crate::error::OpError;
use berth_runtime::error_chain;

/// The volume size of a box of template `name` that gives none of its own: the template's
/// now (the default when the template is gone).
pub fn template_disk_mib(ctx: &Ctx, name: &str) -> u64 {
    ctx.templates
        .get(name)
        .map_or(berth_runtime::DEFAULT_DISK_MIB, |t| t.disk_mib)
}

/// The volume size the box's next start asks for: its own, else its template's.
pub fn box_disk_mib(ctx: &Ctx, record: &BoxRecord) -> u64 {
    record
        .disk_mib
        .unwrap_or_else(|| template_disk_mib(ctx, &record.template))
}

/// What every box's volume may still take of the data dir's disk: its size (the larger of
/// the image's and the size its next start asks for; before the first start, the latter)
/// less what the sparse image already takes.
pub fn promised_bytes(ctx: &Ctx) -> Result<u64, OpError> {
    let boxes = ctx.store.list_boxes_on_node(ctx.role.node_scope())?;
    Ok(boxes
        .iter()
        .map(|record| {
            let size = box_disk_mib(ctx, record) << 20;
            match std::fs::metadata(berth_runtime::volume_image(&ctx.data_dir, &record.id)) {
                Ok(image) => size.max(image.len()).saturating_sub(image.blocks() * 512),
                Err(_) => size,
            }
        })
        .sum())
}

/// The volume size for the box's start, which asks for `wanted`
/// ([`crate::disk_space::DiskGuard::volume_mib_for_start`]): a volume grows only while its
/// tenant is within its disk quota (a template reload can raise its boxes' sizes past it)
/// and the host's disk has room for every promise.
pub fn volume_mib_for_start(ctx: &Ctx, record: &BoxRecord, wanted: u64) -> u64 {
    let image = berth_runtime::volume_image(&ctx.data_dir, &record.id);
    let current = match std::fs::metadata(&image) {
        Ok(m) if m.len() >> 20 < wanted => m.len() >> 20,
        // No image yet (its size was counted at creation), or no growth.
        _ => return ctx.disk.volume_mib_for_start(&image, wanted, 0),
    };
    let over_quota = ctx
        .store
        .quota_usage(&record.tenant_id, &|name| template_disk_mib(ctx, name))
        .map(|(quota, usage)| quota.max_disk_mib.filter(|max| usage.disk_mib > *max));
    match over_quota {
        Ok(None) => {}
        Ok(Some(max_disk_mib)) => {
            tracing::warn!(box_id = %record.id, current_mib = current, wanted_mib = wanted, max_disk_mib, "volume not grown: the tenant's disk quota");
            return current;
        }
        Err(e) => {
            tracing::warn!(box_id = %record.id, error = %error_chain(&e), "volume not grown: cannot read the tenant's quota");
            return current;
        }
    }
    match promised_bytes(ctx) {
        Ok(promised) => ctx.disk.volume_mib_for_start(&image, wanted, promised),
        Err(e) => {
            tracing::warn!(box_id = %record.id, error = %error_chain(&e), "volume not grown: cannot sum the volumes' promises");
            current
        }
    }
}
