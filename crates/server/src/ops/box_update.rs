//! `PATCH /v1/boxes/{ref}`: changes to a box's record after creation.
//!
//! - The sleep ladder (`pause_after_s`, `snapshot_after_s`, `stop_after_s`, `auto_resume`)
//!   applies at once: the reclaimer reads the record at every tick (a rung shorter than the
//!   box has been idle takes it there at the next tick).
//! - `limits` apply at the box's next start. While the box may have processes the new
//!   ones are pending (the view shows both); a stopped box takes them at once.
//! - `disk_mib` only grows (a volume's file system is never shrunk); the next start grows
//!   the volume, by the same rules as a template's larger size (`box_disk.rs`).
//! - `labels` and `env` each replace the box's whole map (`{}` clears it); `env` reaches
//!   the next exec at once and the harness at the next start (`box_env.rs`).
//!
//! A change of limits or disk holds the box's lifecycle lock, so it never lands between a
//! start's read of the record and the runtime's use of it; labels, env and the ladder do
//! not wait for a start in progress.

use std::collections::BTreeMap;

use berth_runtime::Limits;
use berth_store::{BoxChange, BoxLimits, BoxRecord};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_disk;
use crate::ops::box_find::reload;
use crate::validate::{self, LimitsInput, SleepInput};

/// What a client changes; `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoxUpdate {
    pub sleep: SleepInput,
    /// Over the limits the box's next start would apply.
    pub limits: Option<LimitsInput>,
    pub disk_mib: Option<u64>,
    pub labels: Option<BTreeMap<String, String>>,
    pub env: Option<BTreeMap<String, String>>,
}

/// Validates `update` and applies it to the box `record` (the caller's, found by
/// `box_find`); returns the new row.
pub async fn update_box(
    ctx: &Ctx,
    record: &BoxRecord,
    update: BoxUpdate,
) -> Result<BoxRecord, OpError> {
    let sleep = if update.sleep.is_empty() {
        None
    } else {
        let caps = ctx.runtimes.capabilities(&record.runtime);
        Some(validate::sleep(
            update.sleep.over(record.sleep()),
            &record.runtime,
            caps,
        )?)
    };
    if let Some(labels) = &update.labels {
        crate::box_labels::validate(labels)?;
    }
    if let Some(env) = &update.env {
        crate::box_env::validate(env, &ctx.box_egress(record))?;
    }
    let disk_mib = update.disk_mib.map(validate::disk_mib).transpose()?;
    let mut change = BoxChange {
        sleep,
        limits: None,
        disk_mib: None,
        labels: update.labels,
        env: update.env,
    };
    let template_disk = |name: &str| box_disk::template_disk_mib(ctx, name);
    if update.limits.is_none() && disk_mib.is_none() {
        return Ok(ctx.store.update_box(&record.id, &change, &template_disk)?);
    }
    let slot = ctx.boxes.slot(&record.id);
    let _lifecycle = slot.lifecycle.lock().await;
    let record = reload(ctx, &record.id)?;
    if let Some(input) = update.limits {
        let next = record.next_limits();
        let defaults = Limits {
            memory_mib: next.memory_mib,
            pids: next.pids,
            cpus: next.cpus,
        };
        let limits = validate::limits_over(defaults, input)?;
        change.limits = Some(BoxLimits {
            memory_mib: limits.memory_mib,
            pids: limits.pids,
            cpus: limits.cpus,
        });
    }
    let _promising = match disk_mib {
        Some(asked_mib) => {
            let current_mib = volume_mib(ctx, &record);
            if asked_mib < current_mib {
                return Err(OpError::DiskShrink {
                    current_mib,
                    asked_mib,
                });
            }
            // The growth is promised now, with every other box's (as at create).
            let promising = ctx.disk.promising();
            let more = asked_mib.saturating_sub(box_disk::box_disk_mib(ctx, &record)) << 20;
            ctx.disk
                .check_promised("grow a box's volume", box_disk::promised_bytes(ctx)? + more)?;
            change.disk_mib = Some(asked_mib);
            Some(promising)
        }
        None => None,
    };
    Ok(ctx.store.update_box(&record.id, &change, &template_disk)?)
}

/// The size the box's volume has or will have at its next start, whichever is larger.
fn volume_mib(ctx: &Ctx, record: &BoxRecord) -> u64 {
    let image = berth_runtime::volume_image(&ctx.data_dir, &record.id);
    let now = std::fs::metadata(image).map_or(0, |m| m.len() >> 20);
    now.max(box_disk::box_disk_mib(ctx, record))
}
