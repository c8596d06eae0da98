//! `POST/GET /v1/boxes/{ref}/wakeups`, `DELETE …/wakeups/{id}`, and the same asked from
//! inside the box (`berth-wake`, relayed by `lifecycle::wakeups::relay`): check the
//! schedule and the limits for who asks, store the wakeup, tell the scheduler.

use berth_protocol::wake::WakeSchedule;
use berth_protocol::TenantId;
use berth_store::{
    AddedWakeup, BoxRecord, NewWakeup, Wakeup, WakeupKind, WakeupLimits, WakeupOrigin,
};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::wakeups::error::WakeupError;
use crate::lifecycle::wakeups::schedule;
use crate::ops::box_find::find_box;
use crate::ops::message_post::MAX_CONTENT_BYTES;

/// A wakeup as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WakeupView {
    /// `wk_…`.
    pub id: String,
    pub box_id: String,
    pub message: String,
    /// `at`, `in` or `cron`.
    pub kind: &'static str,
    /// `cron` only: the expression and its IANA time zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// The next slot (RFC 3339, UTC).
    pub next_due_at: String,
    /// Slots fired so far (a cron's).
    pub fired: u64,
    /// Slots not fired because the box's own wakeups were past `[wakeups]
    /// box_max_per_hour` (a box-made wakeup's).
    pub skipped: u64,
    /// `api` or `box` (set from inside the box with `berth-wake`).
    pub created_by: &'static str,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WakeupList {
    pub wakeups: Vec<WakeupView>,
}

pub fn view(w: &Wakeup) -> WakeupView {
    let (cron, tz) = match &w.kind {
        WakeupKind::Cron { expr, tz } => (Some(expr.clone()), Some(tz.clone())),
        WakeupKind::At | WakeupKind::In => (None, None),
    };
    WakeupView {
        id: w.id.clone(),
        box_id: w.box_id.to_string(),
        message: w.message.clone(),
        kind: w.kind.as_str(),
        cron,
        tz,
        next_due_at: rfc3339_ms(w.next_due_ms),
        fired: w.fired,
        skipped: w.skipped,
        created_by: w.created_by.as_str(),
        created_at: w.created_at.format(&Rfc3339).unwrap_or_default(),
    }
}

/// Unix milliseconds as RFC 3339 UTC.
pub fn rfc3339_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

pub fn create(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    schedule: &WakeSchedule,
    message: &str,
) -> Result<Wakeup, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    create_for(ctx, &record, schedule, message, WakeupOrigin::Api)
}

/// Makes a wakeup for `record`, with the limits of `origin`.
pub fn create_for(
    ctx: &Ctx,
    record: &BoxRecord,
    schedule: &WakeSchedule,
    message: &str,
    origin: WakeupOrigin,
) -> Result<Wakeup, OpError> {
    if message.is_empty() {
        return Err(WakeupError::EmptyMessage.into());
    }
    if message.len() > MAX_CONTENT_BYTES {
        return Err(WakeupError::MessageTooLarge {
            limit_bytes: MAX_CONTENT_BYTES as u64,
        }
        .into());
    }
    // A wakeup delivers a message: only a box that takes messages can have one.
    if !ctx.box_has_harness(record) {
        return Err(OpError::NoHarness {
            name: record.name.clone(),
        });
    }
    let config = ctx.wakeups.config();
    let plan = schedule::plan(schedule, ctx.wakeups.now_ms(), origin, config)?;
    let from_box = origin == WakeupOrigin::Box;
    let limits = WakeupLimits {
        max_pending: config.max_pending_per_box,
        max_per_hour: from_box.then_some(config.box_max_per_hour),
        max_box_crons: from_box.then_some(config.box_max_crons),
    };
    let new = NewWakeup {
        box_id: &record.id,
        message,
        kind: plan.kind,
        first_due_ms: plan.first_due_ms,
        created_by: origin,
    };
    let name = record.name.clone();
    match ctx.store.add_wakeup(new, limits)? {
        AddedWakeup::Added(w) => {
            tracing::debug!(box_id = %record.id, wakeup = %w.id, due_ms = w.next_due_ms, "wakeup set");
            ctx.wakeups.changed();
            Ok(w)
        }
        AddedWakeup::TooManyPending { max } => {
            Err(WakeupError::TooManyPending { name, max }.into())
        }
        AddedWakeup::TooManyPerHour { max } => {
            Err(WakeupError::TooManyPerHour { name, max }.into())
        }
        AddedWakeup::TooManyCrons { max } => Err(WakeupError::TooManyCrons { name, max }.into()),
    }
}

pub fn list(ctx: &Ctx, tenant: &TenantId, reference: &str) -> Result<Vec<Wakeup>, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    Ok(ctx.store.list_wakeups(&record.id)?)
}

pub fn delete(ctx: &Ctx, tenant: &TenantId, reference: &str, id: &str) -> Result<Wakeup, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    delete_for(ctx, &record, id)
}

pub fn delete_for(ctx: &Ctx, record: &BoxRecord, id: &str) -> Result<Wakeup, OpError> {
    let deleted = ctx.store.delete_wakeup(&record.id, id)?;
    ctx.wakeups.changed();
    deleted.ok_or_else(|| {
        WakeupError::NotFound {
            name: record.name.clone(),
            id: id.to_owned(),
        }
        .into()
    })
}
