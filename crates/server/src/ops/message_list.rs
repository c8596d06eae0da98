//! `GET /v1/boxes/{ref}/messages`: the box's messages with their delivery state.

use berth_protocol::TenantId;
use berth_store::MessageRecord;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find::find_box;

/// Default and largest page.
pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

pub fn list_messages(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    after: u64,
    limit: Option<u32>,
) -> Result<Vec<MessageRecord>, OpError> {
    let limit = page_limit(limit)?;
    let record = find_box(ctx, tenant, reference)?;
    Ok(ctx.store.list_messages(&record.id, after, limit)?)
}

/// `limit`: 1 to [`MAX_LIMIT`], [`DEFAULT_LIMIT`] when absent.
pub(crate) fn page_limit(limit: Option<u32>) -> Result<u32, OpError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(OpError::LimitOutOfRange {
            field: "limit",
            value: f64::from(n),
            min: 1.0,
            max: f64::from(MAX_LIMIT),
        }),
    }
}
